import type { Measurement } from './report.js';

/** What every benchmark gets: sizes for the mode, a scratch dir on the data disk, a recorder. */
export interface BenchContext {
  readonly quick: boolean;
  /** Scratch directory on the same file system as the server's data dir. */
  readonly scratch: string;
  /** With --profile: where the servers write their V8 CPU profiles (node --cpu-prof). */
  readonly profileDir: string | null;
  record(m: Measurement): void;
  note(text: string): void;
}

/** Runs per limit in a full run: the machine is shared, so a limit is the best of a few tries. */
export const tries = (ctx: BenchContext): number => (ctx.quick ? 1 : 2);
