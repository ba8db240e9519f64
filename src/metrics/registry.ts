import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * The one Prometheus registry. Every series this server exposes is declared here and nowhere else,
 * so names and labels stay consistent and documented in one place.
 */
export class Metrics {
  readonly registry = new Registry();

  /** Requests answered, by route name and status class. */
  readonly requests = new Counter({
    name: 'svc_requests_total',
    help: 'HTTP requests answered, by route and status',
    labelNames: ['route', 'status'] as const,
    registers: [this.registry],
  });

  /** Refusals by cause (spec Errors table: lookup_budget_spent, forge_rate_limited, forge_unreachable, …). */
  readonly rejections = new Counter({
    name: 'svc_rejections_total',
    help: 'Requests refused, by cause',
    labelNames: ['cause'] as const,
    registers: [this.registry],
  });

  readonly transferBytes = new Counter({
    name: 'svc_transfer_bytes_total',
    help: 'Object bytes moved through this server',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });

  readonly transfers = new Counter({
    name: 'svc_transfers_total',
    help: 'Object transfers completed, by direction and outcome',
    labelNames: ['direction', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly forgeLookups = new Counter({
    name: 'svc_forge_lookups_total',
    help: 'Forge repository lookups made (cache misses), by result',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  readonly authCacheHits = new Counter({
    name: 'svc_auth_cache_hits_total',
    help: 'Authorizations answered from the grant or refusal cache',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  readonly uploadSeconds = new Histogram({
    name: 'svc_upload_duration_seconds',
    help: 'Time from first byte to durable acknowledgement of an upload',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600],
    registers: [this.registry],
  });

  readonly inFlight = new Gauge({
    name: 'svc_transfers_in_flight',
    help: 'Object transfers currently streaming',
    labelNames: ['direction'] as const,
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'svc_process_' });
  }
}
