/**
 * The example app (examples/device-app) as a CI runner's user runs it: in the docker group, not
 * root (a temporary user made for the test), on Node 24 from the registry with the npm beside
 * it. Its own install of the packed tarball and `init`, then the steps of the CI recipes in
 * examples/ci/ as written: GitHub Actions on container, GitLab CI on sim (issue 39 items 4, 5).
 * Root runs the container target in the checkout's own HIL suite (.ci/run), and the sim target
 * with the team app (team-app.test.ts).
 *
 * A fresh runner has no base image, so this file takes `fleetlab/busybox:latest` away for its
 * run and the recipes make it anew: nothing else may build on this dockerd meanwhile (.ci/run
 * runs it after the HIL projects and team-app.test.ts). Each inner run's JUnit report is copied
 * to test-results/package-<name>-junit.xml.
 */
import { chownSync, cpSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { cannotMakeUsers, makeDockerUser, type TempUser } from '../helpers/temp-user.js';
import { githubRunSteps, gitlabJobSteps, type RecipeStep } from './ci-recipe.js';
import { full, keepReport, REPO, run } from './packed.js';
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

  const packed = inject('fleetlabPackage');

  beforeAll(async () => {
    user = makeDockerUser('fleetlab-ci');
    // The tarball sits in root's private work directory: the user gets a copy of its own.
    const own = join(user.home, basename(packed.tarball));
    cpSync(packed.tarball, own);
    chownSync(own, user.uid, user.uid);
    dir = join(user.home, 'device-app');
    // The app without what init writes (its config, its spec); the example's specs come after.
    const copied = await user.run('sh', ['-c', 'mkdir "$2" && cd "$1" && cp -r compose.yaml compose.v2.yaml recorder ticker "$2"/ && printf \'{"name":"device-app","private":true}\\n\' > "$2/package.json"', 'copy', join(REPO, 'examples/device-app'), dir], user.home);
    expect(copied.code, copied.out).toBe(0);
    // Node 24 first on the user's PATH, as setup-node leaves it, and its headers for addon
    // builds (nodejs.org, where node-gyp would fetch them, is not reachable here).
    userNpmEnv = packed.userNode;
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
