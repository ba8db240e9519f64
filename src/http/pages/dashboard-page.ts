import type { Session } from '../../service/session-service.js';
import type { AccessSettingsView } from '../../service/settings-service.js';
import type { JobView, Overview, RepoListItem } from '../../service/stats-service.js';
import { auditBadge, card, cell as td, esc, formatBytes, formatRatio, htmlPage } from './html.js';
import { jobOutcome, jobProblems, type JobOutcome } from '../../service/maintenance/job-outcome.js';
import { byteTicks, hBarChart, lineChart } from './svg-plots.js';
import type { CacheFigures } from '../../cache/cache-metrics.js';
import { cacheSection } from './cache-repo-page.js';

/** The dashboard's only script: sign-in, access settings through the JSON API (same-origin, so the Origin header the API checks is sent), job redraws. */
const SCRIPT = `
const $ = (id) => document.getElementById(id);
const say = (text, ok) => { const m = $('msg'); if (m) { m.textContent = text; m.className = ok ? 'ok' : 'error'; } };
async function call(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (method !== 'GET') init.headers['Content-Type'] = 'application/json';
  if (body !== undefined) init.body = JSON.stringify(body);
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
// Jobs: this section alone is redrawn from /-/jobs, every 2 s while a job runs (to move its bar)
// and every 30 s otherwise (to show a job started elsewhere).
const jobsDelay = () => { const box = $('jobs'); return box && box.dataset.running !== '0' ? 2000 : 30000; };
async function pollJobs() {
  const box = $('jobs');
  if (!box) return;
  try {
    const res = await fetch('/-/jobs', { credentials: 'same-origin', headers: { Accept: 'text/html' } });
    if (res.ok) box.outerHTML = await res.text();
  } catch (e) { /* the server is restarting: try again at the next tick */ }
  setTimeout(pollJobs, jobsDelay());
}
if ($('jobs')) setTimeout(pollJobs, jobsDelay());
// Figures and plots: the whole page again every minute, unless the form is being edited.
if ($('overview')) setInterval(() => { if (!document.querySelector('form :focus')) location.reload(); }, 60000);
`;

const HEADER_TITLE = '<h1>Stowage</h1><span class="muted">dashboard</span>';

export function renderSignIn(): { html: string; headers: Record<string, string> } {
  const body =
    `<h2>Sign in</h2><form id="signin-form" class="panel" autocomplete="off">` +
    `<label>Forge token<span class="hint">A token of a forge administrator, or of an admin of the repository named by SVC_ADMIN_REPO. It is checked with the forge and not kept.</span>` +
    `<input id="token" type="password" name="token" required></label>` +
    `<div class="actions"><button id="signin" type="submit">Sign in</button></div><div id="msg" role="status"></div></form>`;
  return htmlPage('Stowage dashboard', HEADER_TITLE, body, SCRIPT);
}

/** A job row: the JobView, plus what the runner's view adds when present (outcome, report, error). */
type JobRow = JobView & { readonly outcome?: string | null; readonly report?: unknown; readonly error?: string | null };

const OUTCOME_TEXT: Record<JobOutcome, string> = {
  clean: 'clean',
  problems: 'problems found',
  failed: 'failed',
  cancelled: 'cancelled',
  interrupted: 'interrupted',
};
const OUTCOME_TONE: Record<JobOutcome, string> = { clean: 'good', problems: 'bad', failed: 'bad', cancelled: '', interrupted: 'warn' };

const repoHref = (key: string): string => `/${key.split('/').map(encodeURIComponent).join('/')}`;
const repoLink = (key: string): string => `<a href="${esc(repoHref(key))}">${esc(key)}</a>`;

const utc = (iso: string): string => `${iso.replace('T', ' ').slice(0, 16)} UTC`;

function counts(j: JobView): string[] {
  return [
    `${esc(j.objects_done)}${j.objects_total === null ? '' : ` / ${esc(j.objects_total)}`}`,
    `${esc(formatBytes(j.bytes_done))}${j.bytes_total === null ? '' : ` / ${esc(formatBytes(j.bytes_total))}`}`,
  ];
}

/** A running job: a progress bar by bytes (objects until bytes are counted) with an accessible name. */
function runningRow(j: JobRow): string {
  const byBytes = j.bytes_total !== null && j.bytes_total > 0;
  const total = byBytes ? j.bytes_total! : j.objects_total;
  const done = byBytes ? j.bytes_done : j.objects_done;
  const name = `${j.kind} of ${j.repository}`;
  const pctDone = total === null || total === 0 ? null : Math.floor((100 * Math.min(done, total)) / total);
  const bar =
    pctDone === null
      ? `<progress aria-label="${esc(`${name}: ${j.state === 'queued' ? 'queued' : 'counting'}`)}"></progress>`
      : `<progress max="${esc(total!)}" value="${esc(Math.min(done, total!))}" aria-label="${esc(`${name}: ${pctDone} % of ${byBytes ? 'bytes' : 'objects'}`)}"></progress> <span class="pct">${pctDone} %</span>`;
  const [objects, bytes] = counts(j);
  return `<tr data-job="${esc(j.id)}">${td('Job', `${esc(j.kind)} <code>${esc(j.id)}</code>`)}${td('Repository', repoLink(j.repository))}${td('State', `<span class="badge">${esc(j.state)}</span>`)}${td('Progress', bar, 'progress')}${td('Objects', objects!, 'num')}${td('Bytes', bytes!, 'num')}</tr>`;
}

/** A finished job: its outcome (never a bare "done"), with what went wrong. */
function finishedRow(j: JobRow): string {
  const outcome = ((j.outcome as JobOutcome | null | undefined) ?? jobOutcome(j.kind, j.state, j.report)) ?? 'failed';
  const detail = outcome === 'problems' ? jobProblems(j.kind, j.report).join(', ') : outcome === 'failed' && j.error ? j.error : '';
  const badge = `<span class="badge ${OUTCOME_TONE[outcome] ?? ''}" data-outcome="${esc(outcome)}">${esc(OUTCOME_TEXT[outcome] ?? outcome)}</span>${detail === '' ? '' : ` <span class="detail">${esc(detail)}</span>`}`;
  const [objects, bytes] = counts(j);
  return `<tr data-job="${esc(j.id)}">${td('Job', `${esc(j.kind)} <code>${esc(j.id)}</code>`)}${td('Repository', repoLink(j.repository))}${td('Outcome', badge)}${td('Objects', objects!, 'num')}${td('Bytes', bytes!, 'num')}${td('Finished', j.finished_at === null ? '' : esc(utc(j.finished_at)))}</tr>`;
}

const NUMERIC = new Set(['Objects', 'Bytes', 'Held']);

function table(head: readonly string[], rows: string, cls: string): string {
  return `<table class="stack ${cls}"><thead><tr>${head.map((h) => `<th${NUMERIC.has(h) ? ' class="num"' : ''}>${esc(h)}</th>`).join('')}</tr></thead><tbody>${rows}</tbody></table>`;
}

/** The jobs section, also served alone at /-/jobs for the script to redraw while a job runs. */
export function renderJobs(jobs: { readonly running: readonly JobRow[]; readonly recent: readonly JobRow[] }): string {
  const running =
    jobs.running.length === 0 ? '<p class="muted">No job is running.</p>' : table(['Job', 'Repository', 'State', 'Progress', 'Objects', 'Bytes'], jobs.running.map(runningRow).join(''), 'jobs');
  const recent =
    jobs.recent.length === 0 ? '<p class="muted">No recent jobs.</p>' : table(['Job', 'Repository', 'Outcome', 'Objects', 'Bytes', 'Finished'], jobs.recent.map(finishedRow).join(''), 'jobs');
  return `<section id="jobs" data-running="${jobs.running.length}"><h2>Running jobs</h2>${running}<h2>Recent jobs</h2>${recent}</section>`;
}

function repositoryList(repos: readonly RepoListItem[], total: number): string {
  if (repos.length === 0) return '<p class="muted">No repository holds objects yet.</p>';
  const audit = (a: RepoListItem['last_audit']): string =>
    a === null ? '<span class="muted">never audited</span>' : auditBadge(a === 'clean');
  const rows = repos
    .map((r) => `<tr>${td('Repository', repoLink(r.repository))}${td('Objects', esc(r.objects.toLocaleString('en-US')), 'num')}${td('Held', esc(formatBytes(r.logical_bytes)), 'num')}${td('Last audit', audit(r.last_audit))}</tr>`)
    .join('');
  return (
    table(['Repository', 'Objects', 'Held', 'Last audit'], rows, 'repos') +
    `<p class="muted">${repos.length < total ? `The first ${esc(repos.length)} of ${esc(total)} by name. ` : ''}A repository's page asks for a forge token that can read it (any user name, the token as password).</p>`
  );
}

export function renderDashboard(session: Session, o: Overview & { cache?: CacheFigures | null }, access: AccessSettingsView, repos: readonly RepoListItem[]): { html: string; headers: Record<string, string> } {
  const t = (iso: string): number => Date.parse(iso);
  const series = o.series;
  // Transfer rate per point: the bytes moved since the previous point, per second.
  const rate = (pick: (p: (typeof series)[number]) => number): [number, number][] =>
    series.slice(1).map((p, i) => [t(p.at), pick(p) / Math.max(1, (t(p.at) - t(series[i]!.at)) / 1000)]);
  const rejections = Object.entries(o.rejections.last_day)
    .filter(([, v]) => v > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([label, value]) => ({ label, value }));
  const savingsBars = [
    { label: 'held by repositories', value: o.logical_bytes, text: formatBytes(o.logical_bytes), tone: 0 },
    { label: 'saved by dedupe', value: o.savings.by_dedupe_bytes, text: formatBytes(o.savings.by_dedupe_bytes), tone: 2 },
    { label: 'saved by compression', value: o.savings.by_compression_bytes, text: formatBytes(o.savings.by_compression_bytes), tone: 2 },
    { label: 'stored on disk', value: o.stored_bytes, text: formatBytes(o.stored_bytes), tone: 1 },
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
    ], (max) => byteTicks(max), 'Bytes')}</div>` +
    `<div class="plot"><h3>Savings</h3>${hBarChart('Savings', savingsBars, formatBytes)}</div>` +
    `<div class="plot"><h3>Transfer rates</h3>${lineChart('Transfer rates', [
      { name: 'uploaded', points: rate((p) => p.upload_bytes) },
      { name: 'downloaded', points: rate((p) => p.download_bytes) },
    ], (max) => byteTicks(max, '/s'), 'Bytes per second')}</div>` +
    `<div class="plot"><h3>Rejections by cause, last 24 h</h3>${hBarChart('Rejections by cause', rejections, String, 'no rejections')}</div>` +
    `</div>` +
    (o.cache ? cacheSection(o.cache) : '') +
    `<h2>Repositories</h2>${repositoryList(repos, o.repositories)}` +
    renderJobs(o.jobs) +
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
