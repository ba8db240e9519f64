import { spawnSync } from 'node:child_process';
import { closeSync, openSync, readFileSync, readSync, writeFileSync, writeSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, blob, http, push } from '../helpers/lfs-http.js';
import { startServer, tmpDir, waitForFile } from '../helpers/start-server.js';

// The monitoring kit shipped in deploy/ (docs/metrics.md): the alert rules pass Prometheus' own
// checks and unit tests, the Grafana dashboard's queries parse, and every series either of them
// names is one a real server exports on /metrics.
const ROOT = resolve(fileURLToPath(import.meta.url), '../../../..');
const ALERTS = join(ROOT, 'deploy/prometheus/alerts.yml');
const ALERT_TESTS = join(ROOT, 'deploy/prometheus/alerts.test.yml');
const DASHBOARD = join(ROOT, 'deploy/grafana/stowage.json');
/** Series Prometheus makes itself, not the server: `up` is the scrape's own outcome. */
const MADE_BY_PROMETHEUS = new Set(['up']);

function promtool(t: Test, args: string[]): void {
  const r = spawnSync('promtool', args, { encoding: 'utf8' });
  if ((r.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    t.fail('promtool is not installed: apt-get install -y --no-install-recommends prometheus (Debian ships promtool in the prometheus package)');
    return;
  }
  t.equal(r.status, 0, `promtool ${args.join(' ')}${r.status === 0 ? '' : `: ${r.stdout}${r.stderr}`}`);
}

/** Every `expr` in the alert rules (one per line: the file writes each on one line). */
function alertExpressions(): string[] {
  return [...readFileSync(ALERTS, 'utf8').matchAll(/^\s+expr: (.+)$/gm)].map((m) => m[1]!.trim());
}

interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { h: number; w: number; x: number; y: number };
  targets?: { expr: string; refId: string }[];
  panels?: Panel[];
}

const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { uid: string; title: string; panels: Panel[]; templating: { list: { name: string; query: unknown }[] } };

/** Every panel query, with Grafana's variables replaced as Grafana would before sending it. */
function dashboardExpressions(): string[] {
  return dashboard.panels
    .flatMap((p) => [p, ...(p.panels ?? [])])
    .flatMap((p) => p.targets ?? [])
    .map((q) => q.expr.replaceAll('$__rate_interval', '1m').replaceAll('$instance', '.*'));
}

const GROUPING = /\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g;
const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset']);

/**
 * The metric names a PromQL expression selects: identifiers outside strings, label matchers, range
 * brackets and grouping lists that are neither keywords nor called as functions.
 */
function seriesIn(expr: string): string[] {
  const names = new Set<string>();
  const src = expr.replace(GROUPING, ' ');
  const token = /"(?:[^"\\]|\\.)*"|\{[^}]*\}|\[[^\]]*\]|\d+(?:ms|[smhdwy])\b|\d+(?:\.\d+)?(?:e[+-]?\d+)?|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?|./gs;
  for (const m of src.matchAll(token)) {
    const [, ident, call] = m;
    if (ident !== undefined && call === undefined && !KEYWORDS.has(ident)) names.add(ident);
  }
  return [...names];
}

/** name{a="x", b=~"y"} → each selector's name and label names, to check labels exist too. */
function selectors(expr: string): { name: string; labels: string[] }[] {
  return [...expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}/g)].map((m) => ({
    name: m[1]!,
    labels: [...m[2]!.matchAll(/([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)/g)].map((l) => l[1]!),
  }));
}

t.test('the selector scanner finds series and nothing else', async (t) => {
  t.same(seriesIn('sum by (le, route) (rate(svc_request_duration_seconds_bucket{instance=~".*", route="batch"}[5m]))'), ['svc_request_duration_seconds_bucket']);
  t.same(seriesIn('svc_data_dir_free_bytes / svc_data_dir_size_bytes < 0.10'), ['svc_data_dir_free_bytes', 'svc_data_dir_size_bytes']);
  t.same(seriesIn('histogram_quantile(0.95, sum without (x) (a_bucket)) * 1e3 > bool b offset 5m'), ['a_bucket', 'b']);
});

t.test('alert rules: promtool check rules and the rules\' unit tests', async (t) => {
  promtool(t, ['check', 'rules', ALERTS]);
  promtool(t, ['test', 'rules', ALERT_TESTS]);
  const names = new Set([...readFileSync(ALERTS, 'utf8').matchAll(/^\s+- alert: (\w+)$/gm)].map((m) => m[1]!));
  // The cases operators need alerts for (disk, forge, budget, audit, readiness, target down).
  for (const a of ['StowageDown', 'StowageNotReady', 'StowageDiskNearlyFull', 'StowageForgeUnreachable', 'StowageForgeRateLimited', 'StowageLookupBudgetSpent', 'StowageAuditFoundCorruption']) {
    t.ok(names.has(a), `alert ${a} is shipped`);
  }
});

t.test('dashboard: a well-formed Grafana dashboard whose every query parses', async (t) => {
  t.equal(dashboard.uid, 'stowage');
  const all = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
  t.equal(new Set(all.map((p) => p.id)).size, all.length, 'panel ids are unique');
  for (const p of all) {
    t.ok(p.gridPos.x >= 0 && p.gridPos.x + p.gridPos.w <= 24, `"${p.title}" fits Grafana's 24 columns`);
    if (p.type !== 'row') t.ok((p.targets ?? []).length > 0 && p.targets!.every((q) => q.expr.trim() !== ''), `"${p.title}" has a query`);
  }
  const titles = all.filter((p) => p.type === 'row').map((p) => p.title);
  t.same(titles, ['Overview', 'Transfers', 'Errors', 'Latency', 'Storage', 'Forge health', 'Jobs and audit', 'Process', 'Cache'], 'the sections operators look for');
  // promtool parses PromQL when it checks a rule file: hand it each query as a recording rule.
  const rules = tmpDir('stowage-dash-');
  const file = join(rules, 'dashboard-queries.yml');
  const exprs = dashboardExpressions();
  writeFileSync(file, `groups:\n  - name: dashboard\n    rules:\n${exprs.map((e, i) => `      - record: dashboard:query_${i}\n        expr: ${JSON.stringify(e)}\n`).join('')}`);
  promtool(t, ['check', 'rules', file]);
});

t.test('every series the dashboard and the alerts name is exported by a running server', async (t) => {
  const forge = new GitHubEmulator();
  await forge.start();
  t.teardown(() => forge.stop());
  forge.repos.set('acme/game', { private: true });
  forge.tokens.set('tok-admin', { login: 'ada', repos: { 'acme/game': 'admin' } });
  forge.tokens.set('tok-late', { login: 'lee', repos: { 'acme/game': 'pull' } });
  // Prometheus scrapes with the metrics token, as the kit's scrape config says (docs/metrics.md).
  const token = 'monitoring-kit-metrics-token';
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_METRICS_TOKEN: token });
  t.teardown(() => server.stop());
  const scrape = async (): Promise<string> => (await http('GET', `${server.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).body.toString('utf8');

  // A little traffic: an upload, a download, a forge outage, and an audit that finds a bad object.
  const good = blob(300_000);
  const bad = blob(200_000);
  t.equal(await push(server.url, 'acme/game', 'tok-admin', good), 200);
  t.equal(await push(server.url, 'acme/game', 'tok-admin', bad), 200);
  t.equal((await http('GET', `${server.url}/acme/game/objects/${good.oid}`, { headers: { authorization: basic('tok-admin') } })).status, 200);
  forge.outage = 'reset';
  t.equal((await http('GET', `${server.url}/acme/game/objects/${good.oid}`, { headers: { authorization: basic('tok-late') } })).status, 503, 'forge down: 503');
  forge.outage = null;

  const before = await scrape();
  t.match(before, /^svc_audit_last_success_timestamp_seconds 0$/m, 'no clean audit yet');
  t.match(before, /^svc_quarantined_objects 0$/m);
  const path = join(server.dataDir, 'objects', bad.oid.slice(0, 2), bad.oid.slice(2, 4), bad.oid);
  await waitForFile(path); // small objects get their own file shortly after the journal acknowledged them
  const fd = openSync(path, 'r+');
  const byte = Buffer.alloc(1);
  readSync(fd, byte, 0, 1, 1000);
  writeSync(fd, Buffer.from([byte[0]! ^ 0xff]), 0, 1, 1000);
  closeSync(fd);
  const audit = async (): Promise<any> =>
    (
      await http('POST', `${server.url}/acme/game/objects/audit`, {
        headers: { authorization: basic('tok-admin'), 'content-type': LFS, accept: LFS },
        body: JSON.stringify({ quarantine: true }),
      })
    ).json();
  t.match(await audit(), { corrupt: 1, quarantined: 1 }, 'the audit finds and quarantines the bad object');
  const afterBad = await scrape();
  t.match(afterBad, /^svc_audit_repositories\{result="problems_found"\} 1$/m, 'one repository with problems');
  t.match(afterBad, /^svc_quarantined_objects 1$/m, 'one object quarantined');
  // The same events in the log (docs/logging.md): written before the audit's answer went out.
  const events = server.logs.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
  t.match(events.find((e) => e.msg === 'object quarantined'), { level: 'warn', repo: 'acme/game', oid: bad.oid, problem: 'corrupt' });
  t.match(events.find((e) => e.msg === 'job finished'), { level: 'warn', kind: 'audit', outcome: 'problems' });
  t.match(afterBad, /^svc_audit_last_success_timestamp_seconds 0$/m, 'still no clean audit');

  const startedClean = Date.now();
  t.match(await audit(), { corrupt: 0, unreadable: 0, complete: true }, 'the next audit skips the quarantined object and is clean');
  const text = await scrape();
  t.match(text, /^svc_audit_repositories\{result="problems_found"\} 0$/m, 'a clean audit clears the problem');
  t.match(text, /^svc_audit_repositories\{result="clean"\} 1$/m);
  const last = Number(/^svc_audit_last_success_timestamp_seconds (\S+)$/m.exec(text)?.[1]);
  t.ok(last * 1000 >= startedClean - 1000 && last * 1000 <= Date.now() + 1000, `last clean audit at ${last}`);

  // The cache panels' series come from a node in cache mode (docs/cache.md), here in front of this one.
  const cache = await startServer({ SVC_UPSTREAM_LFS_URL: `${server.url}/{org}/{repo}`, SVC_METRICS_TOKEN: token, SVC_DISK_RESERVE: '0' });
  t.teardown(() => cache.stop());
  const cacheText = (await http('GET', `${cache.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).body.toString('utf8');
  const exposed = `${text}\n${cacheText}`;
  const typed = new Map([...exposed.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
  const sampleLabels = new Map<string, Set<string>>();
  for (const m of exposed.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? \S+$/gm)) {
    const set = sampleLabels.get(m[1]!) ?? new Set<string>();
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="/g)) set.add(l[1]!);
    sampleLabels.set(m[1]!, set);
  }
  /** Declared (HELP/TYPE, so present once events happen) or sampled; histograms by their suffixes. */
  const exported = (name: string): boolean => {
    if (typed.has(name) || sampleLabels.has(name)) return true;
    const base = /^(.*)_(bucket|sum|count)$/.exec(name)?.[1];
    return base !== undefined && typed.get(base) === 'histogram';
  };
  const used = [...alertExpressions().map((e) => ['alerts', e] as const), ...dashboardExpressions().map((e) => ['dashboard', e] as const)];
  t.ok(used.length > 30, `${used.length} expressions checked`);
  for (const [where, expr] of used) {
    for (const name of seriesIn(expr)) {
      if (MADE_BY_PROMETHEUS.has(name)) continue;
      t.ok(exported(name), `${where}: ${name} is exported`);
    }
    // Label names in matchers exist on the series (Prometheus adds instance and job when scraping).
    for (const s of selectors(expr)) {
      const have = sampleLabels.get(s.name);
      if (have === undefined || MADE_BY_PROMETHEUS.has(s.name)) continue;
      for (const l of s.labels) if (l !== 'instance' && l !== 'job') t.ok(have.has(l), `${where}: ${s.name} has a "${l}" label`);
    }
  }
  // Labelled series the alerts select on specific values exist after the events above.
  t.match(text, /^svc_rejections_total\{cause="forge_unreachable"\} 1$/m, 'the outage was counted');
});
