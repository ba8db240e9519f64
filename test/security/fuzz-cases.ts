import type { GitHubEmulator } from '../helpers/forge-emulator.js';
import { LFS, basic } from '../helpers/lfs-http.js';
import { rawHead, type RawResult } from '../helpers/raw-http.js';

/**
 * The fuzz's request generator and its judge, shared by test/security/fuzz.test.ts (one node, request
 * logging and compression on and off) and test/faults/fuzz-configurations.test.ts (behind nginx, and
 * two cluster nodes). The requests name repositories acme/game (private) and acme/open (public) and
 * the tokens tok-writer, tok-reader and tok-unknown: fuzzForge sets those up on a forge emulator.
 */

/** The repositories and tokens the generated requests use. */
export function fuzzForge(forge: GitHubEmulator): void {
  forge.repos.set('acme/game', { private: true });
  forge.repos.set('acme/open', { private: false });
  forge.tokens.set('tok-writer', { login: 'wendy', repos: { 'acme/game': 'push', 'acme/open': 'push' } });
  forge.tokens.set('tok-reader', { login: 'rita', repos: { 'acme/game': 'pull' } });
}

/** mulberry32: small, fast, and the same sequence for the same seed on every platform. */
export function prng(seed: number): (n: number) => number {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return (((x ^ (x >>> 14)) >>> 0) % n);
  };
}

const OID = 'e'.repeat(64);
const b64 = (s: string): string => Buffer.from(s, 'latin1').toString('base64');

/** One generated request: its bytes, whether uWS may refuse it outright, and whether it is a HEAD. */
export interface Case {
  readonly bytes: string;
  readonly mayBeRefused: boolean;
  readonly head: boolean;
}

export function generator(seed: number): () => Case {
  const rnd = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[rnd(xs.length)]!;
  const chance = (p: number): boolean => rnd(1000) < p * 1000;
  /** Random bytes as a latin1 string (each char one byte on the wire). */
  const bytes = (n: number, lo = 0, hi = 256): string => String.fromCharCode(...Array.from({ length: n }, () => lo + rnd(hi - lo)));

  const orgs = ['acme', 'ACME', 'ac.me', '-', '..', '%2e%2e', 'a%2Fb', '%00', 'x'.repeat(200), 'ümlaut', '%ff', '_', 'a%20b'];
  const repos = ['game', 'open', 'game.git', 'missing', '..', '%2e', 'g%00', 'r'.repeat(300), '-', 'objects', 'locks'];
  const oids = [OID, 'E'.repeat(64), 'e'.repeat(63), 'e'.repeat(65), 'zz', '', '%65'.repeat(64), '..', `${OID}%00`];
  const ids = ['1', '0', '-1', 'abc', '..', '%00', '9'.repeat(40), 'ffffffff-ffff'];
  const shapes: readonly (() => string)[] = [
    () => '/health',
    () => '/ready',
    () => '/metrics',
    () => '/',
    () => '/-',
    () => '/-/',
    () => '/-/jobs',
    () => '/-/api/session',
    () => '/-/api/overview',
    () => '/-/api/access',
    () => `/${pick(orgs)}/${pick(repos)}`,
    () => `/${pick(orgs)}/${pick(repos)}/objects/batch`,
    () => `/${pick(orgs)}/${pick(repos)}/objects/verify`,
    () => `/${pick(orgs)}/${pick(repos)}/objects/${pick(oids)}`,
    () => `/${pick(orgs)}/${pick(repos)}/objects/stats`,
    () => `/${pick(orgs)}/${pick(repos)}/objects/${pick(['retain', 'dedupe', 'compress', 'audit', 'import'])}`,
    () => `/${pick(orgs)}/${pick(repos)}/objects/jobs`,
    () => `/${pick(orgs)}/${pick(repos)}/objects/jobs/${pick(ids)}`,
    () => `/${pick(orgs)}/${pick(repos)}/objects/jobs/${pick(ids)}/cancel`,
    () => `/${pick(orgs)}/${pick(repos)}/locks`,
    () => `/${pick(orgs)}/${pick(repos)}/locks/verify`,
    () => `/${pick(orgs)}/${pick(repos)}/locks/${pick(ids)}/unlock`,
    () => `/${pick(orgs)}/${pick(repos)}/${pick(['info/lfs/objects/batch', 'objects', 'x/y/z'])}`,
    () => `/${bytes(1 + rnd(12), 0x21, 0x7f).replace(/[?#]/g, '')}`,
  ];
  const queries = ['', '', '', '?', '?limit=-1', '?cursor=%ff&limit=1e9', '?path=a%00b', '?refspec=refs%2Fheads%2Fmain', `?${'q'.repeat(500)}`, '?x=%'];
  const methods = ['GET', 'GET', 'POST', 'POST', 'PUT', 'DELETE', 'HEAD', 'PATCH', 'OPTIONS'];
  const auths = [
    basic('tok-writer'),
    basic('tok-reader'),
    basic('tok-unknown'),
    'Bearer tok-writer',
    'Bearer a b',
    'Basic !!!',
    'Basic',
    'Bearer',
    `Basic ${b64('git:tok\u0001x')}`,
    `Basic ${b64('\u00ff:\u00fe')}`,
    `Token ${'t'.repeat(2000)}`,
    'Digest realm="x"',
  ];
  const contentTypes = [LFS, `${LFS}; charset=utf-8`, 'application/json', 'text/plain', 'multipart/form-data; boundary=x', '', ';;;', 'application/vnd.git-lfs+json; charset=ebcdic'];
  const accepts = [LFS, '*/*', 'text/html', 'application/json', 'image/png', 'text/html;q=0, */*;q=0'];
  const ranges = ['bytes=0-0', 'bytes=5-1', 'bytes=-0', 'bytes=0-', 'bytes=0-1,2-3', 'lines=1-2', 'bytes=99999999999999999999-', 'bytes=-1'];
  const origins = ['http://evil', 'null', 'http://127.0.0.1', ''];
  const bodies = [
    '',
    '{',
    'null',
    '[]',
    '{}',
    '{"operation":"upload","objects":[{"oid":1,"size":-1}]}',
    `{"operation":"download","objects":[{"oid":"${OID}","size":1}],"transfers":["basic"]}`,
    `{"operation":"upload","objects":[{"oid":"${OID}","size":1e300}]}`,
    `{"operation":"upload","objects":[{"oid":"${OID}","size":3}],"ref":{"name":7}}`,
    '{"operation":"upload","objects":"x"}',
    `{"oid":"${OID}","size":3}`,
    '{"path":""}',
    '{"path":"a/../../b"}',
    '{"oids":[1]}',
    `{"oids":["${OID}"],"dry_run":true}`,
    '{"token":""}',
    '{"token":"tok-writer"}',
    '{"allow":[1,2],"anonymous_read":"yes"}',
    '"\\ud800"',
    '{"a":'.repeat(200),
  ];
  const body = (): string => (chance(0.3) ? bytes(rnd(64)) : pick(bodies));
  /** Chunked encoding of `s`, in one or two chunks. */
  const chunked = (s: string): string => {
    const cut = s.length === 0 ? 0 : rnd(s.length);
    const parts = [s.slice(0, cut), s.slice(cut)].filter((p) => p.length > 0);
    return `${parts.map((p) => `${p.length.toString(16)}\r\n${p}\r\n`).join('')}0\r\n\r\n`;
  };

  return () => {
    let mayBeRefused = false;
    const method = pick(methods);
    let path = pick(shapes)() + pick(queries);
    if (chance(0.05)) {
      // Raw bytes uWS may or may not take in a request target.
      path += bytes(1 + rnd(4), 0x80, 0x100);
      mayBeRefused = true;
    }
    const headers: string[] = [];
    if (chance(0.7)) headers.push(`Authorization: ${pick(auths)}`);
    if (chance(0.5)) headers.push(`Content-Type: ${pick(contentTypes)}`);
    if (chance(0.5)) headers.push(`Accept: ${pick(accepts)}`);
    if (chance(0.15)) headers.push(`Range: ${pick(ranges)}`);
    if (chance(0.2)) headers.push(`Origin: ${pick(origins)}`);
    if (chance(0.1)) headers.push(`X-Lfs-Object-Size: ${pick(['-1', '1e3', '3', 'x', ''])}`);
    if (chance(0.1)) headers.push(`Cookie: stowage_session=${pick(['%%%', 'x'.repeat(100), '', 'a=b'])}`);
    if (chance(0.1)) headers.push(`X-Forwarded-For: ${pick(['1.2.3.4', 'garbage', '::1, 10.0.0.1', ''])}`);
    if (chance(0.03)) {
      // A header value of raw bytes, control characters included: uWS refuses some.
      headers.push(`X-Fuzz: ${bytes(1 + rnd(16), 1, 256).replace(/[\r\n]/g, '')}`);
      mayBeRefused = true;
    }
    const payload = method === 'GET' || method === 'HEAD' ? (chance(0.1) ? body() : '') : body();
    let rest = payload;
    const framing = rnd(10);
    if (framing < 6) headers.push(`Content-Length: ${payload.length}`);
    else if (framing < 8) {
      headers.push('Transfer-Encoding: chunked');
      rest = chunked(payload);
    } else if (framing === 8) {
      if (payload !== '') rest = ''; // no framing header: the body would be the next request
    } else {
      // Framing that lies or conflicts: answered 400 and closed, or cut by uWS.
      headers.push(pick([`Content-Length: ${payload.length + 1 + rnd(10)}`, 'Content-Length: +1', 'Content-Length: 1, 1', 'Transfer-Encoding: gzip', 'Transfer-Encoding: chunked, chunked', `Content-Length: ${payload.length}`]));
      if (chance(0.5)) headers.push(pick(['Transfer-Encoding: chunked', `Content-Length: ${payload.length}`]));
      mayBeRefused = true;
    }
    for (let i = headers.length - 1; i > 0; i--) {
      const j = rnd(i + 1);
      [headers[i], headers[j]] = [headers[j]!, headers[i]!];
    }
    return { bytes: rawHead(`${method} ${path} HTTP/1.1`, headers, rest), mayBeRefused, head: method === 'HEAD' };
  };
}

/** What is wrong with one answer, or null when it is one the server may give. */
export function problemOf(c: Case, r: RawResult): string | null {
  const res = r.responses[0];
  if (res === undefined) {
    if (r.received > 0) return `${r.received} bytes that are no HTTP response`;
    return c.mayBeRefused && r.closed ? null : 'no answer';
  }
  if (!(res.status >= 100 && res.status <= 599)) return `status line unreadable (${res.status})`;
  if (res.status >= 500 && !(res.status === 503 && res.headers['retry-after'] !== undefined)) return `status ${res.status}`;
  if (res.status >= 400 && !c.head) {
    if (!/^application\/vnd\.git-lfs\+json/.test(res.headers['content-type'] ?? '')) return `error ${res.status} with Content-Type ${res.headers['content-type']}`;
    try {
      const body = JSON.parse(res.body.toString('utf8')) as { message?: unknown };
      if (typeof body.message !== 'string') return `error ${res.status} without a message`;
    } catch {
      return `error ${res.status} with a body that is not JSON`;
    }
  }
  return null;
}

/** What a run of generated requests came to. */
export interface FuzzRun {
  /** One line per bad answer: seed, case number, what is wrong, the request's first bytes. */
  readonly failures: string[];
  /** Requests that got at least one response. */
  readonly answered: number;
}

/**
 * Sends `count` generated requests of `seed`, `concurrency` at a time, each with `send` (which
 * returns what came back, given the case and its number), and judges each answer with `judge`
 * (problemOf unless told).
 */
export async function runCases(opts: {
  seed: number;
  count: number;
  concurrency: number;
  send: (c: Case, n: number) => Promise<RawResult>;
  judge?: (c: Case, r: RawResult) => string | null;
}): Promise<FuzzRun> {
  const next = generator(opts.seed);
  const judge = opts.judge ?? problemOf;
  const cases = Array.from({ length: opts.count }, next);
  const failures: string[] = [];
  let answered = 0;
  let i = 0;
  const worker = async (): Promise<void> => {
    while (i < cases.length) {
      const n = i++;
      const c = cases[n]!;
      const r = await opts.send(c, n);
      if (r.responses.length > 0) answered++;
      const problem = judge(c, r);
      if (problem !== null) failures.push(`seed ${opts.seed} case #${n}: ${problem}: ${JSON.stringify(c.bytes.slice(0, 300))}`);
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  return { failures, answered };
}
