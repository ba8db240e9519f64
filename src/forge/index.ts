import type { Config } from '../config/schema.js';
import type { ForgeHttpClient } from './client.js';
import { GitHubAdapter } from './github.js';
import type { ForgeAdapter } from './types.js';

/** The adapter for the configured provider (SVC_AUTH). */
export function createForgeAdapter(config: Config, http: ForgeHttpClient): ForgeAdapter {
  switch (config.auth.provider) {
    case 'forge_a':
      return new GitHubAdapter(config.auth.forgeAApiUrl, http);
    default:
      throw new Error(`SVC_AUTH=${config.auth.provider} is not supported yet`);
  }
}
