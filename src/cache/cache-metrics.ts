import type { Counter } from 'prom-client';
import type { Metrics } from '../metrics/registry.js';
import type { RepoName } from '../protocol/repo-name.js';
import { lazyModule } from '../util/lazy-module.js';

const promClient = lazyModule<typeof import('prom-client')>('prom-client');

/** Repositories with a label of their own; later ones are counted as `other` (bounded cardinality). */
const MAX_REPOSITORY_LABELS = 200;

/** Hits and misses of one repository since the start (or of `other`, past the labelled ones). */
export interface CacheRepositoryFigures {
  readonly repository: string;
  readonly hits: number;
  readonly misses: number;
  /** hits / (hits + misses), 0..1; 0 before the first download. */
  readonly hit_ratio: number;
}

/** The cache's figures since the start, for the dashboard (GET /-/api/overview's `cache`). */
export interface CacheFigures {
  readonly hits: number;
  readonly misses: number;
  readonly hit_ratio: number;
  readonly bytes_served_from_cache: number;
  readonly bytes_served_from_upstream: number;
  readonly bytes_fetched_from_upstream: number;
  readonly fills_in_flight: number;
  readonly evictions: number;
  readonly cached_bytes: number;
  readonly cached_objects: number;
  readonly max_bytes: number;
  /** The repositories with the most downloads first (at most MAX_REPOSITORY_LABELS, then `other`). */
  readonly repositories: readonly CacheRepositoryFigures[];
}

const ratioOf = (hits: number, misses: number): number => (hits + misses > 0 ? Math.round((hits / (hits + misses)) * 10_000) / 10_000 : 0);

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
  /** Label → [hits, misses]: the same bounded set of repositories as the labelled series. */
  readonly #byRepository = new Map<string, [number, number]>();
  readonly #totals = { hits: 0, misses: 0, fromCache: 0, fromUpstream: 0, fetched: 0, evictions: 0 };

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

  #repository(repo: RepoName): [string, [number, number]] {
    let tally = this.#byRepository.get(repo.key);
    if (tally !== undefined) return [repo.key, tally];
    const label = this.#byRepository.size >= MAX_REPOSITORY_LABELS ? 'other' : repo.key;
    tally = this.#byRepository.get(label) ?? [0, 0];
    this.#byRepository.set(label, tally);
    return [label, tally];
  }

  hit(repo: RepoName): void {
    this.#totals.hits++;
    this.#count(this.#use().hits, this.#use().repoHits, repo, 0);
  }

  miss(repo: RepoName): void {
    this.#totals.misses++;
    this.#count(this.#use().misses, this.#use().repoMisses, repo, 1);
  }

  #count(total: Counter, perRepo: Counter<'repository'>, repo: RepoName, which: 0 | 1): void {
    total.inc();
    const [label, tally] = this.#repository(repo);
    tally[which]++;
    perRepo.inc({ repository: label });
  }

  served(source: 'cache' | 'upstream', bytes: number): void {
    if (source === 'cache') this.#totals.fromCache += bytes;
    else this.#totals.fromUpstream += bytes;
    this.#use().served.inc({ source }, bytes);
  }

  fetched(bytes: number): void {
    this.#totals.fetched += bytes;
    this.#use().fetched.inc(bytes);
  }

  evicted(): void {
    this.#totals.evictions++;
    this.#use().evictions.inc();
  }

  /** One repository's hits and misses (all zero before its first download through the cache). */
  repository(repo: RepoName): CacheRepositoryFigures {
    const [hits, misses] = this.#byRepository.get(repo.key) ?? [0, 0];
    return { repository: repo.key, hits, misses, hit_ratio: ratioOf(hits, misses) };
  }

  /** Every figure since the start; names repositories, so for a server administrator only. */
  figures(maxBytes: number): CacheFigures {
    const t = this.#totals;
    const cached = this.#cached();
    const repositories = [...this.#byRepository]
      .map(([repository, [hits, misses]]) => ({ repository, hits, misses, hit_ratio: ratioOf(hits, misses) }))
      .sort((a, b) => b.hits + b.misses - (a.hits + a.misses));
    return {
      hits: t.hits,
      misses: t.misses,
      hit_ratio: ratioOf(t.hits, t.misses),
      bytes_served_from_cache: t.fromCache,
      bytes_served_from_upstream: t.fromUpstream,
      bytes_fetched_from_upstream: t.fetched,
      fills_in_flight: this.#inFlight(),
      evictions: t.evictions,
      cached_bytes: cached.bytes,
      cached_objects: cached.objects,
      max_bytes: maxBytes,
      repositories,
    };
  }
}
