import type { CacheFigures, CacheRepositoryFigures } from '../../cache/cache-metrics.js';
import { card, cell, esc, formatBytes, formatRatio, htmlPage } from './html.js';

/** Cache mode's section of the dashboard: hits, misses, bytes by source, fills, evictions, per repository. */
export function cacheSection(c: CacheFigures): string {
  const rows =
    c.repositories.length === 0
      ? '<p class="muted">No downloads through the cache yet.</p>'
      : `<table class="stack"><thead><tr><th>Repository</th><th class="num">Hits</th><th class="num">Misses</th><th class="num">Hit ratio</th></tr></thead><tbody>${c.repositories
          .map(
            (r) =>
              `<tr data-repository="${esc(r.repository)}">${cell('Repository', esc(r.repository))}${cell('Hits', esc(r.hits), 'num')}${cell('Misses', esc(r.misses), 'num')}${cell('Hit ratio', esc(formatRatio(r.hit_ratio)), 'num')}</tr>`,
          )
          .join('')}</tbody></table>`;
  return (
    `<h2>Cache</h2><div class="cards">` +
    card('Hit ratio', 'cache_hit_ratio', c.hit_ratio, formatRatio(c.hit_ratio), `${esc(c.hits)} hits, ${esc(c.misses)} misses since the start`) +
    card('Served from the cache', 'cache_bytes_from_cache', c.bytes_served_from_cache, formatBytes(c.bytes_served_from_cache)) +
    card('Served from the upstream', 'cache_bytes_from_upstream', c.bytes_served_from_upstream, formatBytes(c.bytes_served_from_upstream), `${esc(formatBytes(c.bytes_fetched_from_upstream))} fetched over the upstream link`) +
    card('Fills in flight', 'cache_fills_in_flight', c.fills_in_flight, String(c.fills_in_flight)) +
    card('Evictions', 'cache_evictions', c.evictions, String(c.evictions)) +
    card('Cached', 'cache_bytes', c.cached_bytes, formatBytes(c.cached_bytes), `${esc(c.cached_objects)} objects; cap ${esc(formatBytes(c.max_bytes))}`) +
    `</div><h3>Hit ratio by repository</h3>${rows}`
  );
}

/** A repository's page on a cache: its own hits, misses and hit ratio (objects and locks are the upstream's). */
export function renderCacheRepoPage(r: CacheRepositoryFigures): { html: string; headers: Record<string, string> } {
  const body =
    `<div class="cards">` +
    card('Hit ratio', 'hit_ratio', r.hit_ratio, formatRatio(r.hit_ratio), 'downloads served from the cache') +
    card('Hits', 'hits', r.hits, String(r.hits)) +
    card('Misses', 'misses', r.misses, String(r.misses), 'filled from the upstream') +
    `</div>` +
    `<p class="muted">Since this cache started. Objects and locks are the upstream's · <a href="${esc(`/${r.repository}/objects/stats`)}">JSON</a></p>`;
  return htmlPage(`${r.repository} · Stowage cache`, `<h1>${esc(r.repository)}</h1><span class="who">Git LFS cache</span>`, body);
}
