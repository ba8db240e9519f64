import type { RepoStats } from '../../service/stats-service.js';
import { auditBadge, card, cell, esc, figure, formatAge, formatBytes, formatRatio, htmlPage, shortBytes } from './html.js';
import { barChart } from './svg-plots.js';

/**
 * GET /{org}/{repo}: what the repository holds, rendered from the same RepoStats object that
 * objects/stats returns as JSON, so the page and the JSON cannot disagree.
 */
export function renderRepoPage(s: RepoStats): { html: string; headers: Record<string, string> } {
  const bars = s.size_histogram.map((b) => ({
    // Axis labels name the lower bound only (they must fit under a bar); the tooltip gives the range.
    label: b.max === null ? `≥${shortBytes(b.min)}` : b.min === 0 ? `<${shortBytes(b.max)}` : shortBytes(b.min),
    title: b.max === null ? `${formatBytes(b.min)} or more` : `${formatBytes(b.min)} to ${formatBytes(b.max)}`,
    value: b.count,
  }));
  const largest =
    s.largest_objects.length === 0
      ? '<p class="muted">No objects yet.</p>'
      : `<table class="stack"><thead><tr><th>Object</th><th class="num">Size</th><th class="num">Stored</th><th>First uploaded</th></tr></thead><tbody>${s.largest_objects
          .map(
            (o) =>
              `<tr>${cell('Object', `<code title="${esc(o.oid)}">${esc(o.oid.slice(0, 16))}…</code>`)}${cell('Size', esc(formatBytes(o.size)), 'num')}${cell('Stored', esc(formatBytes(o.stored_size)), 'num')}${cell('First uploaded', `${esc(o.created_at.replace('T', ' ').slice(0, 19))} UTC`)}</tr>`,
          )
          .join('')}</tbody></table>`;
  const locks = !s.locks.available
    ? '<p class="muted">Locking is not enabled on this server.</p>'
    : s.locks.items.length === 0
      ? `<p class="muted" data-field="locks_total" data-value="0">No locks held.</p>`
      : `<p class="muted">${figure('locks_total', s.locks.total, String(s.locks.total))} held${s.locks.max_age_seconds === null ? '' : `; a lock older than ${esc(formatAge(s.locks.max_age_seconds))} is stale and may be taken over`}.</p>` +
        `<table class="stack"><thead><tr><th>Path</th><th>Owner</th><th>Age</th><th></th></tr></thead><tbody>${s.locks.items
          .map(
            (l) =>
              `<tr data-lock="${esc(l.id)}">${cell('Path', `<code>${esc(l.path)}</code>`)}${cell('Owner', esc(l.owner))}<td data-label="Age" title="${esc(l.locked_at)}">${esc(formatAge(l.age_seconds))}</td>${cell('', l.stale ? '<span class="badge stale">stale</span>' : '')}</tr>`,
          )
          .join('')}</tbody></table>`;
  const a = s.last_audit;
  const audit =
    a === null
      ? '<p data-field="last_audit">Never audited.</p>'
      : `<p data-field="last_audit">${auditBadge(a.ok)} ` +
        `Finished ${esc(a.finished_at.replace('T', ' ').slice(0, 19))} UTC: ${esc(a.objects)} objects (${esc(formatBytes(a.bytes))}) read back, ` +
        `${esc(a.corrupt)} corrupt, ${esc(a.unreadable)} unreadable${a.complete ? '' : ', <strong>not the whole repository</strong>'}.</p>`;
  const body =
    `<div class="cards">` +
    card('Objects', 'objects', s.objects, s.objects.toLocaleString('en-US')) +
    card('Logical size', 'logical_bytes', s.logical_bytes, formatBytes(s.logical_bytes), 'as uploaded') +
    card('Stored', 'stored_bytes', s.stored_bytes, formatBytes(s.stored_bytes), 'on disk, after compression') +
    card('Saved', 'saving_ratio', s.saving_ratio, formatRatio(s.saving_ratio), `${figure('saved_bytes', s.saved_bytes, formatBytes(s.saved_bytes))}`) +
    `</div>` +
    `<h2>Size distribution</h2><div class="plot narrow">${barChart('Objects by size', bars, 'Objects')}</div>` +
    `<h2>Largest objects</h2>${largest}` +
    `<h2>Locks</h2>${locks}` +
    `<h2>Last audit</h2>${audit}` +
    `<p class="muted">Figures as of ${esc(s.generated_at.replace('T', ' ').slice(0, 19))} UTC · <a href="${esc(`/${s.repository}/objects/stats`)}">JSON</a></p>`;
  return htmlPage(`${s.repository} · Stowage`, `<h1>${esc(s.repository)}</h1><span class="who">Git LFS objects</span>`, body);
}
