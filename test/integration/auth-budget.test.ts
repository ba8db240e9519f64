import t from 'tap';
import { request } from 'undici';
import { ForgePersonality, type ForgeKind } from '../helpers/forge-emulator.js';
import { startServer, type RunningServer } from '../helpers/start-server.js';

/**
 * The lookup budget (docs/behaviour.md, "Caches and budget"): past
 * SVC_AUTH_LOOKUP_BUDGET uncached lookups in a minute the caller gets 503 + Retry-After from this
 * server, counted as lookup_budget_spent; cached answers still pass. That the refusal lifts once the
 * minute has slid past is test/unit/forge/lookup-budget.test.ts, on a clock it moves.
 */

const LFS = 'application/vnd.git-lfs+json';
const BUDGET = 5;

async function batch(server: RunningServer, repo: string, token: string | null): Promise<{ status: number; retryAfter: string | undefined }> {
  const headers: Record<string, string> = { 'content-type': LFS, accept: LFS };
  if (token !== null) headers.authorization = `Bearer ${token}`;
  const res = await request(`${server.url}/${repo}/objects/batch`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ operation: 'download', objects: [{ oid: 'b'.repeat(64), size: 1 }] }),
  });
  await res.body.dump();
  const ra = res.headers['retry-after'];
  return { status: res.statusCode, retryAfter: Array.isArray(ra) ? ra[0] : ra };
}

async function spent(server: RunningServer): Promise<number> {
  const text = await (await request(`${server.url}/metrics`)).body.text();
  const m = /^svc_rejections_total\{cause="lookup_budget_spent"\} (\d+)/m.exec(text);
  return m ? Number(m[1]) : 0;
}

t.test('lookup budget: exhaustion in every personality', async (t) => {
  const kinds: ForgeKind[] = ['forge_a', 'forge_b', 'forge_c', 'forge_d'];
  const setups = await Promise.all(kinds.map(async (kind) => {
    const forge = new ForgePersonality(kind);
    await forge.start();
    t.teardown(() => forge.stop());
    forge.addRepo('acme/app', false);
    forge.addRepo('acme/site', true);
    for (let i = 0; i < 20; i++) forge.grant(`tok-${i}`, 'acme/app', 'push');
    const server = await startServer({ ...forge.env(), SVC_AUTH_LOOKUP_BUDGET: String(BUDGET) });
    t.teardown(() => server.stop());
    return { kind, forge, server };
  }));

  for (const { kind, forge, server } of setups) {
    // BUDGET - 1 tokens and one anonymous lookup spend the whole minute's budget.
    for (let i = 0; i < BUDGET - 1; i++) t.equal((await batch(server, 'acme/app', `tok-${i}`)).status, 200, `${kind}: lookup ${i + 1} within budget`);
    t.equal((await batch(server, 'acme/site', null)).status, 200, `${kind}: anonymous lookup within budget`);
    const lookups = forge.lookupCount();
    const refused = await batch(server, 'acme/app', 'tok-10');
    t.equal(refused.status, 503, `${kind}: past the budget → 503`);
    const ra = Number(refused.retryAfter);
    t.ok(Number.isInteger(ra) && ra >= 1 && ra <= 60, `${kind}: Retry-After issued by this server (${refused.retryAfter})`);
    t.equal(forge.lookupCount(), lookups, `${kind}: the forge was not asked`);
    t.equal(await spent(server), 1, `${kind}: counted as lookup_budget_spent`);
    t.equal((await batch(server, 'acme/app', 'tok-11')).status, 503, `${kind}: still refused`);
    t.equal((await batch(server, 'acme/app', 'tok-0')).status, 200, `${kind}: a cached grant is never refused by the budget`);
    t.equal((await batch(server, 'acme/site', null)).status, 200, `${kind}: a cached anonymous answer neither`);
    t.equal(await spent(server), 2);
  }
});
