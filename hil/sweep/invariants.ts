/**
 * What must hold after every point of a sweep, each checked and named in the result: the
 * device ends on the new release, its services become healthy and stay up, the team's own
 * check passes, and the supervisor's store is whole with no update lock of its own left.
 * The app's own update locks are watched while the point runs (lock-watch.ts).
 */
import { errorText } from '../../src/errors.js';
import { sleep, until } from '../../src/wait.js';
import type { StateStatus } from '../lib/device-api.js';
import type { SweepDevice } from './device.js';
import { scaled } from '../lib/wait.js';
import { dockerOnDevice } from './engine-shell.js';
import type { DeployedRelease } from '../release/local-deploy.js';

export const INVARIANTS = ['reaches-release', 'healthy', 'stays-up', 'check', 'supervisor-store', 'update-lock'] as const;
export type Invariant = (typeof INVARIANTS)[number];

export interface Broken {
  readonly invariant: Invariant;
  readonly detail: string;
}

/** The team's own check of a point's end state; throws (or rejects) with what is wrong. */
export type SweepCheck = (device: SweepDevice) => Promise<void>;

export interface InvariantBounds {
  /** How long the device may take to run the new release after the fault. */
  readonly convergeMs: number;
  /** How long every service must then stay running, with the same container. */
  readonly settleMs: number;
  /** How long a service with a healthcheck may take to report healthy. */
  readonly healthyMs: number;
}

const SAMPLE_MS = 500;

/**
 * Each invariant in turn, and how long the release took to run again (`settleMs`); a device
 * that never runs it is not asked the rest.
 */
export async function checkInvariants(device: SweepDevice, to: DeployedRelease, bounds: InvariantBounds, check?: SweepCheck): Promise<{ broken: Broken[]; settleMs: number | null }> {
  const started = Date.now();
  try {
    await device.waitForRelease(to, { timeoutMs: bounds.convergeMs });
  } catch (err) {
    return { broken: [{ invariant: 'reaches-release', detail: errorText(err) }], settleMs: null };
  }
  const settleMs = Date.now() - started;
  const broken: Broken[] = [];
  const healthy = await becomesHealthy(device, to, bounds.healthyMs);
  if (healthy) broken.push(healthy);
  const up = await staysUp(device, to, bounds.settleMs);
  if (up) broken.push(up);
  if (check) {
    await check(device).catch((err: unknown) => broken.push({ invariant: 'check', detail: errorText(err) }));
  }
  const store = await storeWhole(device);
  if (store) broken.push(store);
  return { broken, settleMs };
}

const ofRelease = (s: StateStatus, to: DeployedRelease) => s.containers.filter((c) => to.services.includes(c.serviceName) && c.status !== 'Dead');

async function becomesHealthy(device: SweepDevice, to: DeployedRelease, timeoutMs: number): Promise<Broken | undefined> {
  const unhealthy = (s: StateStatus) => ofRelease(s, to).filter((c) => c.health !== undefined && c.health !== 'healthy');
  try {
    await until('every service with a healthcheck healthy', () => device.status(), (s) => unhealthy(s).length === 0, { timeoutMs: scaled(timeoutMs), intervalMs: SAMPLE_MS });
    return undefined;
  } catch {
    const last = await device.status().catch(() => undefined);
    const names = last ? unhealthy(last).map((c) => `${c.serviceName} ${c.health}`).join(', ') : '(no status)';
    return { invariant: 'healthy', detail: `not healthy within ${scaled(timeoutMs)} ms: ${names}` };
  }
}

/**
 * Every service keeps one running container for the whole settle time: no restart loop, no
 * exit. The device API reports a container the engine is restarting as Running (as the
 * supervisor it follows does), so where the device has a shell the engine's own restart count
 * and state are read too.
 */
async function staysUp(device: SweepDevice, to: DeployedRelease, settleMs: number): Promise<Broken | undefined> {
  const first = new Map(ofRelease(await device.status(), to).map((c) => [c.serviceName, c.containerId]));
  const before = await engineStates(device, [...first.values()]);
  const samples = Math.max(1, Math.ceil(settleMs / SAMPLE_MS));
  for (let i = 0; i < samples; i++) {
    await sleep(SAMPLE_MS);
    const now = ofRelease(await device.status(), to);
    const engine = await engineStates(device, [...first.values()]);
    for (const service of to.services) {
      const c = now.find((x) => x.serviceName === service);
      const at = `${i * SAMPLE_MS} ms into the ${settleMs} ms settle`;
      if (!c || c.status !== 'Running') return { invariant: 'stays-up', detail: `${service} ${c ? c.status : 'has no container'} ${at}` };
      if (c.containerId !== first.get(service)) return { invariant: 'stays-up', detail: `${service} got a new container ${at}` };
      const was = before?.get(c.containerId);
      const is = engine?.get(c.containerId);
      if (is && is.state !== 'running') return { invariant: 'stays-up', detail: `${service}'s container is ${is.state} in the engine ${at} (restarted ${is.restarts} times): a restart loop` };
      if (was && is && is.restarts > was.restarts) return { invariant: 'stays-up', detail: `${service}'s container restarted ${is.restarts - was.restarts} time(s) ${at}` };
    }
  }
  return undefined;
}

/** The engine's restart count and state of each container, through the device's shell; undefined where it cannot be read. */
async function engineStates(device: SweepDevice, ids: readonly string[]): Promise<Map<string, { restarts: number; state: string }> | undefined> {
  if (ids.length === 0) return undefined;
  const r = await dockerOnDevice(device, ['inspect', '-f', '{{.Id}} {{.RestartCount}} {{.State.Status}}', ...ids])?.catch(() => undefined);
  if (!r || r.exitCode !== 0) return undefined;
  const states = new Map<string, { restarts: number; state: string }>();
  for (const line of r.stdout.trim().split('\n')) {
    const [id, restarts, state] = line.split(' ');
    if (id && restarts && state) states.set(id, { restarts: Number(restarts), state });
  }
  return states;
}

/** The supervisor's store parses, holds its identity, and lists no update lock it still holds. */
async function storeWhole(device: SweepDevice): Promise<Broken | undefined> {
  if (!device.files || !device.paths) return undefined;
  const path = `${device.paths.dataDir}/device.json`;
  let record: { uuid?: unknown; deviceKey?: unknown; generation?: unknown; supervisorLocks?: unknown[] };
  try {
    record = JSON.parse((await device.files.read(path)).toString('utf8')) as typeof record;
  } catch (err) {
    return { invariant: 'supervisor-store', detail: `${path} is not readable JSON: ${errorText(err)}` };
  }
  const missing = (['uuid', 'deviceKey', 'generation'] as const).filter((k) => record[k] === undefined);
  if (missing.length) return { invariant: 'supervisor-store', detail: `${path} lacks ${missing.join(', ')}` };
  if (record.supervisorLocks?.length) return { invariant: 'supervisor-store', detail: `the supervisor still holds ${record.supervisorLocks.length} update lock(s) after the release runs` };
  return undefined;
}
