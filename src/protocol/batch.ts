/** Batch API types and validator (https://github.com/git-lfs/git-lfs/blob/main/docs/api/batch.md). */
import { lfsError } from '../errors/errors.js';
import { parseOid, type Oid } from './oid.js';

export type Operation = 'upload' | 'download';

export interface BatchRequestObject {
  readonly oid: string;
  readonly size: number;
  /** Set when this entry cannot be served at all (bad oid or size): it is answered with this error. */
  readonly invalid?: string;
  readonly parsedOid: Oid | null;
}

export interface BatchRequest {
  readonly operation: Operation;
  readonly objects: readonly BatchRequestObject[];
  readonly hashAlgo: string;
  readonly refName: string | null;
  /** The client offered the tus transfer (git-lfs with lfs.tustransfers=true). */
  readonly offersTus: boolean;
}

export interface BatchAction {
  href: string;
  header?: Record<string, string>;
  expires_in?: number;
}

export interface BatchResponseObject {
  oid: string;
  size: number;
  authenticated?: boolean;
  actions?: { upload?: BatchAction; verify?: BatchAction; download?: BatchAction };
  error?: { code: number; message: string };
}

export interface BatchResponse {
  transfer: 'basic' | 'tus';
  objects: BatchResponseObject[];
  hash_algo: 'sha256';
}

/** A batch of more than this many objects is refused with 413 (gitea MaxBatchSize; git-lfs sends ≤ 100). */
export const MAX_BATCH_OBJECTS = 1000;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Validates a parsed JSON body: whole-request problems throw (422/413); a bad object is kept with
 * `invalid` set, since git-lfs waits forever for an entry missing from the answer (tq/transfer_queue.go).
 */
export function parseBatchRequest(body: unknown): BatchRequest {
  if (!isRecord(body)) throw lfsError('LFS_ERR_BAD_REQUEST', 'Batch request must be a JSON object');
  const { operation, objects, hash_algo: hashAlgo, ref } = body;
  if (operation !== 'upload' && operation !== 'download') {
    throw lfsError('LFS_ERR_BAD_REQUEST', 'operation must be "upload" or "download"');
  }
  if (!Array.isArray(objects)) throw lfsError('LFS_ERR_BAD_REQUEST', 'objects must be an array');
  if (objects.length > MAX_BATCH_OBJECTS) {
    throw lfsError('LFS_ERR_BATCH_TOO_LARGE', `A batch may name at most ${MAX_BATCH_OBJECTS} objects; this one names ${objects.length}`);
  }
  if (hashAlgo !== undefined && typeof hashAlgo !== 'string') throw lfsError('LFS_ERR_BAD_REQUEST', 'hash_algo must be a string');
  if (body.transfers !== undefined && (!Array.isArray(body.transfers) || body.transfers.some((t) => typeof t !== 'string'))) {
    throw lfsError('LFS_ERR_BAD_REQUEST', 'transfers must be an array of strings');
  }
    // batch.md: `transfer` "MUST be one of the given `transfer` identifiers from the request"; an
    // offer without basic leaves no answer that keeps that rule, so the batch is refused.
  if (Array.isArray(body.transfers) && !body.transfers.includes('basic')) {
    const offered = body.transfers.length === 0 ? 'none' : body.transfers.map((t) => JSON.stringify(t).slice(0, 40)).join(', ');
    throw lfsError('LFS_ERR_TRANSFER_UNSUPPORTED', `None of the offered transfer adapters (${offered}) is spoken here; this server speaks "basic"`);
  }
  let refName: string | null = null;
  if (ref !== undefined && ref !== null) {
    if (!isRecord(ref)) throw lfsError('LFS_ERR_BAD_REQUEST', 'ref must be an object');
    if (ref.name !== undefined && typeof ref.name !== 'string') throw lfsError('LFS_ERR_BAD_REQUEST', 'ref.name must be a string');
    refName = typeof ref.name === 'string' ? ref.name : null;
  }
  const parsed: BatchRequestObject[] = objects.map((o): BatchRequestObject => {
    if (!isRecord(o)) return { oid: '', size: 0, parsedOid: null, invalid: 'object entry must be a JSON object' };
    const oid = typeof o.oid === 'string' ? o.oid : '';
    const sizeOk = typeof o.size === 'number' && Number.isSafeInteger(o.size) && o.size >= 0;
    // The error entry echoes the size as sent so the client can match it; only a value it cannot
    // decode into int64 becomes 0, since it would fail the decoding of the whole answer.
    const size = typeof o.size === 'number' && Number.isInteger(o.size) && Math.abs(o.size) < 2 ** 63 ? o.size : 0;
    const parsedOid = parseOid(o.oid);
    if (parsedOid === null) return { oid, size, parsedOid, invalid: 'oid must be 64 lowercase hex digits (sha256)' };
    if (!sizeOk) return { oid, size, parsedOid, invalid: 'size must be a whole number of bytes, at least zero' };
    return { oid, size, parsedOid };
  });
  if (parsed.length > 0 && parsed.every((o) => o.invalid !== undefined && o.oid === '')) {
    // Nothing usable at all: per batch.md, 422 means none of the requested objects are valid.
    throw lfsError('LFS_ERR_BAD_REQUEST', 'No valid object in the batch');
  }
  const offersTus = Array.isArray(body.transfers) && body.transfers.includes('tus');
  return { operation, objects: parsed, hashAlgo: hashAlgo ?? 'sha256', refName, offersTus };
}
