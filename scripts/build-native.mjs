#!/usr/bin/env node
// Builds the native addons into dist/native: src/native/sha256.cc (sha256 of large uploads on a
// native thread, src/workers/native-hasher.ts) and src/native/frame-cipher.cc (AES-256-GCM of
// encrypted frames into reused buffers, src/crypto/frame-gcm.ts). One C++ file each against Node's
// own headers (node-api and the OpenSSL node ships), compiled with the C++ compiler directly: no
// python, no download.
//
// Without a compiler or Node's headers the server still works, hashing large uploads on a worker
// thread and sealing frames with node:crypto instead (more memory, slower): this script then warns
// and exits 0, unless `--require` is given (the test command and CI, which must test what users get).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const addons = [
  { name: 'sha256', source: 'src/native/sha256.cc', target: 'dist/native/sha256.node' },
  { name: 'frame_cipher', source: 'src/native/frame-cipher.cc', more: ['src/native/gcm-vaes.cc', 'src/native/gcm-vaes.h'], target: 'dist/native/frame_cipher.node' },
];
const required = process.argv.includes('--require');

function give(why) {
  if (required) {
    console.error(`build-native: ${why}`);
    process.exit(1);
  }
  console.warn(`build-native: ${why}; the server falls back to a worker thread for sha256 and node:crypto for frames (see docs/architecture.md)`);
  process.exit(0);
}

const sourcesOf = (a) => [a.source, ...(a.more ?? [])];
const upToDate = (a) => existsSync(join(root, a.target)) && sourcesOf(a).every((s) => statSync(join(root, a.target)).mtimeMs >= statSync(join(root, s)).mtimeMs);
const stale = addons.filter((a) => !upToDate(a));
if (stale.length === 0) process.exit(0);

// Node's headers: where npm's node-gyp is told to look (npm_config_nodedir), beside the running node
// (official tarballs and most packages: PREFIX/include/node), or the distribution's place.
const candidates = [
  process.env.npm_config_nodedir && join(process.env.npm_config_nodedir, 'include/node'),
  join(dirname(process.execPath), '../include/node'),
  '/usr/include/node',
  '/usr/local/include/node',
].filter(Boolean);
const needed = ['node_api.h', 'openssl/sha.h', 'openssl/evp.h'];
const headers = candidates.find((d) => needed.every((h) => existsSync(join(d, h))));
if (headers === undefined) give(`Node's headers (${needed.join(', ')}) not found in ${candidates.join(', ')}`);

const cxx = process.env.CXX || 'c++';
for (const a of stale) {
  const target = join(root, a.target);
  mkdirSync(dirname(target), { recursive: true });
  const partial = `${target}.${process.pid}.tmp`;
  const args = [
    '-std=c++17', '-O2', '-fPIC', '-shared', '-fvisibility=hidden', '-Wall', '-Wextra',
    `-DNODE_GYP_MODULE_NAME=stowage_${a.name}`, `-I${headers}`,
    ...sourcesOf(a).filter((s) => s.endsWith('.cc')).map((s) => join(root, s)), '-o', partial,
  ];
  const run = spawnSync(cxx, args, { stdio: ['ignore', 'inherit', 'inherit'] });
  if (run.error !== undefined || run.status !== 0) {
    rmSync(partial, { force: true });
    give(`${cxx} failed on ${a.source}${run.error ? ` (${run.error.message})` : ''}`);
  }
  renameSync(partial, target); // whole or not at all: a concurrent build never loads half a file
}
