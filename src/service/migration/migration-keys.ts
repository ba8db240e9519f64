import Database from 'better-sqlite3';
import type { DataKeyIndex } from '../../db/index-types.js';
import { connect } from '../../db/postgres/pg-client.js';
import { PgDataKeys } from '../../db/postgres/pg-data-keys.js';
import { DataKeysRepo } from '../../db/sqlite/data-keys-repo.js';
import type { Oid } from '../../protocol/oid.js';
import { dataKeyOf } from '../maintenance/stored-data-key.js';
import type { BlobStore } from '../../store/types.js';

/** A data key table and how to let it go. */
export interface OpenDataKeys {
  readonly keys: DataKeyIndex;
  close(): Promise<void>;
}

/** The source's data keys (index.sqlite), read-only: the copy only unwraps them. */
export function sourceDataKeys(indexFile: string): OpenDataKeys {
  const db = new Database(indexFile, { readonly: true, fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  return { keys: new DataKeysRepo(db), close: async () => void db.close() };
}

/** The target's data keys (PostgreSQL): where the bucket's encrypting layer records each copy's key. */
export function targetDataKeys(url: string): OpenDataKeys {
  const { sql } = connect(url);
  return { keys: new PgDataKeys(sql), close: () => sql.end({ timeout: 5 }) };
}

/** Whether the bucket's stored copy of `oid` (under every layer) is sealed: false when plain or absent. */
export async function storedSealed(raw: BlobStore, oid: Oid): Promise<boolean> {
  const id = await dataKeyOf(raw, oid);
  return id !== 'plain' && id !== 'absent';
}
