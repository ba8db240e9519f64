import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { missingServerFlags, SERVER_NODE_FLAGS } from '../../../src/config/node-flags.js';
import { startServer } from '../../helpers/start-server.js';

// The node options the server is started with are written in one list (src/config/node-flags.ts);
// every way the project starts it must give them, and the server says when it was started without.
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
const read = (path: string): string => readFileSync(resolve(root, path), 'utf8');

t.test('missingServerFlags: from the command line or NODE_OPTIONS', async (t) => {
  t.same(missingServerFlags([], undefined), [...SERVER_NODE_FLAGS], 'plain node: all missing');
  t.same(missingServerFlags([...SERVER_NODE_FLAGS], undefined), [], 'on the command line');
  t.same(missingServerFlags(['--enable-source-maps'], ` ${SERVER_NODE_FLAGS.join('  ')} --trace-warnings`), [], 'in NODE_OPTIONS');
  t.same(missingServerFlags(['--max-semi-space-size=8'], undefined), [...SERVER_NODE_FLAGS], 'another value is not the flag');
});

t.test('every start the project ships gives the flags, before the entry point', async (t) => {
  const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts;
  const starts: [string, string][] = [
    ['package.json start', scripts.start!],
    ['package.json start:prod', scripts['start:prod']!],
    ['deploy/systemd/stowage.service ExecStart', /^ExecStart=(.*)$/m.exec(read('deploy/systemd/stowage.service'))![1]!],
    ['deploy/docker/Dockerfile CMD', /^CMD \[(.*)\]$/m.exec(read('deploy/docker/Dockerfile'))![1]!.replace(/"/g, '').replace(/,\s*/g, ' ')],
  ];
  for (const [where, command] of starts) {
    const main = command.indexOf('dist/src/main.js');
    t.ok(main > 0, `${where} runs dist/src/main.js: ${command}`);
    for (const flag of SERVER_NODE_FLAGS) {
      const at = command.indexOf(` ${flag} `);
      t.ok(at >= 0 && at < main, `${where} gives ${flag} to node`);
    }
  }
});

t.test('the server notes a start without them, and not a start with them', async (t) => {
  const withFlags = await startServer();
  t.teardown(() => withFlags.stop());
  const note = (logs: string[]): boolean => logs.some((l) => l.includes('started without the node options'));
  t.notOk(note(withFlags.logs), 'started as npm run start:prod starts it: no note');
  const plain = await startServer({ NODE_OPTIONS: '' }, { nodeFlags: [] });
  t.teardown(() => plain.stop());
  const line = await plain.waitForLog((ev) => typeof ev.msg === 'string' && ev.msg.startsWith('started without the node options'), 'the note');
  t.equal(line.missing, SERVER_NODE_FLAGS.join(' '), 'naming what is missing');
});
