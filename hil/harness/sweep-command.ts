/**
 * `fleetlab sweep`: a fault sweep from the command line, on a device of the named target that
 * the command starts itself (a fresh one per point, as a spec file gets), with the table and
 * a rerun line for each broken point at the end. Input is checked before any device starts.
 */
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { FleetlabError, errorText } from '../../src/errors.js';
import { loadTarget, targetNames } from '../targets/index.js';
import type { TargetDriver } from '../targets/target-driver.js';
import type { DeviceUnderTest } from '../../device-access/protocols.js';
import { TIME_SCALE_VARIABLE } from '../lib/wait.js';
import { loadCompose } from '../release/compose.js';
import { prepareTargetsNamed } from '../suite-setup.js';
import { LAB_VARIABLE, labSelection } from '../lab/worker-lease.js';
import { parseFaults, parsePointId } from '../sweep/points.js';
import { requireFaults, runSweep, type SweepResult } from '../sweep/sweep.js';
import { sweepSummary, sweepTable } from '../sweep/report.js';
import type { SweepCheck } from '../sweep/invariants.js';
import type { DeviceSource, SweepDevice } from '../sweep/device.js';
import { dockerOnDevice } from '../sweep/engine-shell.js';
import { instrumentDevice, StepEmitter } from '../lib/steps.js';
import { Device } from './device.js';
import { pointRecording } from './point-timeline.js';
import { checkTargetHost, harnessEnv } from './run.js';

export interface SweepCommandOptions {
  readonly from: string;
  readonly to: string;
  readonly target: string;
  readonly faults: readonly string[];
  readonly points: number;
  /** Devices at once, each with its own points (default 1). */
  readonly workers?: number;
  readonly seed?: number;
  readonly only?: string;
  /** `<service>: <command>`, run in the service's container after every point; exit 0 passes. */
  readonly check?: string;
  readonly settleMs?: number;
  readonly holdMs?: number;
  /** Where broken points' devices are captured (`<point>.tar.gz`), and their timelines drawn (`<point>.timeline.html`). */
  readonly captureDir?: string;
  readonly json: boolean;
}

/** Where a broken point's timeline goes without --capture: beside Playwright's own test output. */
const SWEEP_TIMELINE_DIR = join('test-results', 'sweep');

/** More devices at once than this is more than a machine of this kind runs well, and a typo more often than a wish. */
const MAX_WORKERS = 16;

const bad = (message: string) => new FleetlabError('SUP_ERR_BAD_REQUEST', `sweep: ${message}`);

/** `--check '<service>: <command>'` as a check: the command in the service's running container, through the device's engine. */
export function commandCheck(spec: string): SweepCheck {
  const m = /^\s*([A-Za-z0-9][A-Za-z0-9_.-]*)\s*:\s*(\S.*)$/.exec(spec);
  if (!m) throw bad(`--check takes '<service>: <command>', not ${JSON.stringify(spec)}`);
  const [, service, command] = m as unknown as [string, string, string];
  return async (device: SweepDevice) => {
    const container = (await device.status()).containers.find((c) => c.serviceName === service && c.status === 'Running');
    if (!container) throw new FleetlabError('HIL_ERR_DEPLOY', `check: no running container of service ${service}`);
    const run = dockerOnDevice(device, ['exec', container.containerId, 'sh', '-c', command]);
    if (!run) throw bad(`--check needs a shell that reaches the device's engine; target ${device.target} has none`);
    const r = await run;
    if (r.exitCode !== 0) throw new FleetlabError('HIL_ERR_DEPLOY', `check "${command}" in ${service} exited ${r.exitCode}: ${(r.stderr || r.stdout).trim().slice(-500) || '(no output)'}`);
  };
}

/** Every input checked, each with what to fix, before a device starts. */
export function checkSweepInput(o: SweepCommandOptions): void {
  for (const [flag, path] of [['--from', o.from], ['--to', o.to]] as const) {
    if (!existsSync(path)) throw bad(`${flag} ${path}: no such compose file or directory`);
    loadCompose(resolve(path));
  }
  if (!targetNames.includes(o.target)) throw bad(`--target ${JSON.stringify(o.target)}: known targets are ${targetNames.join(', ')}`);
  parseFaults(o.faults);
  if (o.only !== undefined) parsePointId(o.only);
  if (!Number.isInteger(o.points) || o.points < 1) throw bad(`--points must be a whole number of at least 1, not ${o.points}`);
  if (o.workers !== undefined && (!Number.isInteger(o.workers) || o.workers < 1 || o.workers > MAX_WORKERS)) throw bad(`--workers must be a whole number from 1 to ${MAX_WORKERS}, not ${o.workers}`);
  if (o.check !== undefined) commandCheck(o.check);
  // One board config is one board: two workers on it would undo each other's points.
  if (o.target === 'board' && (o.workers ?? 1) > 1 && !labSelection()) throw bad(`--workers ${o.workers} on the board target needs a lab to lease a board per worker (${LAB_VARIABLE}); one board runs one worker`);
  if (o.captureDir !== undefined && existsSync(o.captureDir) && !statSync(o.captureDir).isDirectory()) throw bad(`--capture ${o.captureDir} is a file: name a directory (made if missing)`);
}

/** Runs the sweep and prints its table; resolves with the exit code (1 when a point broke). */
export async function runSweepCommand(o: SweepCommandOptions): Promise<number> {
  checkSweepInput(o);
  const seed = o.seed ?? Math.floor(Math.random() * 2 ** 31);
  const log = (line: string) => process.stderr.write(`fleetlab sweep: ${line}\n`);
  log(`seed ${seed} (--seed ${seed} draws the same points)`);
  const dockerSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
  await checkTargetHost(o.target, dockerSocket, 'fleetlab sweep');
  Object.assign(process.env, harnessEnv(dockerSocket));
  const driver = await loadTarget(o.target);
  // Before any device starts: a fault the target cannot inject is bad input.
  requireFaults(driver.name, driver.provides, parseFaults(o.faults));
  await prepareTargetsNamed([o.target], { testImages: true });
  const abort = new AbortController();
  const onSignal = () => {
    log('interrupted: stopping after this step and removing the device');
    abort.abort(bad('interrupted'));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // A driver per worker: the qemu target's driver is one board, whose spec files take turns.
  const drivers = [driver, ...(await Promise.all(Array.from({ length: (o.workers ?? 1) - 1 }, () => loadTarget(o.target))))];
  const timelineDir = resolve(o.captureDir ?? SWEEP_TIMELINE_DIR);
  const devices = drivers.map((d) => targetDevices(d, { log, signal: abort.signal, timelineDir }));
  let result: SweepResult;
  try {
    for (const d of new Set(drivers)) await d.prepare?.();
    result = await runSweep(devices, {
      from: o.from,
      to: o.to,
      faults: parseFaults(o.faults),
      points: o.points,
      seed,
      ...(o.only !== undefined ? { only: parsePointId(o.only) } : {}),
      ...(o.check !== undefined ? { check: commandCheck(o.check) } : {}),
      ...(o.settleMs !== undefined ? { bounds: { settleMs: o.settleMs } } : {}),
      ...(o.holdMs !== undefined ? { holdMs: o.holdMs } : {}),
      ...(o.captureDir !== undefined ? { captureDir: resolve(o.captureDir) } : {}),
      progress: log,
      signal: abort.signal,
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await Promise.all(devices.map((d) => d.close()));
    for (const d of new Set(drivers)) await dispose(d);
  }
  if (o.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else process.stdout.write(`${sweepTable(result)}\n\n${sweepSummary(result, (id) => rerunLine(o, seed, id))}\n`);
  return result.points.some((p) => p.outcome === 'broken') ? 1 : 0;
}

/**
 * Fresh devices of the target, one at a time: each `fresh()` removes the one before; `close()`
 * the last. With `timelineDir`, each point's device is recorded and a broken one's timeline
 * drawn there as `<point>.timeline.html`.
 */
export function targetDevices(driver: TargetDriver, o: { log: (line: string) => void; signal?: AbortSignal; timelineDir?: string }): DeviceSource & { close(): Promise<void> } {
  const { log, signal, timelineDir } = o;
  // The harness's steps and the protocol calls of every device of this source, for the timeline's lanes.
  const steps = new StepEmitter();
  let current: DeviceUnderTest | undefined;
  const retire = async () => {
    const device = current;
    current = undefined;
    await device?.close().catch((err: unknown) => log(`removing the device: ${errorText(err)}`));
  };
  return {
    async fresh() {
      await retire();
      if (signal?.aborted) throw signal.reason;
      current = await driver.start({});
      // The device's deadlines follow the target's speed, as in a spec (lib/wait.ts).
      process.env[TIME_SCALE_VARIABLE] = String(current.facts?.timeScale ?? 1);
      return new Device(instrumentDevice(current, steps), { startedAt: Date.now(), log, step: (title, fn, harness) => (harness ? steps.run('harness', harness.action, title, fn) : fn()) });
    },
    ...(timelineDir !== undefined
      ? {
          record: () => {
            if (!current) throw new FleetlabError('SUP_ERR_HOST', 'sweep: no device to record yet');
            return pointRecording(current, steps, async (id, html) => {
              mkdirSync(timelineDir, { recursive: true });
              const path = join(timelineDir, `${id}.timeline.html`);
              await writeFile(path, html);
              return path;
            });
          },
        }
      : {}),
    close: retire,
  };
}

function rerunLine(o: SweepCommandOptions, seed: number, id: string): string {
  return ['fleetlab sweep', '--from', o.from, '--to', o.to, '--target', o.target, ...(o.check ? ['--check', `'${o.check.replace(/'/g, `'\\''`)}'`] : []), '--seed', String(seed), '--only', id].join(' ');
}

async function dispose(driver: TargetDriver): Promise<void> {
  await driver.dispose?.().catch((err: unknown) => process.stderr.write(`fleetlab sweep: stopping the target: ${errorText(err)}\n`));
}
