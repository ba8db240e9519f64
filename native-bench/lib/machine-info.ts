import { execFileSync } from 'node:child_process';
import { readFileSync, statfsSync } from 'node:fs';
import { cpus, loadavg, release, totalmem } from 'node:os';

/** What the figures were measured on; the README quotes these with the table. */
export interface MachineInfo {
  readonly cpuModel: string;
  readonly cores: number;
  readonly memoryGiB: number;
  readonly kernel: string;
  readonly node: string;
  readonly diskFreeGiB: number;
  readonly dataDir: string;
  readonly filesystem: string;
  /** 1/5/15-minute load averages when the run started (other processes share the cores). */
  readonly loadAtStart: readonly number[];
  loadAtEnd: readonly number[];
  readonly startedAt: string;
}

function cpuModel(): string {
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) return m[1]!.trim();
  } catch {
    // not Linux: fall back to what node reports
  }
  return cpus()[0]?.model ?? 'unknown';
}

function filesystemOf(dir: string): string {
  try {
    // "Filesystem Type" of the data dir: the disk figures mean little without it.
    const out = execFileSync('df', ['-T', dir], { encoding: 'utf8' }).trim().split('\n')[1] ?? '';
    const f = out.split(/\s+/);
    return `${f[0]} (${f[1]})`;
  } catch {
    return 'unknown';
  }
}

/** Describes this machine, with free space on the file system holding `dataDir`. */
export function describeMachine(dataDir: string): MachineInfo {
  const fs = statfsSync(dataDir);
  return {
    cpuModel: cpuModel(),
    cores: cpus().length,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    kernel: `${readSafe('/proc/sys/kernel/ostype')} ${release()}`.trim(),
    node: process.version,
    diskFreeGiB: Math.round(((fs.bavail * fs.bsize) / 2 ** 30) * 10) / 10,
    dataDir,
    filesystem: filesystemOf(dataDir),
    loadAtStart: loadavg().map((x) => Math.round(x * 100) / 100),
    loadAtEnd: [],
    startedAt: new Date().toISOString(),
  };
}

function readSafe(path: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return '';
  }
}
