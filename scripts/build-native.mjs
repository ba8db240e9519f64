#!/usr/bin/env node
// Builds src/native/sha256.cc into dist/native/sha256.node: sha256 of large uploads on a native thread
// (src/workers/native-hasher.ts). One C++ file against Node's own headers (node-api and the OpenSSL
// node ships), compiled with the C++ compiler directly: no python, no download.
//
// Without a compiler or Node's headers the server still works, hashing large uploads on a worker
// thread instead (more memory, a slower first upload): this script then warns and exits 0, unless
// `--require` is given (the test command and CI, which must test what users get).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'src/native/sha256.cc');
const target = join(root, 'dist/native/sha256.node');
const required = process.argv.includes('--require');

function give(why) {
  if (required) {
    console.error(`build-native: ${why}`);
    process.exit(1);
  }
  console.warn(`build-native: ${why}; large uploads will be hashed on a worker thread instead (see docs/architecture.md)`);
  process.exit(0);
}

if (existsSync(target) && statSync(target).mtimeMs >= statSync(source).mtimeMs) process.exit(0); // up to date

// Node's headers: where npm's node-gyp is told to look (npm_config_nodedir), beside the running node
// (official tarballs and most packages: PREFIX/include/node), or the distribution's place.
const candidates = [
  process.env.npm_config_nodedir && join(process.env.npm_config_nodedir, 'include/node'),
  join(dirname(process.execPath), '../include/node'),
  '/usr/include/node',
  '/usr/local/include/node',
].filter(Boolean);
const headers = candidates.find((d) => existsSync(join(d, 'node_api.h')) && existsSync(join(d, 'openssl/sha.h')));
if (headers === undefined) give(`Node's headers (node_api.h, openssl/sha.h) not found in ${candidates.join(', ')}`);

const cxx = process.env.CXX || 'c++';
mkdirSync(dirname(target), { recursive: true });
const partial = `${target}.${process.pid}.tmp`;
const args = [
  '-std=c++17', '-O2', '-fPIC', '-shared', '-fvisibility=hidden', '-Wall', '-Wextra',
  '-DNODE_GYP_MODULE_NAME=stowage_sha256', `-I${headers}`,
  source, '-o', partial,
];
const run = spawnSync(cxx, args, { stdio: ['ignore', 'inherit', 'inherit'] });
if (run.error !== undefined || run.status !== 0) {
  rmSync(partial, { force: true });
  give(`${cxx} failed${run.error ? ` (${run.error.message})` : ''}`);
}
renameSync(partial, target); // whole or not at all: a concurrent build never loads half a file
