import { access } from 'node:fs';

/** How often the nudge submits its request: the longest a stranded threadpool request waits. */
export const NUDGE_EVERY_MS = 1000;

/**
 * Submits one cheap request to libuv's threadpool every NUDGE_EVERY_MS, so a request stranded there
 * is picked up within that time.
 *
 * Why: glibc's condition variables can lose a wakeup (sourceware bug 25847; Debian 12 ships glibc
 * 2.36). libuv's threadpool queues a request and signals a sleeping thread; when that signal is
 * lost, every thread sleeps with the request still queued, and it runs only when the next request's
 * signal wakes one. An idle server submits nothing else, so without this a stranded fsync could
 * hold an upload or a retirement until some unrelated request came. The request is an `access` of
 * `path`: one cheap syscall a second.
 */
export function startThreadpoolNudge(path: string, request: (path: string, done: () => void) => void = (p, done) => access(p, done)): () => void {
  const timer = setInterval(() => request(path, () => undefined), NUDGE_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}
