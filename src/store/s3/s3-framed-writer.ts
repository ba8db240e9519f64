import type { Oid } from '../../protocol/oid.js';
import type { WorkerPool } from '../../workers/pool.js';
import { FRAME_SIZE } from '../buffer-pool.js';
import { FrameEncoder, digested } from '../frame-encoder.js';
import { Codec, TRAILER_SIZE, encodeIndex, encodeTrailer } from '../frame-format.js';
import type { ObjectWriter, PutResult } from '../types.js';
import type { S3Client } from './s3-client.js';
import { S3Upload } from './s3-upload.js';

/** Object metadata marking a key written by this writer: only such keys are probed for a frame trailer. */
export const FRAMED_META = { name: 'x-amz-meta-stowage-format', value: 'frames-v1' } as const;

/**
 * The disk store's framed format (frame-format.ts), written to the bucket: sha256 runs in line, full
 * frames are compressed and BLAKE3-hashed on the worker pool while the next one fills, and the stored
 * frames are appended in order to an S3Upload, then the index and the trailer. When every frame stayed
 * raw (incompressible data) no index is written, so the key holds the object exactly as it arrived
 * (and presigned downloads may serve it). Unlike on disk, a framed object that came out marginally
 * larger than the plain one is kept framed: a bucket key cannot be rewritten in place.
 */
export class S3FramedWriter implements ObjectWriter {
  readonly #upload: S3Upload;
  readonly #encoder: FrameEncoder;

  constructor(client: S3Client, key: string, oid: Oid, expected: number | null, pool: WorkerPool, level: number) {
    this.#upload = new S3Upload(client, key, expected, { [FRAMED_META.name]: FRAMED_META.value });
    // push() copies into part buffers; ready() holds the next frame back while two parts upload.
    this.#encoder = new FrameEncoder(oid, expected, pool, level, (stored) => {
      this.#upload.push(stored);
      return this.#upload.ready();
    });
  }

  write(chunk: Uint8Array): boolean {
    return this.#encoder.write(chunk);
  }

  onDrain(listener: () => void): void {
    this.#encoder.onDrain(listener);
  }

  async finish(): Promise<PutResult> {
    const { size, entries, framesLength } = await this.#encoder.end();
    if (!entries.every((e) => e.codec === Codec.Raw)) {
      const index = encodeIndex(digested(entries));
      this.#upload.push(index);
      this.#upload.push(encodeTrailer(FRAME_SIZE, size, entries.length, framesLength, index));
      const r = await this.#upload.complete();
      return { size, storedSize: framesLength + index.length + TRAILER_SIZE, created: r.created };
    }
    // All frames raw: the frames region is the object exactly as it arrived.
    const r = await this.#upload.complete();
    return { size, storedSize: size, created: r.created };
  }

  async abort(): Promise<void> {
    await this.#encoder.abort();
    await this.#upload.abort();
  }
}
