/**
 * `fleetlab sweep` and `fleetlab replay` stopped as users stop them: Ctrl-C (SIGINT to the
 * foreground job's group) ends a sweep with nothing of it left; `kill -9` of either process
 * alone leaves what it started to the next start of a simulated device on this machine, which
 * removes it (sim/device.ts reapAbandonedDevices: every sweep point, replay and spec starts
 * one). Run as a user runs them: the CLI from the sources, in a process group of its own.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import { until } from '../src/wait.js';
import { userTmpDir } from '../src/user-tmp.js';
import { SimDevice } from '../sim/device.js';
import { captureDevice } from '../hil/capture/capture.js';
import { hostShell } from '../hil/targets/host-shell.js';
import { httpApi } from '../hil/lib/http.js';
import { commandLine, descendantsOf, NO_TRACES, tracesOf, type TracedRun } from './helpers/stack-process.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const docker = new Docker({ socketPath: '/var/run/docker.sock' });
const FROM = 'fixtures/apps/fragile/compose.yaml';
const TO = 'fixtures/apps/fragile/compose.v2.yaml';
const WAIT = { timeoutMs: 120_000, intervalMs: 100 };
const SIM = { port: 0, engine: 'sim', dockerSocket: '', localMode: true } as const;

interface Cli {
  readonly child: ChildProcess;
  readonly exited: Promise<number | NodeJS.Signals | null>;
  output(): { stdout: string; stderr: string };
}

function cli(args: readonly string[]): Cli {
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'cli/main.ts'), ...args], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: { ...process.env, TESTCONTAINERS_RYUK_DISABLED: 'true' },
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (t: string) => (stdout += t));
  child.stderr!.setEncoding('utf8').on('data', (t: string) => (stderr += t));
  const exited = new Promise<number | NodeJS.Signals | null>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
  return { child, exited, output: () => ({ stdout, stderr }) };
}

/** The simulated device `run` started (in the plain or this user's own temporary directory): what tracesOf looks for. */
async function deviceOf(run: Cli, prefix: string): Promise<TracedRun> {
  const pid = run.child.pid!;
  const dir = await until(
    `the device directory of process ${pid}`,
    async () =>
      [...new Set([tmpdir(), userTmpDir()])]
        .flatMap((base) => readdirSync(base).filter((n) => n.startsWith(prefix)).map((n) => join(base, n)))
        .find((d) => existsSync(join(d, 'owner.json')) && existsSync(join(d, 'supervisor', 'device.json')) && (JSON.parse(readFileSync(join(d, 'owner.json'), 'utf8')) as { owner: number }).owner === pid),
    (d) => d !== undefined,
    WAIT,
  );
  const { session } = JSON.parse(readFileSync(join(dir!, 'owner.json'), 'utf8')) as { session: string };
  const { uuid } = JSON.parse(readFileSync(join(dir!, 'supervisor', 'device.json'), 'utf8')) as { uuid: string };
  // tsx's esbuild service is the test's way of running the sources (users run the compiled CLI); it ends with its pipe.
  const descendants = descendantsOf(pid).filter((d) => !commandLine(d.pid).includes('esbuild --service'));
  return { pid, session, descendants, ready: { stateDir: dir!, device: { uuid } } };
}

const printed = (run: Cli, text: string) => until(`"${text}" printed`, async () => run.output().stderr + run.output().stdout, (o) => o.includes(text) || o.includes('fleetlab: error'), WAIT);

/** The next start of a simulated device on this machine, as the next sweep's first point makes. */
async function nextStart(): Promise<void> {
  const device = await SimDevice.start(SIM);
  await device.stop();
}

describe('a sweep and a replay, stopped by their user', () => {
  const runs: Cli[] = [];
  afterAll(() => {
    for (const r of runs) {
      try {
        process.kill(-r.child.pid!, 'SIGKILL');
      } catch {
        // the group is gone already
      }
    }
  });

  it('Ctrl-C: the sweep stops after its step and removes its device', async () => {
    const run = cli(['sweep', '--from', FROM, '--to', TO, '--target', 'sim', '--points', '2', '--seed', '3']);
    runs.push(run);
    await printed(run, 'release 1 runs');
    const device = await deviceOf(run, 'fleetlab-sim-');
    expect((await tracesOf(device, docker)).containers.length).toBeGreaterThan(0);
    process.kill(-run.child.pid!, 'SIGINT');
    expect(await Promise.race([run.exited, new Promise((r) => setTimeout(() => r('still running'), 60_000))])).toBe(1);
    expect(run.output().stderr).toContain('interrupted: stopping after this step and removing the device');
    expect(await tracesOf(device, docker)).toEqual(NO_TRACES);
  }, 300_000);

  it('kill -9 of the sweep: the next start removes its device, processes and directory', async () => {
    const run = cli(['sweep', '--from', FROM, '--to', TO, '--target', 'sim', '--points', '2', '--seed', '3']);
    runs.push(run);
    await printed(run, 'release 1 runs');
    const device = await deviceOf(run, 'fleetlab-sim-');
    process.kill(run.child.pid!, 'SIGKILL');
    await run.exited;
    const left = await tracesOf({ ...device, descendants: device.descendants.filter((d) => d.pid !== run.child.pid) }, docker);
    expect(left.runDir || left.containers.length > 0 || left.processes.length > 0).toBe(true);
    await nextStart();
    expect(await tracesOf(device, docker)).toEqual(NO_TRACES);
  }, 300_000);

  it('kill -9 of a replay: its supervisor and dbus-daemon are stopped and its directory removed by the next start', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fleetlab-sweep-killed-'));
    try {
      const original = await SimDevice.start(SIM);
      const info = original.info();
      const bundle = join(dir, 'device.tar.gz');
      try {
        const api = httpApi({ url: info.url, apiKey: info.apiKey, uuid: info.uuid, vendor: original.options.vendor, lockRoot: original.lockRoot });
        await captureDevice({ out: bundle, source: { kind: 'api', address: info.url }, api, key: info.apiKey, exec: hostShell, paths: original.paths, redaction: 'default', fleetlab: '0.0.0-test' });
      } finally {
        await original.stop();
      }
      const run = cli(['replay', bundle]);
      runs.push(run);
      await printed(run, '"event":"ready"');
      const replay = await deviceOf(run, 'fleetlab-replay-');
      const processes = (await tracesOf(replay, docker)).processes;
      expect(processes.some((p) => p.includes('dbus-daemon')), processes.join('\n')).toBe(true);
      process.kill(run.child.pid!, 'SIGKILL');
      await run.exited;
      await nextStart();
      expect(await tracesOf(replay, docker)).toEqual(NO_TRACES);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});
