import t from 'tap';
import { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic, blob, http, push } from '../helpers/lfs-http.js';
import { startServer, tmpDir, type RunningServer } from '../helpers/start-server.js';

// What an operator reads on stdout (docs/logging.md): configuration warnings, the start-up line and
// first-run hint, a level on every line, request lines naming repository, forge user, bytes and
// client (X-Forwarded-For only with SVC_TRUST_PROXY), and job events.
const forge = new GitHubEmulator();
await forge.start();
t.teardown(() => forge.stop());
forge.repos.set('acme/game', { private: true });
forge.tokens.set('tok-secret-writer', { login: 'wendy', repos: { 'acme/game': 'push' } });

type Line = Record<string, any>;
const parsed = (server: RunningServer): Line[] =>
  server.logs.flatMap((l) => {
    try {
      return [JSON.parse(l) as Line];
    } catch {
      return [];
    }
  });

/** The first log line matching `pred`, already written or the next one that is. */
const line = (server: RunningServer, pred: (l: Line) => boolean): Promise<Line> => server.waitForLog(pred, 'a matching line');

const dataDir = tmpDir();

t.test('first start: warnings, the start-up line, the first-run hint, request lines behind a trusted proxy', async (t) => {
  const server = await startServer(
    { SVC_FORGE_A_API_URL: forge.url, SVC_AUTH: 'github', SVC_COMPRESION: 'zstd', SVC_LOG_REQUESTS: 'true', SVC_TRUST_PROXY: 'true' },
    { dataDir },
  );
  t.teardown(() => server.stop());
  const logs = parsed(server);
  const warning = logs.find((l) => l.msg === 'configuration warning');
  t.match(warning, { level: 'warn', warning: 'SVC_COMPRESION is not a Stowage variable and is ignored; did you mean SVC_COMPRESSION?' }, 'the typo is named with its fix');
  const start = logs.find((l) => l.msg === 'listening')!;
  t.match(start, {
    level: 'info',
    auth: 'forge_a',
    store: `disk ${dataDir}/objects`,
    compression: 'off',
    index: `${dataDir}/index.sqlite`,
    base_url: server.url,
    dashboard: `${server.url}/-/`,
  }, 'the start-up line says what the server uses');
  t.match(await line(server, (l) => l.msg === 'first run'), { level: 'info', hint: /lfs\.url.*SVC_BASE_URL.*\/-\// }, 'a fresh data dir gets the first-run hint');

  const b = blob(70_000);
  t.equal(await push(server.url, 'acme/game', 'tok-secret-writer', b), 200);
  const get = await http('GET', `${server.url}/acme/game/objects/${b.oid}`, {
    headers: { authorization: basic('tok-secret-writer'), 'x-forwarded-for': '198.51.100.9, 203.0.113.7' },
  });
  t.equal(get.status, 200);
  const download = await line(server, (l) => l.msg === 'request' && l.route === 'download');
  t.match(download, { level: 'info', status: 200, repo: 'acme/game', user_id: String(GitHubEmulator.idOf('wendy')), client: '203.0.113.7', bytes_in: 0, bytes_out: b.size });
  const upload = await line(server, (l) => l.msg === 'request' && l.route === 'upload');
  t.match(upload, { status: 200, repo: 'acme/game', user_id: String(GitHubEmulator.idOf('wendy')), client: '127.0.0.1', bytes_in: b.size });
  const batch = await line(server, (l) => l.msg === 'request' && l.route === 'batch');
  t.ok(batch.bytes_in > 0 && batch.bytes_out > 0, 'JSON bodies counted both ways');

  const refused = await http('GET', `${server.url}/acme/game/objects/${b.oid}`);
  t.equal(refused.status, 401);
  t.match(await line(server, (l) => l.msg === 'request' && l.status === 401), { repo: 'acme/game', user_id: null }, 'no token, no user');

  const audit = await http('POST', `${server.url}/acme/game/objects/audit`, {
    headers: { authorization: basic('tok-secret-writer'), 'content-type': LFS, accept: LFS },
    body: '{}',
  });
  t.equal(audit.status, 200);
  const started = await line(server, (l) => l.msg === 'job started');
  t.match(started, { level: 'info', kind: 'audit', repo: 'acme/game' });
  t.match(await line(server, (l) => l.msg === 'job finished'), { level: 'info', job: started.job, kind: 'audit', outcome: 'clean', objects: 1, bytes: b.size });

  t.equal(await server.stop(), 0);
  for (const l of server.logs) {
    t.notOk(l.includes('tok-secret-writer'), 'no token in any line');
    if (l.startsWith('{')) t.match(JSON.parse(l), { level: /^(info|warn|error)$/ }, `a level on "${JSON.parse(l).msg}"`);
  }
});

t.test('second start: no hint; without SVC_TRUST_PROXY the peer address is the client', async (t) => {
  const server = await startServer({ SVC_FORGE_A_API_URL: forge.url, SVC_LOG_REQUESTS: 'true' }, { dataDir });
  t.teardown(() => server.stop());
  await http('GET', `${server.url}/health`, { headers: { 'x-forwarded-for': '203.0.113.7' } });
  t.match(await line(server, (l) => l.msg === 'request' && l.route === 'health'), { client: '127.0.0.1', repo: null, user_id: null }, 'a forwarded address is not believed');
  // The hint would have been written right after "listening", before any request line.
  t.notOk(parsed(server).some((l) => l.msg === 'first run' || l.msg === 'configuration warning'), 'no hint and no warning');
});
