import { randomBytes } from 'node:crypto';
import { frameGcm } from '../../crypto/frame-gcm.js';
import { KeyRingError, type KeyRing } from '../../crypto/key-ring.js';

/**
 * The sealing of journaled bytes under encryption at rest: each segment the journal writes gets a
 * random data key, wrapped by the key ring's current key into the segment's first record; a data
 * record's bytes are AES-256-GCM under it, the tag after them.
 *
 * Nonce: the record's offset in its segment, unique under the key (a segment gets a fresh key each
 * time it is written, recycled ones too; offsets only grow). AAD: the record's head and the
 * segment's number, so bytes cannot move to another record, oid or segment.
 */
export const SEAL_TAG = 16;
const KEY_BYTES = 32;
const NONCE_BYTES = 12;

/** The name a segment's wrapped key is bound to (the ring's AAD): a key record copied into another segment does not unwrap. */
const keyName = (segment: number): string => `journal segment ${segment}`;

export interface SegmentKey {
  readonly key: Buffer;
  readonly kekId: string;
  readonly wrapped: Buffer;
}

/** A fresh data key for `segment`, wrapped by the ring's current key. */
export function newSegmentKey(ring: KeyRing, segment: number): SegmentKey {
  const key = randomBytes(KEY_BYTES);
  return { key, ...ring.wrap(key, keyName(segment)) };
}

/** The data key of `segment`; null when its wrapping does not authenticate (a damaged key record). The ring must hold `kekId`. */
export function unwrapSegmentKey(ring: KeyRing, kekId: string, segment: number, wrapped: Buffer): Buffer | null {
  try {
    return ring.unwrap(kekId, keyName(segment), wrapped);
  } catch (e) {
    if (e instanceof KeyRingError) return null;
    throw e;
  }
}

function nonceAt(recordOffset: number): Buffer {
  const nonce = Buffer.alloc(NONCE_BYTES);
  nonce.writeBigUInt64LE(BigInt(recordOffset), NONCE_BYTES - 8);
  return nonce;
}

/** Seals `plain` into `out` (plain's length + SEAL_TAG bytes): the record at `recordOffset`, its head and segment number as `aad`. */
export function sealRecordData(key: Buffer, recordOffset: number, aad: Uint8Array, plain: Uint8Array, out: Uint8Array): void {
  frameGcm().seal(key, nonceAt(recordOffset), aad, plain, out);
}

/** Opens what sealRecordData stored into `out` (SEAL_TAG bytes shorter); false, `out` zeroed, when it does not authenticate. */
export function openRecordData(key: Buffer, recordOffset: number, aad: Uint8Array, stored: Uint8Array, out: Uint8Array): boolean {
  return frameGcm().open(key, nonceAt(recordOffset), aad, stored, out);
}
