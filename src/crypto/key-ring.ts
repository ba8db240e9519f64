import { execFile } from 'node:child_process';
import { createCipheriv, createDecipheriv, createSecretKey, randomBytes, type KeyObject } from 'node:crypto';
import { open } from 'node:fs/promises';
import { inspect } from 'node:util';

/** A problem with the key-encryption keys; its message is safe to print (names ids and lines, never key material). */
export class KeyRingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KeyRingError';
  }
}

/** Key ids as the key file spells them. */
const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;
/** Strict base64 of 32 bytes: 43 characters and one `=`. */
const KEY_B64 = /^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$/;
const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
/** Binds a wrapped data key to its id, so a wrapped row cannot be moved to another data key. */
const WRAP_AAD = 'stowage data key v1\0';
/** A key command that has not answered by then has hung: the start fails rather than waits. */
const COMMAND_TIMEOUT_MS = 30_000;
/** A key command's output beyond this is not a key list. */
const COMMAND_MAX_BYTES = 1 << 20;

/**
 * The key-encryption keys (envelope encryption): they wrap the random data keys the encrypting
 * layer writes objects under, and are never used on object bytes themselves. The first key wraps
 * new data keys; every key unwraps. Keys stay in private KeyObjects: nothing here prints them.
 */
export class KeyRing {
  readonly #keys: ReadonlyMap<string, KeyObject>;
  readonly #ids: readonly string[];

  private constructor(keys: Map<string, KeyObject>) {
    this.#keys = keys;
    this.#ids = Object.freeze([...keys.keys()]);
  }

  /** Parses the key file format: `<id> <base64 of 32 bytes>` per line, `#` comments, blank lines. */
  static parse(text: string): KeyRing {
    const keys = new Map<string, KeyObject>();
    const lines = text.split(/\r?\n/);
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!.trim();
      if (line === '' || line.startsWith('#')) continue;
      const parts = line.split(/\s+/);
      const where = `line ${i + 1}`;
      if (parts.length !== 2) throw new KeyRingError(`${where}: expected "<id> <base64 key>"`);
      const [id, b64] = parts as [string, string];
      if (!KEY_ID.test(id)) throw new KeyRingError(`${where}: key id must match ${KEY_ID.source}`);
      if (keys.has(id)) throw new KeyRingError(`${where}: key id ${id} appears twice`);
      if (!KEY_B64.test(b64)) throw new KeyRingError(`${where}: key ${id} is not the base64 of ${KEY_BYTES} bytes`);
      keys.set(id, createSecretKey(Buffer.from(b64, 'base64')));
    }
    if (keys.size === 0) throw new KeyRingError('no key found');
    return new KeyRing(keys);
  }

  /**
   * Reads the ring from the key file (which must not be readable by group or others) or from the
   * stdout of the key command (run with /bin/sh; its stderr is not kept: it may echo a secret).
   * Null when neither is given.
   */
  static async load(opts: { file: string | null; command: string | null }): Promise<KeyRing | null> {
    if (opts.file !== null && opts.command !== null) {
      throw new KeyRingError('set SVC_ENCRYPTION_KEY_FILE or SVC_ENCRYPTION_KEY_COMMAND, not both');
    }
    if (opts.file !== null) return KeyRing.parse(await readKeyFile(opts.file));
    if (opts.command !== null) return KeyRing.parse(await runKeyCommand(opts.command));
    return null;
  }

  /** The id of the key that wraps new data keys (the first of the file). */
  get currentId(): string {
    return this.#ids[0]!;
  }

  ids(): readonly string[] {
    return this.#ids;
  }

  has(id: string): boolean {
    return this.#keys.has(id);
  }

  /** Wraps a data key under the current key: nonce ‖ ciphertext ‖ tag, AAD binding `dataKeyId`. */
  wrap(dataKey: Buffer, dataKeyId: string): { kekId: string; wrapped: Buffer } {
    if (dataKey.length !== KEY_BYTES) throw new KeyRingError(`a data key is ${KEY_BYTES} bytes`);
    const kekId = this.currentId;
    const nonce = randomBytes(NONCE_BYTES);
    const c = createCipheriv('aes-256-gcm', this.#keys.get(kekId)!, nonce);
    c.setAAD(Buffer.from(WRAP_AAD + dataKeyId));
    const body = Buffer.concat([c.update(dataKey), c.final()]);
    return { kekId, wrapped: Buffer.concat([nonce, body, c.getAuthTag()]) };
  }

  /** The data key `wrapped` holds; throws KeyRingError when `kekId` is unknown or the wrap does not authenticate. */
  unwrap(kekId: string, dataKeyId: string, wrapped: Buffer): Buffer {
    const kek = this.#keys.get(kekId);
    if (kek === undefined) throw new KeyRingError(`key ${kekId} is not in the key ring`);
    if (wrapped.length !== NONCE_BYTES + KEY_BYTES + TAG_BYTES) throw new KeyRingError(`the wrapped data key ${dataKeyId} has the wrong length`);
    try {
      const d = createDecipheriv('aes-256-gcm', kek, wrapped.subarray(0, NONCE_BYTES));
      d.setAAD(Buffer.from(WRAP_AAD + dataKeyId));
      d.setAuthTag(wrapped.subarray(NONCE_BYTES + KEY_BYTES));
      return Buffer.concat([d.update(wrapped.subarray(NONCE_BYTES, NONCE_BYTES + KEY_BYTES)), d.final()]);
    } catch {
      throw new KeyRingError(`the wrapped data key ${dataKeyId} does not authenticate under key ${kekId}`);
    }
  }

  toJSON(): object {
    return { keyIds: this.#ids };
  }

  toString(): string {
    return `KeyRing(${this.#ids.join(', ')})`;
  }

  [inspect.custom](): string {
    return this.toString();
  }
}

async function readKeyFile(file: string): Promise<string> {
  let fh;
  try {
    fh = await open(file, 'r');
  } catch (e) {
    throw new KeyRingError(`cannot read key file ${file}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  try {
    // fstat of the open file: the mode checked is the mode of the bytes read.
    const st = await fh.stat();
    if (!st.isFile()) throw new KeyRingError(`key file ${file} is not a regular file`);
    if ((st.mode & 0o077) !== 0) {
      throw new KeyRingError(`key file ${file} is readable by group or others (mode ${(st.mode & 0o777).toString(8)}; chmod 600 it)`);
    }
    return await fh.readFile('utf8');
  } finally {
    await fh.close();
  }
}

function runKeyCommand(command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('/bin/sh', ['-c', command], { timeout: COMMAND_TIMEOUT_MS, maxBuffer: COMMAND_MAX_BYTES, encoding: 'utf8' }, (err, stdout) => {
      if (err === null) return resolve(stdout);
      const e = err as NodeJS.ErrnoException & { code?: number | string; killed?: boolean; signal?: string | null };
      const why = e.killed === true ? 'did not finish in time' : typeof e.code === 'number' ? `exited with status ${e.code}` : e.signal ? `was killed by ${e.signal}` : 'could not run';
      reject(new KeyRingError(`key command ${why}`));
    });
  });
}
