import type { Config } from '../config/schema.js';
import type { KeyRing } from '../crypto/key-ring.js';
import type { DataKeyIndex } from '../db/index-types.js';
import type { FrameCodec, Hasher } from '../format/frame-codec.js';
import { DiscardBlobStore } from './discard.js';
import { DiskBlobStore } from './disk.js';
import type { S3BlobStore } from './s3/s3-store.js';
import type { CredentialsLog } from './s3/credentials/credentials-cache.js';
import { log as defaultLog } from '../util/log.js';
import { CompressingBlobStore } from './layers/compress.js';
import { EncryptingBlobStore, type EncryptionParts } from './layers/encrypt.js';
import { JournalingBlobStore, type ReferenceLog } from './journal/journaling-store.js';
import { VerifyingBlobStore } from './layers/verify.js';
import type { BlobStore } from './types.js';

/** The base of a layer: forwards everything (for a layer a job keeps to itself, such as compress's). */
export { ForwardingBlobStore } from './layers/forwarding.js';

/** The backends SVC_STORE names, told apart by `kind`. */
export type Backend = DiskBlobStore | S3BlobStore;

/**
 * Opens the backend the configuration names: SVC_STORE=s3 a bucket, otherwise the disk under
 * SVC_DATA_DIR. A new backend is one more line here (and its settings in config/schema.ts).
 */
export async function openBackend(config: Pick<Config, 's3' | 'dataDir' | 'directIo'>, log: CredentialsLog = defaultLog): Promise<Backend> {
  if (config.s3 !== null) {
    // The bucket's modules (and undici, its HTTP client) load only for a bucket: ~8 MiB a disk store never uses.
    const [{ S3BlobStore }, { CredentialsCache }, { credentialChain }] = await Promise.all([
      import('./s3/s3-store.js'),
      import('./s3/credentials/credentials-cache.js'),
      import('./s3/credentials/source-chain.js'),
    ]);
    return S3BlobStore.open({ ...config.s3, credentials: new CredentialsCache(credentialChain(config.s3.credentials), { log }) });
  }
  return DiskBlobStore.open(config.dataDir, { directIo: config.directIo });
}

/** What the composition root hands in to build the stack. */
export interface StoreParts {
  /** The backend: DiskBlobStore, S3BlobStore, or any other BlobStore that stores bytes as given. */
  readonly backend: BlobStore;
  /** Where frames are compressed and decoded (the transfer pool). */
  readonly codec: FrameCodec;
  /** Where large uploads are hashed (off the event loop). */
  readonly hasher: Hasher;
  /** zstd level of new objects (SVC_COMPRESSION), or null to store them as they arrive. */
  readonly compressionLevel: number | null;
  /** The small-object journal's folder and its port to the index; null without one (see below). */
  readonly journal: { readonly dir: string; readonly references: ReferenceLog } | null;
  /** The encrypting layer's data keys and key ring (docs/encryption.md); null: no such layer. */
  readonly encryption?: EncryptionParts | null;
}

/** The built stack, and the journal layer in it (start-up replay, retirement, metrics, close). */
export interface ComposedStore {
  readonly store: BlobStore;
  /** The backend as the layers above it see it (encrypt(backend) with encryption): what maintenance reads and rewrites through. */
  readonly backend: BlobStore;
  readonly journal: JournalingBlobStore | null;
}

/**
 * The one place the storage stack is assembled (docs/architecture.md, "Conventions"):
 *
 *     verify( journal( compress( encrypt( backend ) ) ) )
 *
 * - verify is outermost: every byte a client sends is counted and hashed before any layer below may
 *   make the object visible, whatever those layers do with the bytes ("the last thing between the
 *   client and the other storage backends"). It gathers the upload into blocks of the size the
 *   layer below asks for, shared with the hasher, so no layer copies again.
 * - journal sits inside verify, so only verified bytes are journaled and acknowledged, and outside
 *   compress, so a journaled small object is written out through compression like any upload. Its
 *   durability is the local disk's: it is used with a disk backend only (with a bucket an
 *   acknowledged object must already be in the bucket, not on one node's disk).
 * - compress sits on encrypt (or on the backend): it turns logical bytes into frames and back.
 * - encrypt sits on the backend: what compression stored is sealed into authenticated frames under
 *   a per-copy data key (ciphertext does not compress), and the backend, its staging files and
 *   multipart parts only ever hold ciphertext. With encryption on, the journal seals small objects'
 *   bytes under per-segment keys the same ring wraps, so no object byte reaches the disk in the clear.
 * A new backend implements BlobStore (plus the capabilities it has), passes
 * test/conformance/blob-store.suite.ts, and is opened by openBackend above; the stack is the same.
 */
export async function composeStore(parts: StoreParts): Promise<ComposedStore> {
  const enc = parts.encryption ?? null;
  const backend = enc === null ? parts.backend : encryptedBackend(parts.backend, enc);
  let store: BlobStore = backend;
  // Always there: with compression off new objects are stored as they arrive, but objects framed
  // earlier (compression on before, or the compress job, which frames at level 3 either way) must
  // still be read through the one frame reader.
  store = new CompressingBlobStore(store, parts.codec, parts.compressionLevel);
  let journal: JournalingBlobStore | null = null;
  if (parts.journal !== null) {
    // The ring also unwraps sealed segments' keys with encryption off: they still replay.
    const sealing = { ring: enc?.ring ?? null, seal: enc?.encryptNew === true };
    store = journal = await JournalingBlobStore.open(store, parts.journal.dir, parts.journal.references, Date.now, sealing);
  }
  return { store: new VerifyingBlobStore(store, parts.hasher), backend, journal };
}

/**
 * encrypt(backend): reads encrypted and plain objects alike, writes new ones encrypted when
 * `encryptNew`. Always in the server's stack, keys or not, so an encrypted object is never served
 * as ciphertext.
 */
export function encryptedBackend(backend: BlobStore, parts: EncryptionParts): BlobStore {
  return new EncryptingBlobStore(backend, parts);
}

/**
 * verify(compress(backend)) at a given level and codec: how the compress job rewrites a plain object
 * into frames (with `replace: true`), verified on the way, whatever SVC_COMPRESSION says about new
 * uploads. Over a discarding backend it measures what compression would save (dry runs).
 */
export function compressingStore(backend: BlobStore, codec: FrameCodec, hasher: Hasher, level: number): BlobStore {
  return new VerifyingBlobStore(new CompressingBlobStore(backend, codec, level), hasher);
}

/**
 * compressingStore over a backend that keeps nothing (store/discard.ts, of the real backend's block
 * size): the compress job's dry run writes into it, so the saving it reports is the one a real run
 * stores.
 */
export function measuringStore(blockSize: number, codec: FrameCodec, hasher: Hasher, level: number): BlobStore {
  return compressingStore(new DiscardBlobStore(blockSize), codec, hasher, level);
}

/**
 * compress(backend) with compression of new objects off: how maintenance reads what the backend
 * holds (framed objects decoded, frame by frame, on `codec`: the low-priority maintenance pool, so an
 * audit never takes the transfer pool's cores from downloads).
 */
export function readingStore(backend: BlobStore, codec: FrameCodec): BlobStore {
  return new CompressingBlobStore(backend, codec, null);
}

/**
 * verify(compress(encrypt(backend))) with every copy sealed under a fresh data key, whatever
 * SVC_ENCRYPTION says about new uploads: how rekey and encrypt write an object again (with
 * `replace: true`; the old copy's data key goes once the new copy is in place). `level` keeps the
 * object's form: a zstd level for a framed object, null for a plain one.
 */
export function sealingStore(backend: BlobStore, keys: DataKeyIndex, ring: KeyRing, codec: FrameCodec, hasher: Hasher, level: number | null): BlobStore {
  return new VerifyingBlobStore(new CompressingBlobStore(new EncryptingBlobStore(backend, { keys, ring, encryptNew: true }), codec, level), hasher);
}
