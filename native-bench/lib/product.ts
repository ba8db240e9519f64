/**
 * The built product the bench drives: the root's `dist/` (`npm run build`), loaded at run time from
 * here (native-bench/dist/lib → ../../../dist). The types come from the product's declarations
 * (dist/**\/*.d.ts, seen from this source file as ../../dist), so the bench compiles nothing of the
 * product itself and the product builds and tests without this folder.
 */
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The product's build output, the directory holding src/ and test/ compiled. */
export const PRODUCT_DIST = fileURLToPath(new URL('../../../dist/', import.meta.url));

/** One module of the built product, e.g. `fromProduct<typeof import('../../dist/src/x.js')>('src/x.js')`. */
export async function fromProduct<M>(path: string): Promise<M> {
  return (await import(pathToFileURL(join(PRODUCT_DIST, path)).href)) as M;
}

const startServerModule = await fromProduct<typeof import('../../dist/test/helpers/start-server.js')>('test/helpers/start-server.js');
const forgeModule = await fromProduct<typeof import('../../dist/test/helpers/forge-emulator.js')>('test/helpers/forge-emulator.js');
const gitModule = await fromProduct<typeof import('../../dist/test/helpers/git.js')>('test/helpers/git.js');
const nodeFlagsModule = await fromProduct<typeof import('../../dist/src/config/node-flags.js')>('src/config/node-flags.js');

/** Starts the real server (dist/src/main.js) as a child process, as the product's tests do. */
export const { startServer, tmpDir } = startServerModule;
export type RunningServer = import('../../dist/test/helpers/start-server.js').RunningServer;
/** The GitHub API emulator the servers ask about tokens. */
export const { GitHubEmulator } = forgeModule;
export type GitHubEmulator = import('../../dist/test/helpers/forge-emulator.js').GitHubEmulator;
/** A git home with git-lfs configured against a server. */
export const { GitSandbox } = gitModule;
export type GitSandbox = import('../../dist/test/helpers/git.js').GitSandbox;
/** The node flags every start the product ships uses (npm run start:prod). */
export const { SERVER_NODE_FLAGS } = nodeFlagsModule;
