import { createRequire } from 'node:module';

/** A native addon as loaded: its exports, or null with why not (its first line, for the start-up warning). */
export type Loaded<T> = { readonly addon: T; readonly missing: '' } | { readonly addon: null; readonly missing: string };

/**
 * Loads dist/native/`file`, which `scripts/build-native.mjs` builds; null when it was not built (no
 * compiler or headers) or does not load, and the caller falls back to JavaScript.
 */
export function loadNativeAddon<T>(file: string): Loaded<T> {
  try {
    return { addon: createRequire(import.meta.url)(`../../native/${file}`) as T, missing: '' };
  } catch (e) {
    return { addon: null, missing: (e as Error).message.split('\n')[0] ?? String(e) };
  }
}
