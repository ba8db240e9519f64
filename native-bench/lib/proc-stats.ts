import { readFileSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { Worker } from 'node:worker_threads';

const CLK_TCK = 100; // Linux USER_HZ: /proc/<pid>/stat reports CPU time in 1/100 s

/** Resident set size of a process in bytes, from /proc/<pid>/status (VmRSS), and its high-water mark. */
export function rssOf(pid: number): { rss: number; hwm: number } {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? 0) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

/** Resets VmHWM to the current RSS (clear_refs 5), so a later VmHWM is the peak of one phase. */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** User + system CPU seconds a process has used so far (all threads). */
export function cpuSecondsOf(pid: number): number {
  return cpuFromStat(`/proc/${pid}/stat`);
}

/** CPU seconds of a process's main thread only: in node, the event loop (the HTTP thread here). */
export function mainThreadCpuSecondsOf(pid: number): number {
  return cpuFromStat(`/proc/${pid}/task/${pid}/stat`);
}

/**
 * CPU seconds the whole machine has been busy so far, all cores and processes (user, nice, system,
 * irq and softirq of /proc/stat; idle, iowait and steal left out): what a run costs the machine,
 * the kernel's writeback and loopback work included.
 */
export function machineBusySeconds(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  return (f[0]! + f[1]! + f[2]! + f[5]! + f[6]!) / CLK_TCK;
}

function cpuFromStat(path: string): number {
  const stat = readFileSync(path, 'utf8');
  // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / CLK_TCK;
}

const SAMPLER = `
const { parentPort, workerData } = require('node:worker_threads');
const { readFileSync } = require('node:fs');
let max = 0, n = 0;
const read = () => {
  try {
    const m = /^VmRSS:\\s+(\\d+) kB/m.exec(readFileSync('/proc/' + workerData.pid + '/status', 'utf8'));
    if (m) { const v = Number(m[1]) * 1024; if (v > max) max = v; n++; }
  } catch {}
};
read();
const t = setInterval(read, workerData.every);
parentPort.on('message', () => { clearInterval(t); read(); parentPort.postMessage({ max, n }); });
`;

/**
 * Samples a process's VmRSS every `everyMs` on its own thread, so that a busy benchmark loop does
 * not delay the samples; `stop()` returns the peak seen and the number of samples.
 */
export class RssSampler {
  readonly #worker: Worker;

  constructor(pid: number, everyMs = 50) {
    this.#worker = new Worker(SAMPLER, { eval: true, workerData: { pid, every: everyMs } });
  }

  stop(): Promise<{ max: number; samples: number }> {
    return new Promise((resolve, reject) => {
      this.#worker.once('message', (m: { max: number; n: number }) => {
        void this.#worker.terminate();
        resolve({ max: m.max, samples: m.n });
      });
      this.#worker.once('error', reject);
      this.#worker.postMessage('stop');
    });
  }
}

/** What the server spent over one measured span, with the machine's load around it. */
export interface ServerSpan {
  /** utime + stime of the server process (all its threads), seconds: no client CPU in it. */
  readonly serverCpuS: number;
  /** 1-minute load average at the span's start and end. */
  readonly load: readonly [number, number];
}

/** Starts measuring a span of the server's work; the returned function ends it. */
export function watchServer(pid: number): () => ServerSpan {
  const cpu0 = cpuSecondsOf(pid);
  const load0 = loadavg()[0]!;
  return () => ({ serverCpuS: cpuSecondsOf(pid) - cpu0, load: [load0, loadavg()[0]!] });
}

/**
 * Peak RSS of a process over a phase: VmHWM reset at the start (clear_refs) and 50 ms VmRSS samples
 * on a thread of their own, whichever saw more. `stop()` returns the peak in bytes.
 */
export function peakRssOver(pid: number): { stop(): Promise<number> } {
  const hwmReset = resetPeakRss(pid);
  const sampler = new RssSampler(pid, 50);
  return {
    async stop() {
      const sampled = await sampler.stop();
      return Math.max(sampled.max, hwmReset ? rssOf(pid).hwm : 0);
    },
  };
}
