import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { mkdir, readdir, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { shardPath, type Oid } from '../../src/protocol/oid.js';
import { KeyRing } from '../../src/crypto/key-ring.js';
import { openSqliteIndex } from '../../src/db/sqlite/sqlite-index.js';
import { composeStore } from '../../src/store/compose.js';
import { DiskBlobStore } from '../../src/store/disk.js';
import { INLINE_READ_MAX } from '../../src/store/inline-reader.js';
import { CompressingBlobStore } from '../../src/store/layers/compress.js';
import { EncryptingBlobStore } from '../../src/store/layers/encrypt.js';
import { FaultyBlobStore } from '../../src/store/layers/faulty.js';
import type { ReferenceLog } from '../../src/store/journal/journaling-store.js';
import { VerifyingBlobStore } from '../../src/store/layers/verify.js';
import { S3Client } from '../../src/store/s3/s3-client.js';
import { S3BlobStore } from '../../src/store/s3/s3-store.js';
import type { BlobStore } from '../../src/store/types.js';
import { HashThread } from '../../src/workers/hash-thread.js';
import { loadSha256Addon, NativeHasher } from '../../src/workers/native-hasher.js';
import { WorkerPool } from '../../src/workers/pool.js';
import { s3rverCredentials, startS3Server, type S3Server } from '../helpers/s3-server.js';
import { blobStoreConformance as runSuite, type StoreUnderTest } from './blob-store.suite.js';

// Runs the conformance suite (blob-store.suite.ts) against every backend and layer stack, with the
// real parts: files in a temporary folder, a real S3-protocol server on loopback, the Piscina frame
// codec, the Hasher (the sha256 addon; a hash thread for one stack) and a real SQLite index behind
// the journal. A new backend adds its stacks at the bottom of this file.

// ─────────────────────────────────────────────────────────────────────────────────────────────────
// ADAPTER: how this file builds each part, in one place. When a constructor's signature changes,
// only these functions change; nothing else in the file builds a store.
// ─────────────────────────────────────────────────────────────────────────────────────────────────
const LEVEL = 3;
/**
 * The transfer pool (the FrameCodec port) and the Hasher port, shared by every stack: the sha256
 * addon's native thread as the server runs it (hasher.test.ts fails when it is not built), and the
 * worker thread the server falls back to without it, for one stack.
 */
const codec = new WorkerPool(2);
const addon = loadSha256Addon();
const nativeHasher = addon === null ? null : new NativeHasher(addon);
const threadHasher = new HashThread();
const hasher = nativeHasher ?? threadHasher;

/** The key ring of the encrypted stacks, and the index holding their wrapped data keys (one for all: ids are random). */
const ring = KeyRing.parse(`conformance ${randomBytes(32).toString('base64')}`);
let dataKeys: ReturnType<typeof openSqliteIndex> | null = null;
const encryption = () => ({ keys: (dataKeys ??= openSqliteIndex(join(scratch, 'data-keys.sqlite'))).dataKeys, ring, encryptNew: true });

const adapter = {
  /** The disk backend, bytes as given (no compression, no journal). */
  async disk(root: string): Promise<BlobStore> {
    return DiskBlobStore.open(root, { directIo: true });
  },
  /** The S3 backend on a key prefix of the test bucket. */
  s3(server: S3Server, prefix: string): BlobStore {
    return S3BlobStore.open({
      endpoint: server.endpoint,
      bucket: server.bucket,
      region: 'us-east-1',
      pathStyle: true,
      credentials: s3rverCredentials(),
      prefix,
    });
  },
  encrypt(inner: BlobStore): BlobStore {
    return new EncryptingBlobStore(inner, encryption());
  },
  compress(inner: BlobStore): BlobStore {
    return new CompressingBlobStore(inner, codec, LEVEL);
  },
  verify(inner: BlobStore, onThread = false): BlobStore {
    return new VerifyingBlobStore(inner, onThread ? threadHasher : hasher);
  },
  /** The full default stack, verify(journal(compress(disk))), as the server builds it; `close` ends what it opened. */
  async composed(backend: BlobStore, root: string, encrypted = false): Promise<{ store: BlobStore; close(): Promise<void> }> {
    const db = openSqliteIndex(join(root, 'index.sqlite'));
    const objects = db.objects;
    const references: ReferenceLog = {
      restore: (repo, oid, size) => objects.restoreReference(repo, oid, size, size),
      isWanted: async (oid) => (await objects.findShared(oid)) !== null,
      stored: (oid, storedSize) => objects.setStoredSize(oid, storedSize),
      checkpoint: () => db.checkpoint(),
    };
    const composed = await composeStore({
      backend,
      codec,
      hasher,
      compressionLevel: LEVEL,
      journal: { dir: join(root, 'journal'), references },
      encryption: encrypted ? { keys: db.dataKeys, ring, encryptNew: true } : null,
    });
    return {
      store: composed.store,
      close: async () => {
        await composed.journal?.close();
        await db.close();
      },
    };
  },
  /** Where the disk backend keeps an oid's bytes, and its staging folder. */
  diskObjectPath: (root: string, oid: Oid): string => join(root, 'objects', shardPath(oid)),
  diskStaging: (root: string): string => join(root, 'staging'),
  /** The S3 backend's key of an oid, and its staging prefixes (relative to the store's prefix). */
  s3ObjectKey: (prefix: string, oid: Oid): string => `${prefix}objects/${shardPath(oid)}`,
  s3StagingPrefixes: ['staging/', 'incoming/'] as const,
};
// ───────────────────────────────────────── end of ADAPTER ────────────────────────────────────────

t.teardown(async () => {
  await codec.close();
  await threadHasher.close();
  await dataKeys?.close();
});

const scratch = mkdtempSync(join(tmpdir(), 'stowage-conformance-'));
t.teardown(() => rmSync(scratch, { recursive: true, force: true }));
const s3 = await startS3Server(join(scratch, 's3'));
t.teardown(() => s3.stop());
/** Reads the bucket as it is, apart from the store under test. */
const bucket = new S3Client({
  endpoint: s3.endpoint,
  bucket: s3.bucket,
  region: 'us-east-1',
  pathStyle: true,
  credentials: s3rverCredentials(),
});
t.teardown(() => bucket.close());

let made = 0;

/** What a stack is made of: its layers above the backend, innermost last. */
interface Layers {
  readonly verify?: boolean;
  readonly compress?: boolean;
  /** A faulty layer right above the compress layer (or the backend). */
  readonly faulty?: boolean;
  /** The verify layer hashes large uploads on a worker thread (the fallback), not the addon. */
  readonly hashThread?: boolean;
  /** The encrypting layer right on the backend. */
  readonly encrypt?: boolean;
}

/** Builds `layers` over `backend`; returns the top, the store under the verify layer and the faulty layer. */
function stack(backend: BlobStore, layers: Layers): { store: BlobStore; below: BlobStore | null; faulty: FaultyBlobStore | null } {
  let store = layers.encrypt === true ? adapter.encrypt(backend) : backend;
  if (layers.compress === true) store = adapter.compress(store);
  const faulty = layers.faulty === true ? new FaultyBlobStore(store) : null;
  if (faulty !== null) store = faulty;
  if (layers.verify !== true) return { store, below: null, faulty };
  return { store: adapter.verify(store, layers.hashThread === true), below: store, faulty };
}

/** A stack over a fresh disk backend in its own folder. */
function onDisk(layers: Layers): () => Promise<StoreUnderTest> {
  return async () => {
    const root = join(scratch, `disk-${++made}`);
    await mkdir(root, { recursive: true });
    const built = stack(await adapter.disk(root), layers);
    // The faulty layer injects its faults through open, and an encrypted object needs its key from the index: neither reads in line.
    const inLineMax = layers.faulty === true || layers.encrypt === true ? 0 : INLINE_READ_MAX;
    const traits = { verifies: layers.verify === true, compresses: layers.compress === true, encrypts: layers.encrypt === true, journals: false, atomicCreate: true, inLineMax };
    return diskHarness(root, built, traits, async () => undefined);
  };
}

function diskHarness(
  root: string,
  built: { store: BlobStore; below: BlobStore | null; faulty: FaultyBlobStore | null },
  traits: { verifies: boolean; compresses: boolean; encrypts?: boolean; journals: boolean; atomicCreate: boolean; inLineMax: number },
  close: () => Promise<void>,
): StoreUnderTest {
  const staging = adapter.diskStaging(root);
  return {
    ...built,
    ...traits,
    countStaging: async () => countFiles(staging),
    storedBytesOf: async (oid) => stat(adapter.diskObjectPath(root, oid)).then((s) => s.size, () => null),
    async plantStagingLitter() {
      // A crashed upload's staging file, untouched for two hours.
      const path = join(staging, 'crashed-upload.tmp');
      await writeFile(path, 'half an object');
      const then = new Date(Date.now() - 2 * 3_600_000);
      await utimes(path, then, then);
    },
    async close() {
      await close();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** The suffix of the file in which s3rver keeps a key's bytes (beside its metadata files). */
const S3RVER_OBJECT = '._S3rver_object';

/** Files under `dir` (ending with `suffix`, when given); 0 when there is no such folder. */
async function countFiles(dir: string, suffix = ''): Promise<number> {
  let n = 0;
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw e;
  }
  for (const e of entries) n += e.isDirectory() ? await countFiles(join(dir, e.name), suffix) : e.name.endsWith(suffix) ? 1 : 0;
  return n;
}

/** A stack over the S3 backend on a fresh key prefix of the shared test bucket. */
function onS3(layers: Layers): () => Promise<StoreUnderTest> {
  return async () => {
    const prefix = `conformance-${++made}/`;
    const built = stack(adapter.s3(s3, prefix), layers);
    return {
      ...built,
      verifies: layers.verify === true,
      compresses: layers.compress === true,
      encrypts: layers.encrypt === true,
      journals: false,
      atomicCreate: false,
      inLineMax: 0,
      // Counted in s3rver's own folder: it answers a bucket-level GET (ListObjectsV2) signed for
      // `/bucket/` with SignatureDoesNotMatch, and ListMultipartUploads with NotImplemented, so
      // multipart uploads are not counted (it also keeps an aborted upload's parts on its disk).
      async countStaging() {
        let n = 0;
        for (const dir of adapter.s3StagingPrefixes) n += await countFiles(join(s3.dir, s3.bucket, prefix, dir), S3RVER_OBJECT);
        return n;
      },
      async storedBytesOf(oid) {
        const r = await bucket.send({ method: 'HEAD', key: adapter.s3ObjectKey(prefix, oid), accept: [404] });
        await r.body.dump();
        return r.status === 404 ? null : Number(r.headers['content-length']);
      },
      close: async () => undefined,
    };
  };
}

/** The full default stack over a fresh disk backend, built by compose.ts as the server builds it. */
function composedOnDisk(): () => Promise<StoreUnderTest> {
  return async () => {
    const root = join(scratch, `composed-${++made}`);
    await mkdir(root, { recursive: true });
    const backend = await adapter.disk(root);
    const composed = await adapter.composed(backend, root);
    return diskHarness(root, { store: composed.store, below: null, faulty: null }, { verifies: true, compresses: true, journals: true, atomicCreate: true, inLineMax: INLINE_READ_MAX }, composed.close);
  };
}

/** The default stack with encryption on, built by compose.ts: its journal holds small objects sealed. */
function composedEncryptedOnDisk(): () => Promise<StoreUnderTest> {
  return async () => {
    const root = join(scratch, `composed-${++made}`);
    await mkdir(root, { recursive: true });
    const composed = await adapter.composed(await adapter.disk(root), root, true);
    return diskHarness(root, { store: composed.store, below: null, faulty: null }, { verifies: true, compresses: true, encrypts: true, journals: true, atomicCreate: true, inLineMax: 0 }, composed.close);
  };
}

// The stacks. A new backend adds its own lines here: bare, compress(x), verify(compress(x)).
// CONFORMANCE_STACKS=disk,s3 runs only the stacks whose name starts with one of those (for work on one).
const only = process.env.CONFORMANCE_STACKS?.split(',');
const blobStoreConformance = (tt: typeof t, name: string, make: Parameters<typeof runSuite>[2]): Promise<void> =>
  only === undefined || only.some((o) => name.startsWith(o)) ? runSuite(tt, name, make) : Promise.resolve();
await blobStoreConformance(t, 'disk', onDisk({}));
await blobStoreConformance(t, 's3', onS3({}));
await blobStoreConformance(t, 'compress(disk)', onDisk({ compress: true }));
await blobStoreConformance(t, 'compress(s3)', onS3({ compress: true }));
await blobStoreConformance(t, 'verify(disk)', onDisk({ verify: true }));
await blobStoreConformance(t, 'verify(disk), hashed on a worker thread', onDisk({ verify: true, hashThread: true }));
await blobStoreConformance(t, 'verify(compress(disk))', onDisk({ verify: true, compress: true }));
await blobStoreConformance(t, 'verify(compress(s3))', onS3({ verify: true, compress: true }));
await blobStoreConformance(t, 'verify(journal(compress(disk))), the default stack', composedOnDisk());
await blobStoreConformance(t, 'faulty(disk)', onDisk({ faulty: true }));
await blobStoreConformance(t, 'verify(faulty(compress(disk)))', onDisk({ verify: true, faulty: true, compress: true }));
await blobStoreConformance(t, 'encrypt(disk)', onDisk({ encrypt: true }));
await blobStoreConformance(t, 'encrypt(s3)', onS3({ encrypt: true }));
await blobStoreConformance(t, 'verify(compress(encrypt(disk)))', onDisk({ verify: true, compress: true, encrypt: true }));
await blobStoreConformance(t, 'verify(compress(encrypt(s3)))', onS3({ verify: true, compress: true, encrypt: true }));
await blobStoreConformance(t, 'verify(faulty(compress(encrypt(disk))))', onDisk({ verify: true, faulty: true, compress: true, encrypt: true }));
await blobStoreConformance(t, 'verify(journal(compress(encrypt(disk)))), the default stack encrypted', composedEncryptedOnDisk());
