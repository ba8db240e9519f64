import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/**
 * A CommonJS package loaded at its first use instead of at start. Loading one costs resident
 * memory whether or not it ever runs (undici ~8 MiB: its code, Node's HTTP internals it pulls in,
 * its heap), so packages an idle server or the default configuration never needs (the forge and
 * bucket HTTP client, the worker pools) wait for the first call. `require` is synchronous, so
 * callers keep their synchronous shape; Node caches the module, so later calls cost a field read.
 */
export function lazyModule<T>(name: string): () => T {
  let loaded: T | undefined;
  return () => (loaded ??= require(name) as T);
}
