/** The stand-in servers of peers/, each started as its own process. */
import { spawn } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** native-bench/dist/peers, where the peers' compiled scripts are. */
const PEERS = resolve(dirname(fileURLToPath(import.meta.url)), '../peers');

/** Starts a peer of peers/ (loopback-peer.js, null-peer.js, durable-peer.js); resolves with its port and a stopper. */
export async function startPeer(script = 'loopback-peer.js', args: readonly string[] = []): Promise<{ port: number; pid: number; stop: () => void }> {
  const child = spawn(process.execPath, [resolve(PEERS, script), ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((ok, fail) => {
    createInterface({ input: child.stdout! }).once('line', (l) => ok((JSON.parse(l) as { port: number }).port));
    child.once('exit', (c) => fail(new Error(`${script} exited ${c}`)));
  });
  return { port, pid: child.pid!, stop: () => child.kill('SIGTERM') };
}
