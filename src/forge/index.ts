import type { Config } from '../config/schema.js';
import type { ForgeHttpClient } from './client.js';
import { GitHubAppIdentity } from './github-app.js';
import { GitHubAdapter } from './github.js';
import { GiteaAdapter } from './gitea.js';
import { GitLabAdapter } from './gitlab.js';
import type { ForgeAdapter } from './types.js';

/**
 * The adapter for the configured provider (SVC_AUTH); forge_d (Forgejo) answers as forge_c (Gitea)
 * does, so both use the Gitea adapter. The config loader has already checked the URL and app key.
 */
export function createForgeAdapter(config: Config, http: ForgeHttpClient): ForgeAdapter {
  const auth = config.auth;
  switch (auth.provider) {
    case 'forge_a': {
      const app = auth.forgeAAppId !== null && auth.forgeAAppKeyFile !== null
        ? GitHubAppIdentity.fromKeyFile(auth.forgeAApiUrl, http, auth.forgeAAppId, auth.forgeAAppKeyFile)
        : null;
      return new GitHubAdapter(auth.forgeAApiUrl, http, app);
    }
    case 'forge_b':
      return new GitLabAdapter(auth.forgeBApiUrl, http);
    case 'forge_c':
    case 'forge_d':
      if (auth.forgeCApiUrl === null) throw new Error(`SVC_FORGE_C_API_URL is required when SVC_AUTH=${auth.provider}`);
      return new GiteaAdapter(auth.forgeCApiUrl, http);
  }
}
