/**
 * The native addons fleetlab loads, checked before a command needs them. npm 12 skips a
 * dependency's install script unless the project's `allowScripts` allows it, which leaves
 * the addon unbuilt; loading it then fails with a list of binding paths. This says instead
 * which module is missing and the one command that builds it.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { sqliteDriverName } from './cloud/db/sqlite.js';
import { FleetlabError, errorText } from './errors.js';
import { fleetlabRoot } from './package-root.js';

export type NativeModule = 'better-sqlite3' | 'epoll';

/** What each addon is for, said in the error. */
const PURPOSE: Record<NativeModule, string> = {
  'better-sqlite3': "SQLite on Node 20: the cloud API, and a lab's lease store",
  epoll: "the supervisor's LED line (onoff)",
};

/** Loads the addon's binary; throws what the loader said. */
function load(name: NativeModule): void {
  const require = createRequire(import.meta.url);
  if (name === 'epoll') {
    require('epoll');
    return;
  }
  // better-sqlite3 loads its binary on the first Database, not on require.
  const Database = require('better-sqlite3') as new (path: string) => { close(): void };
  new Database(':memory:').close();
}

/**
 * `unbuiltNativeModules` in a new Node process: after an install in this one, which cached the
 * module it could not find then (Node keeps a missing package.json as missing), so asking again
 * here would still say "not installed".
 */
export async function unbuiltInNewProcess(names: readonly NativeModule[]): Promise<Array<{ name: NativeModule; reason: string }>> {
  const script = `import(${JSON.stringify(import.meta.url)}).then((m) => process.stdout.write(JSON.stringify(m.unbuiltNativeModules(${JSON.stringify(names)}))))`;
  const { execa } = await import('execa');
  const { stdout } = await execa(process.execPath, ['--input-type=module', '-e', script]);
  return JSON.parse(stdout) as Array<{ name: NativeModule; reason: string }>;
}

/** Names of the addons in `names` that do not load here. */
export function unbuiltNativeModules(names: readonly NativeModule[]): Array<{ name: NativeModule; reason: string }> {
  const missing: Array<{ name: NativeModule; reason: string }> = [];
  for (const name of names) {
    try {
      load(name);
    } catch (err) {
      missing.push({ name, reason: loadFailure(errorText(err)) });
    }
  }
  return missing;
}

/**
 * Why an addon did not load, in the loader's words made plain: not installed (better-sqlite3 is
 * an optional peer, installed by a project on a Node without node:sqlite), built for another
 * Node's ABI (Node was changed after npm install; npm rebuild fixes it), or not built at all.
 */
export function loadFailure(loaderMessage: string): string {
  if (/Cannot find (module|package) 'better-sqlite3'/.test(loaderMessage)) return 'not installed';
  const abi = /NODE_MODULE_VERSION (\d+)\.[\s\S]*?requires\s+NODE_MODULE_VERSION (\d+)/.exec(loaderMessage);
  if (abi) return `built for another Node (NODE_MODULE_VERSION ${abi[1]}; this Node, ${process.version}, needs ${abi[2]})`;
  return 'not built';
}

/**
 * The command that adds better-sqlite3 to a user's project, at the range fleetlab's package.json
 * names: an optional peer, needed only on a Node without node:sqlite (20, 22.12), so installs on
 * the others never build it.
 */
export function installSqliteCommand(): string {
  const manifest = JSON.parse(readFileSync(join(fleetlabRoot(import.meta.url), 'package.json'), 'utf8')) as { peerDependencies?: Record<string, string> };
  return `npm install --save-dev better-sqlite3@${manifest.peerDependencies?.['better-sqlite3'] ?? 'latest'}`;
}

/** The command that allows and builds the addons in a user's project. */
export function buildCommand(names: readonly string[]): string {
  return `npm install-scripts approve ${names.join(' ')} && npm rebuild ${names.join(' ')}`;
}

/** Of `names`, the addons this Node needs: the cloud uses node:sqlite where Node has it. */
export function neededOnThisNode(names: readonly NativeModule[]): NativeModule[] {
  return names.filter((n) => n !== 'better-sqlite3' || sqliteDriverName() === 'better-sqlite3');
}

/** Throws one HIL_ERR_NATIVE_MODULE naming every addon in `names` this Node needs that does not load. */
export function requireNativeModules(names: readonly NativeModule[]): void {
  const missing = unbuiltNativeModules(neededOnThisNode(names));
  if (missing.length === 0) return;
  if (missing.some((m) => m.reason === 'not installed' && m.name === 'better-sqlite3')) {
    throw new FleetlabError(
      'HIL_ERR_NATIVE_MODULE',
      `better-sqlite3 (for ${PURPOSE['better-sqlite3']}) is not installed: Node ${process.version} has no node:sqlite, and fleetlab installs it only as an optional peer. ` +
        `Fix: ${installSqliteCommand()}, or run Node 22.13 or later`,
    );
  }
  const failed = missing.map((m) => m.name);
  const plural = failed.length > 1;
  const unbuilt = missing.filter((m) => m.reason === 'not built');
  // One reason for all: said once, as before; otherwise each addon with its own.
  const list =
    unbuilt.length === missing.length
      ? `${missing.map((m) => `${m.name} (for ${PURPOSE[m.name]})`).join(' and ')} ${plural ? 'are' : 'is'} not built in this installation`
      : missing.map((m) => `${m.name} (for ${PURPOSE[m.name]}) is ${m.reason}`).join('; ');
  if (unbuilt.length === 0) {
    throw new FleetlabError('HIL_ERR_NATIVE_MODULE', `the native module${plural ? 's' : ''} ${list}: Node was changed after npm install. Fix: npm rebuild ${failed.join(' ')}`);
  }
  throw new FleetlabError(
    'HIL_ERR_NATIVE_MODULE',
    `the native module${plural ? 's' : ''} ${list} ` +
      `(npm 12 skips install scripts that package.json's "allowScripts" does not allow; \`npx fleetlab init\` adds them). ` +
      `Fix: ${buildCommand(failed)}`,
  );
}
