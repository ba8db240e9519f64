import { setFlagsFromString } from 'node:v8';

// V8's default: each scavenge that finds the young generation busy doubles its semi-spaces, up to 8 MiB.
const GROWTH_FACTOR = 2;

// Imported first by main.ts: start-up's short-lived objects would otherwise grow the young generation
// to 2 × 8 MiB that stays resident, nearly empty, until the process rests.
setFlagsFromString('--semi-space-growth-factor=1');

/** Lets the young generation grow again as V8 sees fit (called once listening). */
export function endStartupHeap(): void {
  setFlagsFromString(`--semi-space-growth-factor=${GROWTH_FACTOR}`);
}
