import type { Counter } from 'prom-client';
import type { Metrics } from '../metrics/registry.js';
import type { RepoName } from '../protocol/repo-name.js';
import { lazyModule } from '../util/lazy-module.js';

const promClient = lazyModule<typeof import('prom-client')>('prom-client');

/** Repositories with a label of their own; later ones are counted as `other` (bounded cardinality). */
const MAX_REPOSITORY_LABELS = 200;


/**
 * Cache mode's series (docs/metrics.md, "Cache mode"), on the server's registry, built at the first
 * event. Hits and misses are counted per download request; bytes served by where they came from. The
 * per-repository series name repositories: STORE_WIDE_SERIES keeps them behind SVC_METRICS_TOKEN.
 */
export class CacheMetrics {
  readonly #metrics: Metrics;
  readonly #inFlight: () => number;
  readonly #cached: () => { bytes: number; objects: number };
  #series: ReturnType<CacheMetrics['build']> | null = null;
  readonly #labelled = new Set<string>();

  constructor(metrics: Metrics, inFlight: () => number, cached: () => { bytes: number; objects: number }) {
    this.#metrics = metrics;
    this.#inFlight = inFlight;
    this.#cached = cached;
  }

  private build() {
    const prom = promClient();
    const registers = [this.#metrics.registry];
    const inFlight = this.#inFlight;
    const cached = this.#cached;
    return {
      hits: new prom.Counter({ name: 'svc_cache_hits_total', help: 'Downloads served from the cache', registers }),
      misses: new prom.Counter({ name: 'svc_cache_misses_total', help: 'Downloads filled from the upstream', registers }),
      repoHits: new prom.Counter({ name: 'svc_cache_repository_hits_total', help: 'Downloads served from the cache, per repository', labelNames: ['repository'], registers }),
      repoMisses: new prom.Counter({ name: 'svc_cache_repository_misses_total', help: 'Downloads filled from the upstream, per repository', labelNames: ['repository'], registers }),
      served: new prom.Counter({ name: 'svc_cache_bytes_served_total', help: 'Object bytes sent to clients, by where they came from', labelNames: ['source'], registers }),
      fetched: new prom.Counter({ name: 'svc_cache_upstream_bytes_total', help: 'Object bytes fetched from the upstream by fills', registers }),
      evictions: new prom.Counter({ name: 'svc_cache_evictions_total', help: 'Objects evicted to stay under SVC_CACHE_MAX_SIZE or above the disk reserve', registers }),
      fills: new prom.Gauge({
        name: 'svc_cache_fills_in_flight',
        help: 'Objects being fetched from the upstream now',
        registers,
        collect() {
          this.set(inFlight());
        },
      }),
      bytes: new prom.Gauge({
        name: 'svc_cache_bytes',
        help: 'Bytes of objects the cache holds',
        registers,
        collect() {
          this.set(cached().bytes);
        },
      }),
    };
  }

  #use(): ReturnType<CacheMetrics['build']> {
    return (this.#series ??= this.build());
  }

  /** Registers every series now, so a scrape shows them at zero before the first download. */
  start(): void {
    this.#use();
  }

  #repository(repo: RepoName): string {
    if (this.#labelled.has(repo.key)) return repo.key;
    if (this.#labelled.size >= MAX_REPOSITORY_LABELS) return 'other';
    this.#labelled.add(repo.key);
    return repo.key;
  }

  hit(repo: RepoName): void {
    this.#count(this.#use().hits, this.#use().repoHits, repo);
  }

  miss(repo: RepoName): void {
    this.#count(this.#use().misses, this.#use().repoMisses, repo);
  }

  #count(total: Counter, perRepo: Counter<'repository'>, repo: RepoName): void {
    total.inc();
    perRepo.inc({ repository: this.#repository(repo) });
  }

  served(source: 'cache' | 'upstream', bytes: number): void {
    this.#use().served.inc({ source }, bytes);
  }

  fetched(bytes: number): void {
    this.#use().fetched.inc(bytes);
  }

  evicted(): void {
    this.#use().evictions.inc();
  }
}
