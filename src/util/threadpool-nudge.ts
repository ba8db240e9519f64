import { access } from 'node:fs';

/** How often the nudge submits its request: the longest a stranded threadpool request waits. */
export const NUDGE_EVERY_MS = 1000;

/**
 * Submits one cheap request (an `access` of `path`) to libuv's threadpool every NUDGE_EVERY_MS, so a
 * request stranded there is picked up within that time: glibc's condition variables can lose a
 * wakeup (sourceware bug 25847), leaving every thread asleep with a request queued until the next
 * one's signal, and an idle server submits nothing else.
 */
export function startThreadpoolNudge(path: string, request: (path: string, done: () => void) => void = (p, done) => access(p, done)): () => void {
  const timer = setInterval(() => request(path, () => undefined), NUDGE_EVERY_MS);
  timer.unref();
  return () => clearInterval(timer);
}
