#!/usr/bin/env node
// The README's test command (`npm test`): type-check and build, run every tap file, keep the full
// TAP stream in .tap/report.tap, show failures as they happen, and close with one plain line
// "tests: N passed, N failed[, N skipped]" that CI reads. Exits non-zero on any failure.
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const build = spawnSync('npx', ['tsc', '-p', 'tsconfig.json'], { stdio: 'inherit' });
if (build.status !== 0) {
  console.log('tests: 0 passed, 1 failed (type-check failed)');
  process.exit(1);
}
// The sha256 addon (large uploads are hashed with it); the tests run what users get, so it must build.
const native = spawnSync(process.execPath, ['scripts/build-native.mjs', '--require'], { stdio: 'inherit' });
if (native.status !== 0) {
  console.log('tests: 0 passed, 1 failed (the sha256 addon did not build: a C++ compiler and Node\'s headers are needed)');
  process.exit(1);
}

// tap's runner is generated code with its plugins compiled in; a fresh `npm ci` ships it with the
// TypeScript plugin, which cannot load under TypeScript 7 and fails every file. Regenerate it from
// the plugin list in package.json (a few seconds, and a no-op in effect when already current).
const tapBuild = spawnSync('npx', ['tap', 'build'], { stdio: ['ignore', 'ignore', 'inherit'] });
if (tapBuild.status !== 0) {
  console.log('tests: 0 passed, 1 failed (tap build failed)');
  process.exit(1);
}

// tap skips git-ignored paths when it looks for tests itself, and dist/ is git-ignored: name the
// compiled test files explicitly (or run just the ones given on the command line).
function testFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? testFiles(join(dir, e.name)) : e.name.endsWith('.test.js') ? [join(dir, e.name)] : [],
  );
}
const files = process.argv.length > 2 ? process.argv.slice(2) : testFiles('dist/test').sort();
mkdirSync('.tap', { recursive: true });
const report = createWriteStream('.tap/report.tap');
const tap = spawn('npx', ['tap', '-R', 'tap', ...files], { stdio: ['ignore', 'pipe', 'inherit'] });
let summary = null;
let context = 0; // lines still to show after a failing assertion
const rl = createInterface({ input: tap.stdout });
rl.on('line', (line) => {
  report.write(`${line}\n`);
  if (/^(not )?ok \d+ - /.test(line)) {
    console.log(line); // one line per test file
    context = 0;
  } else if (/^\s*not ok /.test(line)) {
    console.log(line); // a failing assertion, at any depth, with its diagnostics
    context = 16;
  } else if (context > 0) {
    context--;
    if (!/^\s+at /.test(line)) console.log(line);
  }
  const m = /^# \{ (.*) \}$/.exec(line);
  if (m) summary = Object.fromEntries(m[1].split(', ').map((kv) => kv.split(': ')).map(([k, v]) => [k, Number(v)]));
});
tap.on('close', (code) => {
  report.end();
  const s = summary ?? { pass: 0, fail: 1 };
  const skipped = (s.skip ?? 0) + (s.todo ?? 0);
  console.log(`tests: ${s.pass ?? 0} passed, ${s.fail ?? 0} failed${skipped ? `, ${skipped} skipped` : ''}`);
  process.exit(code === 0 && (s.fail ?? 0) === 0 && summary !== null ? 0 : 1);
});
