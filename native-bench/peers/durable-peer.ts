// Proves: the least any server must spend to acknowledge a 64 KiB PUT durably (the small-upload rows' durable minimum).
/**
 * The durable minimum, a yardstick for the small-object rows beside the null peer's floor: the least
 * a server must do before it may answer a 64 KiB PUT with 200, with nothing else around it (no
 * authorization, no metrics, no layers, no file of its own written later):
 * - read the body into one buffer and check its sha256 against the oid that ends the path (422 if not);
 * - append it with its reference (repository, oid) to a journal file prepared at start (written full
 *   of zeros and flushed, so a flush writes data only), and flush with `fdatasync` in line: one flush
 *   for every upload finished in the same turn of the event loop (group commit);
 * - answer each, then record them in SQLite in the same turn (WAL, synchronous = NORMAL, our schema's
 *   objects and repo_objects tables), all of the turn's uploads in one transaction: the journal holds
 *   the references, so the commit may follow the answers (as the server's does, TransferService.upload).
 * Bodies over 1 MiB or without a Content-Length are refused (413): it serves the small rows only.
 * The journal wraps around when full; the probe keeps nothing.
 *
 * Usage: node durable-peer.js DIR. Prints `{"port": N}` on stdout once listening; SIGTERM stops it.
 */
import uws from '@trufflesuite/uws-js-unofficial';
import Database from 'better-sqlite3';
import { hash } from 'node:crypto';
import { fdatasyncSync, mkdirSync, openSync, writeSync, writevSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (dir === undefined) throw new Error('usage: durable-peer.js DIR');
mkdirSync(dir, { recursive: true });

const JOURNAL_BYTES = 256 << 20;
const MAX_BODY = 1 << 20;
const journal = openSync(join(dir, 'journal'), 'w+');
const zeros = Buffer.alloc(1 << 20);
for (let at = 0; at < JOURNAL_BYTES; at += zeros.length) writeSync(journal, zeros, 0, zeros.length, at);
fdatasyncSync(journal);
let tail = 0;

const db = new Database(join(dir, 'index.sqlite'));
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
db.exec(`
CREATE TABLE IF NOT EXISTS objects (oid TEXT NOT NULL PRIMARY KEY, size INTEGER NOT NULL, stored_size INTEGER NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS repo_objects (repo TEXT NOT NULL, oid TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (repo, oid)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS repo_objects_by_oid ON repo_objects(oid);`);
const insertObject = db.prepare('INSERT OR IGNORE INTO objects VALUES (?, ?, ?, ?)');
const insertRef = db.prepare('INSERT OR IGNORE INTO repo_objects VALUES (?, ?, ?)');

interface Done {
  readonly repo: string;
  readonly oid: string;
  readonly size: number;
  readonly answer: () => void;
}
let turn: Done[] = [];
const record = db.transaction((rows: Done[]) => {
  const now = Date.now();
  for (const r of rows) {
    insertObject.run(r.oid, r.size, r.size, now);
    insertRef.run(r.repo, r.oid, now);
  }
});
/** Group commit: every upload appended in this turn of the event loop, one flush and one transaction. */
function commit(): void {
  const rows = turn;
  turn = [];
  fdatasyncSync(journal);
  for (const r of rows) r.answer();
  record(rows);
}

/** The record: its reference (repository and oid, length-prefixed), then the bytes, in one `pwritev` (no copy of the body). */
function append(repo: string, oid: string, data: Buffer): void {
  const ref = Buffer.from(`${repo} ${oid}`);
  const head = Buffer.alloc(4);
  head.writeUInt32LE(ref.length);
  const length = head.length + ref.length + data.length;
  if (tail + length > JOURNAL_BYTES) tail = 0;
  // Into blocks written at start: a short write would mean a broken disk, not a busy one.
  if (writevSync(journal, [head, ref, data], tail) !== length) throw new Error('short write to the journal');
  tail += length;
}

const app = uws.App();
app.put('/*', (res, req) => {
  const url = req.getUrl();
  const oid = url.slice(url.lastIndexOf('/') + 1);
  const repo = url.split('/').slice(1, 3).join('/');
  const declared = req.getHeader('content-length');
  const length = declared === '' ? NaN : Number(declared);
  let gone = false;
  res.onAborted(() => (gone = true));
  const reply = (status: string, body: string): void => {
    if (!gone) res.cork(() => res.writeStatus(status).writeHeader('Content-Type', 'application/vnd.git-lfs+json').end(body));
  };
  if (!Number.isSafeInteger(length) || length > MAX_BODY) {
    reply('413 Payload Too Large', '{"message":"the durable peer takes small objects with a Content-Length only"}');
    return;
  }
  const body = Buffer.allocUnsafe(length);
  let at = 0;
  res.onData((chunk, last) => {
    const bytes = new Uint8Array(chunk);
    if (at + bytes.length <= length) body.set(bytes, at); // past the length: refused below
    at += bytes.length;
    if (!last) return;
    if (at !== length || hash('sha256', body, 'hex') !== oid) {
      reply('422 Unprocessable Entity', '{"message":"size or sha256 does not match"}');
      return;
    }
    append(repo, oid, body);
    turn.push({ repo, oid, size: length, answer: () => reply('200 OK', '{}') });
    if (turn.length === 1) setImmediate(commit);
  });
});
app.listen('127.0.0.1', 0, (socket) => {
  if (socket === false) process.exit(1);
  process.stdout.write(`${JSON.stringify({ port: uws.us_socket_local_port(socket) })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
