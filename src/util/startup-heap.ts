import { setFlagsFromString } from 'node:v8';

// V8's default: each scavenge that finds the young generation busy doubles its semi-spaces, up to 8 MiB.
const GROWTH_FACTOR = 2;

// Imported first by main.ts, before the server's modules are compiled and before start-up, whose
// short-lived objects would grow the young generation to 2 × 8 MiB that then stays resident, nearly
// empty, until about 10 s of rest. Held at its initial size meanwhile, it never grows for that.
setFlagsFromString('--semi-space-growth-factor=1');

/**
 * Lets the young generation grow again as V8 sees fit (called once listening): transfers are
 * served exactly as before, with the semi-spaces grown by their first burst of garbage.
 */
export function endStartupHeap(): void {
  setFlagsFromString(`--semi-space-growth-factor=${GROWTH_FACTOR}`);
}
