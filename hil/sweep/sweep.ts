/**
 * A fault sweep over a team's own update (`fleetlab sweep`, `device.sweep`): the update from
 * one release to the next is measured once without a fault, then run again on a fresh device
 * for every point, with the fault injected at the point's moment, and the invariants checked
 * once power is back. A broken point names its invariant and reruns alone by its id.
 */
import { FleetlabError, errorText } from '../../src/errors.js';
import { sleep, until } from '../../src/wait.js';
import type { Capability } from '../../device-access/protocols.js';
import { releaseRuns, type DeployedRelease } from '../release/local-deploy.js';
import { scaled } from '../lib/wait.js';
import type { DeviceSource, PointRecording, SweepDevice } from './device.js';
import { checkInvariants, type Broken, type InvariantBounds, type SweepCheck } from './invariants.js';
import { ignoredLock, watchLocks } from './lock-watch.js';
import { capturePoint } from './capture-point.js';
import { planPoints, pointOf, type Fault, type Phase, type SweepPoint, type UpdateWindow } from './points.js';

export interface SweepOptions {
  /** Compose files or directories of the release the device runs, and of the update. */
  readonly from: string;
  readonly to: string;
  readonly faults: readonly Fault[];
  readonly points: number;
  readonly seed: number;
  /** One point only, as the table names it (`power-cut@1830`): a broken point run again. */
  readonly only?: { readonly fault: Fault; readonly offsetMs: number };
  readonly check?: SweepCheck;
  readonly bounds?: Partial<InvariantBounds>;
  /** How long a held fault (network-drop, disk-full) lasts before it is undone. */
  readonly holdMs?: number;
  /** How long after the release runs the app's own first seconds last (points land there too). */
  readonly firstSecondsMs?: number;
  /** A directory: each broken point's device captured there as `<point id>.tar.gz` for `fleetlab replay`. */
  readonly captureDir?: string;
  readonly progress?: (line: string) => void;
  readonly signal?: AbortSignal;
}

export interface PointResult extends SweepPoint {
  readonly outcome: 'passed' | 'broken';
  readonly broken: readonly Broken[];
  /** From power back to the release running; null when it never ran. */
  readonly settleMs: number | null;
  /** The broken device's bundle (`captureDir`), or why it could not be taken. */
  readonly capture?: { readonly path: string } | { readonly error: string };
  /** The broken point's device timeline (where the source records), or why it could not be drawn. */
  readonly timeline?: { readonly path: string } | { readonly error: string };
}

export interface SweepResult {
  readonly seed: number;
  readonly window: UpdateWindow;
  readonly points: readonly PointResult[];
  readonly wallMs: number;
}

const DEFAULT_BOUNDS: InvariantBounds = { convergeMs: 120_000, settleMs: 10_000, healthyMs: 60_000 };
const FIRST_SECONDS_MS = 5_000;
const MEASURE_POLL_MS = 100;
/** How often a point samples the app's update locks beside its containers. */
const LOCK_SAMPLE_MS = 250;
/** The longest a fault itself takes beside its hold (a power cycle, an engine restart). */
const FAULT_MAX_MS = 60_000;
const HOLD_MS = 10_000;
/**
 * What each fault needs of the target. The sim and container targets share this machine's
 * dockerd and disk, so neither restarts its engine, fills its disk or downloads a release
 * over a network it could lose: those faults run on qemu and board.
 */
const FAULT_NEEDS: Record<Fault, Capability> = {
  'power-cut': 'power.cycle',
  'supervisor-kill': 'supervisor.kill',
  'engine-restart': 'engine.restart',
  'network-drop': 'network.registry',
  'disk-full': 'disk.fill',
};

const sweepError = (message: string, cause?: unknown) => new FleetlabError('SUP_ERR_BAD_REQUEST', `sweep: ${message}`, cause === undefined ? undefined : { cause });

/** Refuses faults the target cannot inject, naming the capability each needs. */
export function requireFaults(target: string, capabilities: Iterable<Capability>, faults: readonly Fault[]): void {
  const has = new Set(capabilities);
  const missing = faults.filter((f) => !has.has(FAULT_NEEDS[f]));
  if (missing.length) throw sweepError(`target ${target} cannot inject ${missing.map((f) => `${f} (needs ${FAULT_NEEDS[f]})`).join(', ')}; run the sweep on a target that can (qemu or board inject every fault)`);
}

/**
 * `workers`: one device source each, giving its own fresh devices; the update is measured on
 * the first, and the points are then handed out in order to whichever worker is free. Results
 * come back in the points' order.
 */
export async function runSweep(workers: readonly DeviceSource[], o: SweepOptions): Promise<SweepResult> {
  if (workers.length === 0) throw sweepError('no device source to run the sweep on');
  const started = Date.now();
  const log = o.progress ?? (() => undefined);
  const bounds = { ...DEFAULT_BOUNDS, ...o.bounds };
  log(`measuring the update from ${o.from} to ${o.to} without a fault`);
  const device = await workers[0]!.fresh();
  requireFaults(device.target, device.capabilities, o.faults);
  const window = await measureWindow(device, o, bounds);
  log(`update window ${window.totalMs} ms: ${window.phases.map((p) => `${p.phase} from ${p.startMs} ms`).join(', ')}`);
  const points = o.only ? [pointOf(window, o.only.fault, o.only.offsetMs)] : planPoints({ window, faults: o.faults, count: o.points, seed: o.seed });
  const results: PointResult[] = new Array<PointResult>(points.length);
  let next = 0;
  let done = 0;
  const work = async (source: DeviceSource, worker: number) => {
    // Bounded by the points: each turn takes the next one, none is taken twice.
    while (next < points.length) {
      if (o.signal?.aborted) throw o.signal.reason;
      const i = next++;
      const point = points[i]!;
      const device = await source.fresh();
      const result = await runPoint(device, source.record?.(), point, o, bounds).catch((err: unknown) => {
        next = points.length; // the other workers stop after the point they are on
        throw err;
      });
      results[i] = result;
      done++;
      const by = workers.length > 1 ? ` [worker ${worker + 1}]` : '';
      log(`point ${done}/${points.length} ${point.id} (${point.phase})${by}: ${result.outcome}${result.broken.map((b) => `; ${b.invariant}: ${b.detail}`).join('')}`);
    }
  };
  // Every worker finishes its point under way before the sweep ends, even when one fails.
  const outcomes = await Promise.allSettled(workers.slice(0, points.length).map((source, w) => work(source, w)));
  const failed = outcomes.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  return { seed: o.seed, window, points: results, wallMs: Date.now() - started };
}

/**
 * The update once, with no fault: when its phases begin, from the hand-over of the new target.
 * Bad input ends here, before any point: releases that do not deploy, two identical releases,
 * a check that fails on an update nothing interrupted.
 */
async function measureWindow(device: SweepDevice, o: SweepOptions, bounds: InvariantBounds): Promise<UpdateWindow> {
  const from = await deploy(device, o.from, '--from', true);
  const fromIds = new Set((await device.status()).containers.map((c) => c.containerId));
  const to = await deploy(device, o.to, '--to', false);
  const handedOver = Date.now();
  if (to.commit === from.commit) throw sweepError(`--from and --to are the same release (commit ${from.commit}): there is no update to sweep`);
  const starts = new Map<Phase, number>([['download', 0]]);
  const at = () => Date.now() - handedOver;
  // Each status read notes the phases begun so far; the wait ends when the release runs.
  const observe = async () => {
    const status = await device.status();
    const mine = status.containers.filter((c) => to.services.includes(c.serviceName));
    if (!starts.has('stop-old') && [...fromIds].some((id) => !status.containers.some((c) => c.containerId === id && c.status === 'Running'))) starts.set('stop-old', at());
    if (!starts.has('start-new') && mine.some((c) => !fromIds.has(c.containerId))) starts.set('start-new', at());
    return status;
  };
  await until('release --to running', observe, (s) => releaseRuns(s, to), {
    // As every wait of the harness's: stretched to the target's speed (lib/wait.ts).
    timeoutMs: scaled(bounds.convergeMs),
    intervalMs: MEASURE_POLL_MS,
    fail: (f) => sweepError(`release --to did not run within ${f.timeoutMs} ms of an update with no fault; last seen ${f.lastSeen}`),
  });
  const appliedMs = at();
  starts.set('first-seconds', appliedMs);
  if (o.check) {
    await o.check(device).catch((err: unknown) => {
      throw sweepError(`the check fails after an update with no fault, so it cannot judge a point: ${errorText(err)}`, err);
    });
  }
  const phases = [...starts.entries()].map(([phase, startMs]) => ({ phase, startMs })).sort((a, b) => a.startMs - b.startMs);
  return { phases, totalMs: appliedMs + (o.firstSecondsMs ?? FIRST_SECONDS_MS) };
}

async function deploy(device: SweepDevice, path: string, flag: string, wait: boolean): Promise<DeployedRelease> {
  try {
    return await device.deploy(path, { wait });
  } catch (err) {
    if (err instanceof FleetlabError && err.code === 'SUP_ERR_BAD_REQUEST') throw err;
    throw sweepError(`${flag} ${path} did not deploy: ${errorText(err)}`, err);
  }
}

async function runPoint(device: SweepDevice, recording: PointRecording | undefined, point: SweepPoint, o: SweepOptions, bounds: InvariantBounds): Promise<PointResult> {
  try {
    return await judgePoint(device, recording, point, o, bounds);
  } finally {
    // Stopped however the point ended; a broken point's page was kept already.
    await recording?.finish({ id: point.id }).catch(() => undefined);
  }
}

async function judgePoint(device: SweepDevice, recording: PointRecording | undefined, point: SweepPoint, o: SweepOptions, bounds: InvariantBounds): Promise<PointResult> {
  const from = await device.deploy(o.from);
  const to = await device.deploy(o.to, { wait: false });
  const handedOver = Date.now();
  const interval = scaled(LOCK_SAMPLE_MS);
  const locks = watchLocks(device, {
    appId: to.appId,
    services: [...new Set([...from.services, ...to.services])],
    intervalMs: interval,
    maxSamples: Math.ceil((point.offsetMs + scaled(bounds.convergeMs + bounds.healthyMs + bounds.settleMs) + (o.holdMs ?? HOLD_MS) + FAULT_MAX_MS) / interval),
  });
  let judged: Awaited<ReturnType<typeof checkInvariants>>;
  try {
    await sleep(Math.max(0, point.offsetMs - (Date.now() - handedOver)));
    await inject(device, point.fault, o.holdMs ?? HOLD_MS);
    judged = await checkInvariants(device, to, bounds, o.check);
  } catch (err) {
    await locks.stop(); // no sampling of a device the next point retires
    throw err;
  }
  const { broken, settleMs } = judged;
  const ignored = ignoredLock(await locks.stop());
  if (ignored) broken.push(ignored);
  const failure = broken.length ? { at: Date.now(), error: broken.map((b) => `${b.invariant}: ${b.detail}`).join('\n') } : undefined;
  // The page first: it reads what the device kept (journal, LED) before a capture adds its own steps.
  const timeline = failure && recording ? await keptAt(recording.finish({ id: point.id, failure })) : undefined;
  const capture = broken.length && o.captureDir !== undefined ? await keptAt(capturePoint(device, o.captureDir, point.id)) : undefined;
  return { ...point, outcome: broken.length ? 'broken' : 'passed', broken, settleMs, ...(capture ? { capture } : {}), ...(timeline ? { timeline } : {}) };
}

/** Where evidence of a broken point was kept, or why it was not: the point's verdict stands either way. */
async function keptAt(keeping: Promise<string | undefined>): Promise<{ path: string } | { error: string } | undefined> {
  return keeping.then((path) => (path === undefined ? undefined : { path }), (err: unknown) => ({ error: errorText(err) }));
}

async function inject(device: SweepDevice, fault: Fault, holdMs: number): Promise<void> {
  switch (fault) {
    case 'power-cut':
      return device.powerCycle();
    case 'supervisor-kill':
      return device.killSupervisor();
    case 'engine-restart':
      return device.faults.restartEngine();
    case 'network-drop':
      return held(() => device.faults.partition(), () => device.faults.heal(), holdMs);
    case 'disk-full':
      return held(() => device.faults.fillDisk(), () => device.faults.freeDisk(), holdMs);
  }
}

/** A fault held for `holdMs`, then undone. */
async function held(start: () => Promise<void>, undo: () => Promise<void>, holdMs: number): Promise<void> {
  await start();
  await sleep(holdMs);
  await undo();
}
