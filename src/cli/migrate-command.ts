import { ConfigError, loadConfig } from '../config/load.js';
import { StartRefusedError } from '../errors/start-refused.js';
import type { MigrationReport } from '../service/migration/node-migration.js';
import { CliError, EXIT } from './client.js';
import type { Io } from './jobs.js';
import { bytes, table } from './output.js';

/** What a command that works on files (not through a server) runs with. */
export interface LocalContext {
  readonly values: Record<string, string | boolean | undefined>;
  readonly env: NodeJS.ProcessEnv;
  readonly io: Io;
}

/** `stowage migrate`: moves a stopped single node (SQLite + disk) to PostgreSQL (+ S3), working on the data directory itself (service/migration/node-migration.ts). */
export async function runMigrate({ values, env, io }: LocalContext): Promise<number> {
  const given = values.to as string | undefined;
  if (given === '') throw new CliError('migrate: --to needs a postgres:// URL', EXIT.usage);
  let config;
  try {
    // --to is read as SVC_DATABASE_URL would be (the same check), and names the same database the nodes will use.
    config = loadConfig(given === undefined ? env : { ...env, SVC_DATABASE_URL: given });
  } catch (e) {
    if (e instanceof ConfigError) throw new CliError(`migrate: configuration error: ${given === undefined ? e.message : e.message.replace('SVC_DATABASE_URL', '--to')}`, EXIT.usage);
    throw e;
  }
  const to = config.databaseUrl;
  if (to === null) throw new CliError('migrate: give --to postgres://… (or set SVC_DATABASE_URL)', EXIT.usage);
  const withObjects = values.objects === true;
  if (withObjects && config.s3 === null) throw new CliError('migrate: --objects copies into the bucket SVC_STORE=s3 and SVC_S3_* name: set them as the new nodes will have them', EXIT.usage);
  // Loaded on use: the other commands start without the store and the workers.
  const { migrateNode, MigrationRefused } = await import('../service/migration/node-migration.js');
  let report: MigrationReport;
  try {
    report = await migrateNode({
      dataDir: config.dataDir,
      targetUrl: to,
      bucket: withObjects ? config.s3 : null,
      compressionLevel: config.compressionLevel,
      encryption: config.encryption,
      workers: config.workers,
      directIo: config.directIo,
      dryRun: values['dry-run'] === true,
      progress: (line) => {
        if (!io.quiet) io.err.write(`${line}\n`);
      },
    });
  } catch (e) {
    if (e instanceof StartRefusedError) throw new CliError(`migrate: ${e.message}: stop the server first`, EXIT.usage);
    if (e instanceof MigrationRefused) throw new CliError(`migrate: ${e.message}`, EXIT.usage);
    throw e;
  }
  if (io.json) io.out.write(`${JSON.stringify(report)}\n`);
  else io.out.write(summary(report, withObjects, config.s3 !== null, io));
  if (report.dry_run) return EXIT.ok;
  return report.verified ? EXIT.ok : EXIT.problems;
}

function summary(r: MigrationReport, withObjects: boolean, bucketSet: boolean, io: Io): string {
  const lines: string[] = [];
  lines.push(`${r.dry_run ? 'dry run: ' : ''}index.sqlite → ${r.target}`);
  if (r.journal.segments_pending > 0 && r.dry_run) lines.push(`journal: ${r.journal.segments_pending} segments to replay first`);
  const rows = r.tables.map((t) => [t.table, String(t.source_rows), String(t.copied), String(t.target_rows), t.verified === null ? '' : t.verified ? 'ok' : 'DIFFERENT']);
  lines.push(table(['table', 'rows', 'copied', 'in target', r.dry_run ? '' : 'verified'], rows, new Set([1, 2, 3])).trimEnd());
  const o = r.objects;
  if (o !== null) {
    lines.push(
      r.dry_run
        ? `objects: ${o.total} in the index, ${o.already_in_bucket} already in the bucket`
        : `objects: ${o.total} in the index; ${o.copied} copied (${bytes(o.bytes_copied)}), ${o.already_in_bucket} already in the bucket, ${o.quarantined} quarantined (no bytes to copy)`,
    );
    for (const oid of o.missing_on_disk.slice(0, 20)) lines.push(`  ${io.paint.red('missing on disk')}  ${oid}`);
    for (const x of o.refused.slice(0, 20)) lines.push(`  ${io.paint.red('refused')}  ${x.oid}  ${x.reason}`);
    for (const oid of o.absent_from_bucket.slice(0, 20)) lines.push(`  ${io.paint.red('not in bucket')}  ${oid}`);
    for (const x of o.unreadable_in_bucket.slice(0, 20)) lines.push(`  ${io.paint.red('unreadable in bucket')}  ${x.oid}  ${x.reason}`);
  } else if (!withObjects) {
    lines.push(`objects: not copied (${bucketSet ? 'add --objects to copy them into the bucket' : 'the index only; copy the store with --objects and SVC_STORE=s3'})`);
  }
  for (const p of r.problems) lines.push(`${io.paint.red('problem:')} ${p}`);
  if (r.dry_run) lines.push('nothing written: run again without --dry-run');
  else if (r.verified) lines.push(`${io.paint.green('ok')} verified: start the nodes with SVC_DATABASE_URL${withObjects ? ' and SVC_STORE=s3' : ''}`);
  else lines.push(`${io.paint.red('NOT VERIFIED')}: the target is not a whole copy (see above); running again adds what is missing`);
  return `${lines.join('\n')}\n`;
}
