import { setFlagsFromString } from 'node:v8';

// V8's default: each scavenge that finds the young generation busy doubles its semi-spaces, up to 8 MiB.
const GROWTH_FACTOR = 2;

// Imported first by main.ts, so this runs before the server's modules are compiled (main.ts imports
// app.js dynamically, after this) and before start-up (opening the index, the journal's recovery).
// Those allocate enough short-lived objects to grow the young generation to 2 × 8 MiB, which then
// stays committed and mostly resident although nearly empty (new space 16 MiB committed, 0.4 MiB
// used, just after start) until V8's memory reducer shrinks it after about 10 s of rest. Held at
// its initial size meanwhile, it never grows for start-up's sake (measured: VmRSS −7 MiB).
setFlagsFromString('--semi-space-growth-factor=1');

/**
 * Lets the young generation grow again as V8 sees fit (called once listening): transfers are
 * served exactly as before, with the semi-spaces grown by their first burst of garbage.
 */
export function endStartupHeap(): void {
  setFlagsFromString(`--semi-space-growth-factor=${GROWTH_FACTOR}`);
}
