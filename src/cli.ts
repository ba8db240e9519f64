#!/usr/bin/env node
/**
 * The operator CLI (docs/cli.md). Every command but `serve` and `migrate` (a stopped server's data
 * directory, under its lock) talks to a running server over HTTP, so the work runs inside the server
 * beside the uploads it must not disturb. A process entry: it alone (with main.ts) reads process.env
 * and sets the exit status.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { CliError, Client, credentialFill, EXIT, lfsEndpoint, REPO_NAME, SERVER_WIDE } from './cli/client.js';
import { COMMANDS, type CommandSpec, type OptionSpec } from './cli/commands.js';
import { Paint } from './cli/output.js';

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
const HELP: OptionSpec = { type: 'boolean', short: 'h', help: 'show this help' };

function generalHelp(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length));
  return [
    'usage: stowage <command> [org/repo] [options]',
    '',
    'commands:',
    ...Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
    '',
    'options:',
    '  -h, --help     show help (stowage <command> --help for a command\'s own)',
    '      --version  print the version',
    '',
    'Without org/repo, a command inside a git clone works on the clone\'s LFS endpoint.',
    'Credentials: STOWAGE_TOKEN, else git\'s credential helper for the server URL.',
    'Exit status: 0 fine, 1 problems found, 2 usage or refused by the server, 3 failed, 130 Ctrl-C.',
    '',
  ].join('\n');
}

function commandHelp(name: string, c: CommandSpec): string {
  const opts = Object.entries({ ...c.options, help: HELP }).map(([k, o]) => [`${o.short ? `-${o.short}, ` : '    '}--${k}${o.arg ? ` ${o.arg}` : ''}`, o.help] as const);
  const width = Math.max(...opts.map(([f]) => f.length));
  return [`usage: ${c.usage}`, '', c.details, '', 'options:', ...opts.map(([f, h]) => `  ${f.padEnd(width)}  ${h}`), '', `(stowage --help lists every command; docs/cli.md has examples)`, ''].join('\n').replace(/^usage: stowage \w+/, `usage: stowage ${name}`);
}

/** parseArgs's error as one line: `unknown option --dryrun`. */
function usageError(command: string, e: Error & { code?: string }): CliError {
  const opt = /'(-[^']*)'/.exec(e.message)?.[1];
  const reason =
    e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? `unknown option ${opt}` : e.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' ? `option ${opt ?? ''} needs a value`.replace('  ', ' ') : e.message.split('\n')[0]!;
  return new CliError(`${command}: ${reason} (stowage ${command} --help)`, EXIT.usage);
}

async function main(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === undefined) {
    process.stderr.write(generalHelp());
    return EXIT.usage;
  }
  if (first === '-h' || first === '--help' || first === 'help') {
    const about = rest[0] === undefined ? undefined : COMMANDS[rest[0]];
    process.stdout.write(about === undefined ? generalHelp() : commandHelp(rest[0]!, about));
    return rest[0] === undefined || about !== undefined ? EXIT.ok : EXIT.usage;
  }
  if (first === '--version' || first === '-V' || first === 'version') {
    process.stdout.write(`stowage ${VERSION}\n`);
    return EXIT.ok;
  }
  const spec = Object.hasOwn(COMMANDS, first) ? COMMANDS[first]! : undefined;
  if (spec === undefined) throw new CliError(`unknown command ${first.startsWith('-') ? `or option ${first}` : first} (stowage --help lists them)`, EXIT.usage);

  const options = Object.fromEntries(Object.entries({ ...spec.options, help: HELP }).map(([k, o]) => [k, o.short ? { type: o.type, short: o.short } : { type: o.type }]));
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({ args: rest, options, allowPositionals: true, strict: true }) as typeof parsed;
  } catch (e) {
    throw usageError(first, e as Error);
  }
  if (parsed.values.help === true) {
    process.stdout.write(commandHelp(first, spec));
    return EXIT.ok;
  }
  if (spec.local !== undefined) {
    if (parsed.positionals.length > 0) throw new CliError(`${first}: unexpected argument ${parsed.positionals[0]} (stowage ${first} --help)`, EXIT.usage);
    const json = parsed.values.json === true;
    return spec.local({ values: parsed.values, env: process.env, io: { json, quiet: parsed.values.quiet === true, out: process.stdout, err: process.stderr, paint: new Paint(process.stdout, process.env) } });
  }
  if (spec.run === undefined) {
    if (parsed.positionals.length > 0) throw new CliError(`${first}: takes no arguments (it is configured by SVC_* variables)`, EXIT.usage);
    await import('./main.js');
    return -1; // the server keeps the process alive and sets its own exit status
  }

  // The repository: named, or the clone's. For `jobs`, a sub-command and a job id may come around it.
  // A server-wide command (rewrap, or jobs --server-wide) names none: its routes are under /-/.
  const words = [...parsed.positionals];
  const sub =
    (first === 'jobs' && ['list', 'follow', 'cancel'].includes(words[0] ?? '')) || (first === 'cache' && words[0] !== undefined && !words[0].includes('/')) ? words.shift() : undefined;
  const named = words[0] !== undefined && words[0].includes('/') ? words.shift()! : undefined;
  const serverWide = spec.serverWide === true || parsed.values['server-wide'] === true;
  if (serverWide && named !== undefined) throw new CliError(`${first}: works on the whole server; name no repository (stowage ${first} --help)`, EXIT.usage);
  if (named !== undefined && !REPO_NAME.test(named)) throw new CliError(`${first}: not a repository name: ${named} (org/repo)`, EXIT.usage);
  if (first !== 'jobs' && first !== 'cache' && words.length > 0) throw new CliError(`${first}: unexpected argument ${words[0]} (stowage ${first} --help)`, EXIT.usage);
  const cwd = process.cwd();
  const clone = named === undefined || (parsed.values.server ?? process.env.STOWAGE_URL) === undefined ? await lfsEndpoint(cwd) : null;
  const repo = serverWide ? SERVER_WIDE : (named ?? clone?.repo);
  if (repo === undefined) throw new CliError(`${first}: name org/repo, or run it inside a clone whose LFS endpoint is this server`, EXIT.usage);
  const base = ((parsed.values.server as string | undefined) ?? process.env.STOWAGE_URL ?? clone?.base)?.replace(/\/+$/, '');
  if (base === undefined) throw new CliError(`${first}: give --server URL (or set STOWAGE_URL)`, EXIT.usage);
  if (!/^https?:\/\/[^/]+/.test(base)) throw new CliError(`${first}: --server must be an http:// or https:// URL, not ${base}`, EXIT.usage);

  const target = { base, repo };
  const interactive = process.stdin.isTTY === true && process.stderr.isTTY === true;
  const envToken = process.env.STOWAGE_TOKEN;
  const token = envToken !== undefined && envToken !== '' ? envToken : await credentialFill(target, cwd, process.env, interactive);
  const json = parsed.values.json === true;
  return spec.run({
    client: new Client(target, token),
    values: parsed.values,
    rest: sub === undefined ? words : [sub, ...words],
    cwd,
    io: { json, quiet: parsed.values.quiet === true, out: process.stdout, err: process.stderr, paint: new Paint(process.stdout, process.env) },
  });
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (e: unknown) => {
    const paint = new Paint(process.stderr, process.env);
    process.stderr.write(`${paint.red('stowage:')} ${(e as Error).message}\n`);
    process.exitCode = e instanceof CliError ? e.exitCode : EXIT.failed;
  },
);
