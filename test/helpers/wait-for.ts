/**
 * The one way tests wait for something that has no event to listen to. A busy 2-core CI machine can
 * make anything slow, so there is no short window here: the cap only turns a real hang into a clear
 * failure instead of the test runner's timeout.
 */
export const HANG_CAP_MS = 60_000;

/**
 * Re-checks `condition` (spacing growing from 10 ms to 200 ms: pacing, not a deadline) until it returns
 * something other than null, undefined or false, and resolves with that. Rejects naming `what` only
 * after `capMs` without it.
 */
export async function waitFor<T>(condition: () => T | Promise<T>, what: string, capMs = HANG_CAP_MS): Promise<Exclude<T, null | undefined | false>> {
  const until = Date.now() + capMs;
  for (let spacing = 10; ; spacing = Math.min(200, spacing * 2)) {
    const found = await condition();
    if (found !== null && found !== undefined && found !== false) return found as Exclude<T, null | undefined | false>;
    if (Date.now() > until) throw new Error(`gave up after ${capMs / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, spacing));
  }
}

/** `event`, or a rejection naming `what` if it has not happened after `capMs` (a hang, not slowness). */
export function capped<T>(event: Promise<T>, what: string, capMs = HANG_CAP_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`gave up after ${capMs / 1000} s waiting for ${what}`)), capMs);
    timer.unref();
  });
  return Promise.race([event, hang]).finally(() => clearTimeout(timer));
}

/**
 * `capped(event)`, with the process kept alive meanwhile: for events that fire from an unref'd timer
 * (an idle spell ending), which alone would let the test process exit before they happen.
 */
export async function cappedHeld<T>(event: Promise<T>, what: string, capMs = HANG_CAP_MS): Promise<T> {
  const hold = setTimeout(() => undefined, capMs); // ref'd: only keeps the loop alive
  try {
    return await capped(event, what, capMs);
  } finally {
    clearTimeout(hold);
  }
}
