/**
 * `fleetlab init`: sets up a device team's directory for `fleetlab test`. Writes a config
 * naming the team's compose project and one example spec for it (or, with no compose file, a
 * minimal two-service example app too); adds the install-script approvals fleetlab's native
 * addons need to the team's package.json and builds them when npm skipped them. Never
 * overwrites a file without `force`. A compose file fleetlab cannot run as it is still gets
 * its files: init says what is wrong, each with its line, and the config lists the refused
 * keys under `ignoreComposeKeys`, commented out, for the team to decide.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { execa } from 'execa';
import { FleetlabError, errorText } from '../../src/errors.js';
import { buildCommand, installSqliteCommand, neededOnThisNode, unbuiltInNewProcess, unbuiltNativeModules, type NativeModule } from '../../src/native-modules.js';
import { COMPOSE_FILE_NAMES, checkCompose, type ComposeCheck } from '../release/compose.js';

export interface InitOptions {
  dir: string;
  force: boolean;
  log: (line: string) => void;
  /** Build unbuilt native addons with `npm rebuild` (default true). */
  rebuild?: boolean;
}

export const CONFIG_FILE = 'fleetlab.config.ts';
export const SPEC_FILE = 'fleetlab/app.spec.ts';

/**
 * Install scripts in fleetlab's runtime tree, as the team's package.json must say under npm 12:
 * the addons fleetlab loads on this Node are allowed; the rest build optional speed-ups or print
 * notices. better-sqlite3 only where Node has no node:sqlite (20, 22.12): on 22.13 and later
 * nothing loads it, and its build from source takes a minute of every install (`npm ci` in CI).
 */
export function neededAllowScripts(): Readonly<Record<string, boolean>> {
  return {
    'better-sqlite3': neededOnThisNode(['better-sqlite3']).length > 0,
    epoll: true,
    'cpu-features': false,
    protobufjs: false,
    ssh2: false,
  };
}
const NATIVE: readonly NativeModule[] = ['better-sqlite3', 'epoll'];

/** The example app written when the directory has no compose file: two services, a volume, the supervisor API. */
export const EXAMPLE_APP: Readonly<Record<string, string>> = {
  'compose.yaml': `# A minimal two-service device app (written by fleetlab init). Replace it with yours.
services:
  web:
    build: ./web
    labels:
      io.platform.features.supervisor-api: "1"
    environment:
      GREETING: hello
    volumes:
      - data:/data
  worker:
    build: ./worker
volumes:
  data: {}
`,
  'web/Dockerfile': `# fleetlab/busybox is a local base image (no outside registry is reachable); fleetlab test makes it.
FROM fleetlab/busybox:latest
COPY run.sh /run.sh
CMD ["/bin/sh", "/run.sh"]
`,
  'web/run.sh': `# Counts its starts in the data volume and says hello every 2 s until stopped.
trap 'echo "web: stopping"; exit 0' TERM INT
starts=$(( $(cat /data/starts 2>/dev/null || echo 0) + 1 ))
echo "$starts" > /data/starts
echo "web: start $starts, $GREETING"
while :; do echo "web: $GREETING"; sleep 2 & wait $!; done
`,
  'worker/Dockerfile': `FROM fleetlab/busybox:latest
CMD ["/bin/sh", "-c", "trap 'exit 0' TERM INT; i=0; while :; do i=$((i+1)); echo \\"worker: tick $i\\"; sleep 2 & wait $!; done"]
`,
};

function configText(app: string, refused: readonly string[]): string {
  const ignore = refused.length
    ? `  // Keys of ${app.replace(/^\.\//, '')} that fleetlab does not carry to the device yet. Uncomment those your app
  // can run without (each is then left out, with a warning at every run); remove the others from the file.
  // ignoreComposeKeys: ${JSON.stringify(refused)},
`
    : '';
  return `import { defineConfig } from 'fleetlab/test';

// npx fleetlab test [--target sim|container|qemu|board] runs the specs in ./fleetlab on a device
// of that target; reports go to ./fleetlab-report (html/, junit.xml).
export default defineConfig({
  app: ${JSON.stringify(app)},
${ignore}});
`;
}

function specText(services: readonly string[]): string {
  return `import { expect, test } from 'fleetlab/test';

// Written by fleetlab init for your app; the spec API is in fleetlab's docs/spec-api.md.
test('every service of the app runs on the device', async ({ device }) => {
  const release = await device.deploy(); // builds the app in fleetlab.config.ts and waits until it runs
  const status = await device.status();
  expect(status.release).toBe(String(release.releaseId));
  for (const service of ${JSON.stringify(services)}) {
    expect(status.containers.find((c) => c.serviceName === service)?.status, service).toBe('Running');
  }
});
`;
}

function findCompose(dir: string): string | undefined {
  return COMPOSE_FILE_NAMES.map((n) => join(dir, n)).find((p) => existsSync(p));
}

/** Adds the approvals fleetlab needs to allowScripts; returns the entries it added. */
function addAllowScripts(packageJson: string): string[] {
  let pkg: Record<string, unknown>;
  try {
    pkg = JSON.parse(readFileSync(packageJson, 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new FleetlabError('HIL_ERR_COMPOSE', `${packageJson}: cannot read it as JSON (${errorText(err)}); fix it, then run fleetlab init again`);
  }
  const allow = (pkg.allowScripts ?? {}) as Record<string, boolean>;
  const added: string[] = [];
  for (const [name, value] of Object.entries(neededAllowScripts())) {
    // The team's own decision on a package stands.
    if (Object.keys(allow).some((k) => k === name || k.startsWith(`${name}@`))) continue;
    allow[name] = value;
    added.push(`"${name}": ${value}`);
  }
  if (added.length) {
    pkg.allowScripts = allow;
    writeFileSync(packageJson, `${JSON.stringify(pkg, null, 2)}\n`);
  }
  return added;
}

/** What fleetlab cannot run in the team's compose file, said now rather than at the first deploy. */
function sayProblems(check: ComposeCheck, name: string, log: (line: string) => void): void {
  const at = (line: number | undefined) => (line === undefined ? '' : ` (line ${line})`);
  if (check.refused.length) {
    const keys = check.refused.map((r) => `${r.key}${at(r.line)}`).join(', ');
    log(`${name}: ${check.refused.length} key${check.refused.length === 1 ? '' : 's'} fleetlab does not carry to the device: ${keys}; ${CONFIG_FILE} lists them under ignoreComposeKeys, commented out: uncomment those your app can run without, remove the others from ${name}`);
  }
  for (const p of check.problems) log(`${name}${p.line === undefined ? '' : `:${p.line}`}: ${p.key}: ${p.message} (fix it before fleetlab test)`);
}

export async function initProject(options: InitOptions): Promise<void> {
  const { dir, log } = options;
  const compose = findCompose(dir);
  const files: Record<string, string> = {};
  let composePath: string;
  if (compose) {
    composePath = compose;
    log(`found ${relative(dir, compose)}`);
  } else {
    log(`no compose file here (looked for ${COMPOSE_FILE_NAMES.join(', ')}): writing a minimal two-service example app`);
    Object.assign(files, EXAMPLE_APP);
    composePath = join(dir, 'compose.yaml');
  }
  const check = compose ? checkCompose(compose) : undefined;
  const services = check ? check.serviceNames : ['web', 'worker'];
  files[CONFIG_FILE] = configText(`./${relative(dir, composePath)}`, check?.refused.map((r) => r.key) ?? []);
  files[SPEC_FILE] = specText(services);

  const existing = Object.keys(files).filter((f) => existsSync(join(dir, f)));
  if (existing.length && !options.force) {
    throw new FleetlabError('HIL_ERR_COMPOSE', `${existing.join(', ')} already exist${existing.length === 1 ? 's' : ''} in ${dir}; nothing was written (run fleetlab init --force to overwrite)`);
  }
  for (const [file, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    writeFileSync(join(dir, file), text);
    log(`wrote ${file}`);
  }
  if (check) sayProblems(check, relative(dir, check.project.file), log);

  const packageJson = join(dir, 'package.json');
  if (existsSync(packageJson)) {
    const added = addAllowScripts(packageJson);
    if (added.length) log(`package.json: allowScripts += ${added.join(', ')} (npm 12 runs only the install scripts listed there)`);
  } else {
    log(`no package.json here: install fleetlab with npm in this directory first (npm install fleetlab)`);
  }

  const absent = unbuiltNativeModules(neededOnThisNode(NATIVE)).some((m) => m.reason === 'not installed');
  if (absent && options.rebuild !== false && existsSync(packageJson)) {
    // An optional peer: only a Node without node:sqlite needs it, and installs it built.
    const install = installSqliteCommand();
    log(`Node ${process.version} has no node:sqlite: adding better-sqlite3 to this project: ${install} (a minute or two)`);
    const [npm, ...args] = install.split(' ');
    try {
      await execa(npm!, args, { cwd: dir, stdio: ['ignore', 'inherit', 'inherit'] });
    } catch (err) {
      throw new FleetlabError('HIL_ERR_NATIVE_MODULE', `${install} failed (${errorText(err).split('\n')[0]}); run it yourself, or use Node 22.13 or later`);
    }
  }
  // Asked anew after an install: this process still takes the module it could not find for absent.
  const unbuilt = (absent ? await unbuiltInNewProcess(neededOnThisNode(NATIVE)) : unbuiltNativeModules(neededOnThisNode(NATIVE))).map((m) => m.name);
  if (unbuilt.length === 0) {
    log('native modules: built');
  } else if (options.rebuild === false || !existsSync(packageJson)) {
    log(`native modules not built: ${unbuilt.join(', ')}; run: ${buildCommand(unbuilt)}`);
  } else {
    // better-sqlite3 compiles from source where no prebuilt binary is reachable; epoll takes seconds.
    log(`building the native modules npm skipped (${unbuilt.join(', ')}): npm rebuild ${unbuilt.join(' ')}${unbuilt.includes('better-sqlite3') ? ' (a minute or two)' : ''}`);
    try {
      await execa('npm', ['rebuild', ...unbuilt], { cwd: dir, stdio: ['ignore', 'inherit', 'inherit'] });
    } catch (err) {
      throw new FleetlabError('HIL_ERR_NATIVE_MODULE', `npm rebuild ${unbuilt.join(' ')} failed (${errorText(err).split('\n')[0]}); run it yourself: ${buildCommand(unbuilt)}`);
    }
    const still = await unbuiltInNewProcess(neededOnThisNode(NATIVE));
    if (still.length) {
      // Built, but against another Node's headers: npm's nodedir (an offline machine's setting) is not this Node's.
      const otherAbi = still.some((m) => m.reason.startsWith('built for another Node'));
      const why = still.map((m) => `${m.name}, ${m.reason}`).join('; ');
      throw new FleetlabError('HIL_ERR_NATIVE_MODULE', `still not built after npm rebuild: ${why}; ${otherAbi ? `npm built it against another Node's headers: see \`npm config get nodedir\`, point it at ${process.version}'s (or unset it), then ` : ''}run: ${buildCommand(still.map((m) => m.name))}`);
    }
    log('native modules: built');
  }
  log(`next: npx fleetlab test            (your specs in ./fleetlab, on a simulated device; --target container|qemu|board)`);
}
