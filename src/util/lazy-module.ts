import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/**
 * A CommonJS package loaded at its first use: loading costs resident memory whether or not it runs,
 * so what an idle server or the default configuration never needs (undici, the worker pools) waits
 * for the first call. `require` is synchronous and cached, so callers keep their synchronous shape.
 */
export function lazyModule<T>(name: string): () => T {
  let loaded: T | undefined;
  return () => (loaded ??= require(name) as T);
}
