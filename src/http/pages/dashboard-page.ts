import type { Session } from '../../service/session-service.js';
import type { AccessSettingsView } from '../../service/settings-service.js';
import type { JobView, Overview } from '../../service/stats-service.js';
import { card, esc, formatBytes, formatRatio, htmlPage } from './html.js';
import { hBarChart, lineChart } from './svg-plots.js';

/**
 * The dashboard's only script: sign in and out, save and reset the access settings, all through
 * the JSON API, then reload so the server renders the new state. Same-origin fetches carry the
 * Origin header the API checks for cookie sessions.
 */
const SCRIPT = `
const $ = (id) => document.getElementById(id);
const say = (text, ok) => { const m = $('msg'); if (m) { m.textContent = text; m.className = ok ? 'ok' : 'error'; } };
async function call(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (body !== undefined) { init.headers['Content-Type'] = 'application/json'; init.body = JSON.stringify(body); }
  const res = await fetch(path, init);
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (!res.ok) throw new Error((data && data.message) || (res.status + ' ' + res.statusText));
  return data;
}
const on = (id, ev, fn) => { const el = $(id); if (el) el.addEventListener(ev, (e) => { e.preventDefault(); fn().catch((err) => say(err.message, false)); }); };
on('signin-form', 'submit', async () => { await call('POST', '/-/api/session', { token: $('token').value }); location.reload(); });
on('signout', 'click', async () => { await call('DELETE', '/-/api/session'); location.reload(); });
on('access-form', 'submit', async () => {
  const view = await call('PUT', '/-/api/access', {
    anonymous_read: $('anonymous_read').checked,
    allowed_repos: $('allowed_repos').value,
    max_object_size: $('max_object_size').value,
    repo_quota: $('repo_quota').value,
  });
  say('Saved: max object size ' + view.max_object_size + ' bytes, quota ' + view.repo_quota + ' bytes.', true);
  setTimeout(() => location.reload(), 800);
});
on('access-reset', 'click', async () => { await call('DELETE', '/-/api/access'); say('Defaults restored.', true); setTimeout(() => location.reload(), 800); });
if ($('overview')) setInterval(() => { if (!document.querySelector('form :focus')) location.reload(); }, 60000);
`;

const HEADER_TITLE = '<h1>Stowage</h1><span class="muted">dashboard</span>';

/** The sign-in form shown without a session. */
export function renderSignIn(): { html: string; headers: Record<string, string> } {
  const body =
    `<h2>Sign in</h2><form id="signin-form" class="panel" autocomplete="off">` +
    `<label>Forge token<span class="hint">A token of a forge administrator, or of an admin of the repository named by SVC_ADMIN_REPO. It is checked with the forge and not kept.</span>` +
    `<input id="token" type="password" name="token" required></label>` +
    `<div class="actions"><button id="signin" type="submit">Sign in</button></div><div id="msg" role="status"></div></form>`;
  return htmlPage('Stowage dashboard', HEADER_TITLE, body, SCRIPT);
}

function jobsTable(jobs: readonly JobView[], empty: string): string {
  if (jobs.length === 0) return `<p class="muted">${esc(empty)}</p>`;
  return `<table><thead><tr><th>Job</th><th>Repository</th><th>State</th><th>Progress</th><th class="num">Objects</th><th class="num">Bytes</th></tr></thead><tbody>${jobs
    .map((j) => {
      const total = j.bytes_total ?? j.objects_total;
      const done = j.bytes_total !== null ? j.bytes_done : j.objects_done;
      const bar = total === null || total === 0 ? '<progress></progress>' : `<progress max="${esc(total)}" value="${esc(Math.min(done, total))}"></progress>`;
      return `<tr><td>${esc(j.kind)} <code>${esc(j.id)}</code></td><td>${esc(j.repository)}</td><td>${esc(j.state)}</td><td>${bar}</td><td class="num">${esc(j.objects_done)}${j.objects_total === null ? '' : ` / ${esc(j.objects_total)}`}</td><td class="num">${esc(formatBytes(j.bytes_done))}${j.bytes_total === null ? '' : ` / ${esc(formatBytes(j.bytes_total))}`}</td></tr>`;
    })
    .join('')}</tbody></table>`;
}

/** The signed-in dashboard: figures, plots, jobs and the access-settings form. */
export function renderDashboard(session: Session, o: Overview, access: AccessSettingsView): { html: string; headers: Record<string, string> } {
  const t = (iso: string): number => Date.parse(iso);
  const series = o.series;
  // Transfer rate per point: the bytes moved since the previous point, per minute.
  const rate = (pick: (p: (typeof series)[number]) => number): [number, number][] =>
    series.slice(1).map((p, i) => [t(p.at), pick(p) / Math.max(1, (t(p.at) - t(series[i]!.at)) / 60_000)]);
  const rejections = Object.entries(o.rejections.last_day)
    .filter(([, v]) => v > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([label, value]) => ({ label, value }));
  const savingsBars = [
    { label: 'held by repositories', value: o.logical_bytes, text: formatBytes(o.logical_bytes), color: '#2f6fde' },
    { label: 'saved by dedupe', value: o.savings.by_dedupe_bytes, text: formatBytes(o.savings.by_dedupe_bytes), color: '#1f9d6a' },
    { label: 'saved by compression', value: o.savings.by_compression_bytes, text: formatBytes(o.savings.by_compression_bytes), color: '#1f9d6a' },
    { label: 'stored on disk', value: o.stored_bytes, text: formatBytes(o.stored_bytes), color: '#e07b24' },
  ];
  const h = o.transfers.last_hour;
  const d = o.transfers.last_day;
  const w = o.workers;
  const body =
    `<div id="overview"><div class="cards">` +
    card('Repositories', 'repositories', o.repositories, o.repositories.toLocaleString('en-US')) +
    card('Objects', 'objects', o.objects, o.objects.toLocaleString('en-US'), `${esc(o.references)} references`) +
    card('Held by repositories', 'logical_bytes', o.logical_bytes, formatBytes(o.logical_bytes)) +
    card('Stored on disk', 'stored_bytes', o.stored_bytes, formatBytes(o.stored_bytes)) +
    card('Saved', 'savings_ratio', o.savings.ratio, formatRatio(o.savings.ratio), esc(formatBytes(o.savings.bytes))) +
    card('Uploads, last hour', 'uploads_last_hour', h.uploads, String(h.uploads), `${esc(formatBytes(h.upload_bytes))}; day: ${esc(d.uploads)}, ${esc(formatBytes(d.upload_bytes))}`) +
    card('Downloads, last hour', 'downloads_last_hour', h.downloads, String(h.downloads), `${esc(formatBytes(h.download_bytes))}; day: ${esc(d.downloads)}, ${esc(formatBytes(d.download_bytes))}`) +
    card('Worker pool', 'workers_busy', w.busy, `${w.busy} / ${w.threads}`, `${esc(w.queued)} queued · ${esc(formatRatio(w.utilization))} busy`) +
    card('Locks held', 'locks', o.locks ?? 0, o.locks === null ? '—' : String(o.locks)) +
    `</div><div class="plots">` +
    `<div class="plot"><h3>Storage over time</h3>${lineChart('Storage over time', [
      { name: 'held by repositories', points: series.map((p) => [t(p.at), p.logical_bytes]) },
      { name: 'stored on disk', points: series.map((p) => [t(p.at), p.stored_bytes]) },
    ], formatBytes)}</div>` +
    `<div class="plot"><h3>Savings</h3>${hBarChart('Savings', savingsBars, formatBytes)}</div>` +
    `<div class="plot"><h3>Transfer rates (per minute)</h3>${lineChart('Transfer rates', [
      { name: 'uploaded', points: rate((p) => p.upload_bytes) },
      { name: 'downloaded', points: rate((p) => p.download_bytes) },
    ], formatBytes)}</div>` +
    `<div class="plot"><h3>Rejections by cause, last 24 h</h3>${hBarChart('Rejections by cause', rejections, String, 'no rejections')}</div>` +
    `</div>` +
    `<h2>Running jobs</h2>${jobsTable(o.jobs.running, 'No job is running.')}` +
    `<h2>Recent jobs</h2>${jobsTable(o.jobs.recent, 'No recent jobs.')}` +
    `</div>` +
    `<h2>Access settings</h2>` +
    `<form id="access-form" class="panel" autocomplete="off">` +
    `<label class="inline"><input id="anonymous_read" type="checkbox"${access.anonymous_read ? ' checked' : ''}> Anonymous read of public repositories</label>` +
    `<label>Allowed repositories<span class="hint">Organisations or org/repo patterns (* matches within a name), separated by commas or spaces. Empty: every repository.</span>` +
    `<textarea id="allowed_repos">${esc(access.allowed_repos.join(', '))}</textarea></label>` +
    `<label>Maximum object size<span class="hint">Bytes or a size such as 500MiB; 0 for no limit. Larger uploads are refused per object.</span>` +
    `<input id="max_object_size" type="text" value="${esc(access.max_object_size)}"></label>` +
    `<label>Quota per repository<span class="hint">Bytes or a size such as 50GiB; 0 for no limit. Downloads are never blocked.</span>` +
    `<input id="repo_quota" type="text" value="${esc(access.repo_quota)}"></label>` +
    `<div class="actions"><button id="access-save" type="submit">Save</button><button id="access-reset" class="secondary" type="button">Restore defaults</button></div>` +
    `<div class="muted" data-field="access_source">${access.source === 'saved' ? `Saved by ${esc(access.updated_by ?? '')} at ${esc((access.updated_at ?? '').replace('T', ' ').slice(0, 19))} UTC.` : 'Defaults from the environment.'}</div>` +
    `<div id="msg" role="status"></div></form>` +
    `<p class="muted">Figures as of ${esc(o.generated_at.replace('T', ' ').slice(0, 19))} UTC; server up since ${esc(o.started_at.replace('T', ' ').slice(0, 19))} UTC.</p>`;
  const header = `${HEADER_TITLE}<span class="who">Signed in as <strong id="user">${esc(session.user.name)}</strong> (${session.user.via === 'site_admin' ? 'forge admin' : 'repository admin'})<button id="signout" class="secondary" type="button">Sign out</button></span>`;
  return htmlPage('Stowage dashboard', header, body, SCRIPT);
}
