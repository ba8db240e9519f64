import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import t from 'tap';
import { KeyRing, KeyRingError } from '../../src/crypto/key-ring.js';

const k1 = randomBytes(32).toString('base64');
const k2 = randomBytes(32).toString('base64');
const text = `# keys\n\nk-2026.b ${k1}\n  k-2025_a   ${k2}  \n`;

const scratch = mkdtempSync(join(tmpdir(), 'stowage-key-ring-'));
t.teardown(() => rmSync(scratch, { recursive: true, force: true }));

t.test('parse: ids in order, the first is current, comments and blank lines skipped', async (t) => {
  const ring = KeyRing.parse(text);
  t.same(ring.ids(), ['k-2026.b', 'k-2025_a']);
  t.equal(ring.currentId, 'k-2026.b');
  t.ok(ring.has('k-2025_a'));
  t.notOk(ring.has('k3'));
});

t.test('parse refuses malformed files, naming the line and never the key', async (t) => {
  const cases: [string, RegExp][] = [
    ['', /no key found/],
    ['# only a comment\n', /no key found/],
    [`bad/id ${k1}`, /line 1: key id must match/],
    [`a ${k1}\nb\n`, /line 2: expected/],
    [`a ${k1} extra`, /line 1: expected/],
    [`a ${k1}\na ${k2}`, /line 2: key id a appears twice/],
    [`a ${randomBytes(16).toString('base64')}`, /line 1: key a is not the base64 of 32 bytes/],
    [`a ${k1.slice(0, -1)}`, /line 1: key a is not the base64 of 32 bytes/],
    [`a ${'x'.repeat(65)}`, /line 1: key a is not the base64/],
  ];
  for (const [input, re] of cases) {
    const e = (() => {
      try {
        KeyRing.parse(input);
        return null;
      } catch (err) {
        return err as Error;
      }
    })();
    t.ok(e instanceof KeyRingError, `refused: ${re.source}`);
    t.match(e?.message, re);
    t.notOk(e?.message.includes(k1) || e?.message.includes(k2), 'no key material in the message');
  }
});

t.test('wrap and unwrap: round trip under any key of the ring, bound to the data key id', async (t) => {
  const ring = KeyRing.parse(text);
  const dk = randomBytes(32);
  const { kekId, wrapped } = ring.wrap(dk, 'a'.repeat(32));
  t.equal(kekId, 'k-2026.b', 'wrapped under the current key');
  t.equal(wrapped.length, 60);
  t.notOk(wrapped.includes(dk), 'the data key is not in the wrap');
  t.same(ring.unwrap(kekId, 'a'.repeat(32), wrapped), dk);
  t.throws(() => ring.unwrap(kekId, 'b'.repeat(32), wrapped), KeyRingError, 'another data key id does not authenticate');
  t.throws(() => ring.unwrap('k-2025_a', 'a'.repeat(32), wrapped), KeyRingError, 'another key does not authenticate');
  t.throws(() => ring.unwrap('k9', 'a'.repeat(32), wrapped), /key k9 is not in the key ring/);
  const flipped = Buffer.from(wrapped);
  flipped[20]! ^= 1;
  t.throws(() => ring.unwrap(kekId, 'a'.repeat(32), flipped), KeyRingError, 'a flipped bit does not authenticate');
  const older = KeyRing.parse(`k-2025_a ${k2}`).wrap(dk, 'c'.repeat(32));
  t.same(ring.unwrap(older.kekId, 'c'.repeat(32), older.wrapped), dk, 'a key that is not current still unwraps');
});

t.test('nothing shows the keys: inspect, JSON, string', async (t) => {
  const ring = KeyRing.parse(text);
  for (const shown of [inspect(ring, { showHidden: true, depth: 9 }), JSON.stringify(ring), String(ring), JSON.stringify({ ring })]) {
    t.notOk(shown.includes(k1) || shown.includes(Buffer.from(k1, 'base64').toString('hex')), shown);
    t.match(shown, /k-2026\.b/);
  }
});

t.test('load: from a private file; a group- or world-readable file or an unreadable one is refused', async (t) => {
  t.equal(await KeyRing.load({ file: null, command: null }), null, 'no keys given');
  const file = join(scratch, 'keys');
  writeFileSync(file, text, { mode: 0o600 });
  t.same((await KeyRing.load({ file, command: null }))!.ids(), ['k-2026.b', 'k-2025_a']);
  chmodSync(file, 0o640);
  await t.rejects(KeyRing.load({ file, command: null }), /readable by group or others \(mode 640; chmod 600 it\)/);
  chmodSync(file, 0o604);
  await t.rejects(KeyRing.load({ file, command: null }), /readable by group or others/);
  await t.rejects(KeyRing.load({ file: join(scratch, 'absent'), command: null }), /cannot read key file .*absent: ENOENT/);
  await t.rejects(KeyRing.load({ file, command: 'true' }), /not both/);
});

t.test('load: from a command, whose failure is refused without its output', async (t) => {
  const file = join(scratch, 'cmd-keys');
  writeFileSync(file, text, { mode: 0o600 });
  t.same((await KeyRing.load({ file: null, command: `cat '${file}'` }))!.currentId, 'k-2026.b');
  await t.rejects(KeyRing.load({ file: null, command: `echo ${k1} >&2; exit 3` }), /^key command exited with status 3$/);
  await t.rejects(KeyRing.load({ file: null, command: 'echo not a key file' }), /line 1: expected/);
});
