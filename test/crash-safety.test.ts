/**
 * Crash safety of updates (issue 16): a seeded loop that `kill -9`s the supervisor process at
 * random points of an update (a release change, a service added or removed, a volume added or
 * removed, an environment change; on the simulated engine also while a fault scenario runs:
 * slow downloads, a download that fails half way, a container that crashes at start), and at
 * random points of its store writes, then starts it again on the same data. After each point:
 * the device converges on the target within 30 s of the restart, the data volume still holds
 * every marker written so far, no lock file of the supervisor's is left, and a lock the app
 * took during the update was never ignored.
 *
 * FLEETLAB_CRASH_POINTS (default 50; split 4:1 between dockerd and the simulated engine) and
 * FLEETLAB_CRASH_SEED (default: random, printed) rerun a failure or run more points.
 */
import { closeSync, existsSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { WireLocalState } from '../src/protocol/target-state.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { LOCK_FILE } from '../src/supervisor/state/locks.js';
import { startSupervisorProcess, type SupervisorProcess } from './helpers/supervisor-process.js';
import { seededRandom } from '../src/seeded-random.js';

const POINTS = Math.max(2, Number(process.env.FLEETLAB_CRASH_POINTS ?? 50));
const SEED = Number(process.env.FLEETLAB_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const CONVERGE_MS = 30_000;
const LOG_LINES_ON_FAILURE = 30;
const APP = 1;

interface Shape {
  release: number;
  extra: boolean;
  cache: boolean;
  round: number;
}

type Change = 'release' | 'service' | 'volume' | 'env';
const CHANGES: Change[] = ['release', 'service', 'volume', 'env'];

function changed(shape: Shape, change: Change): Shape {
  switch (change) {
    case 'release': return { ...shape, release: shape.release + 1 };
    case 'service': return { ...shape, extra: !shape.extra, release: shape.release + 1 };
    case 'volume': return { ...shape, cache: !shape.cache };
    case 'env': return { ...shape, round: shape.round + 1 };
  }
}

/** `main` alternates its image with the release, so on the simulated engine a release change downloads. */
const mainImage = (s: Shape) => `fleetlab/test-app:${(s.release % 2) + 1}`;

function targetOf(s: Shape): WireLocalState {
  const services: NonNullable<WireLocalState['apps']>[string]['services'] = {
    '11': {
      serviceName: 'main', serviceId: 11, imageId: 100 + (s.release % 2), image: mainImage(s),
      environment: { ROUND: String(s.round) }, labels: {}, volumes: ['data:/data', ...(s.cache ? ['cache:/cache'] : [])],
    },
    '12': { serviceName: 'worker', serviceId: 12, imageId: 102, image: 'fleetlab/test-app:1', environment: {}, labels: {} },
  };
  if (s.extra) services['13'] = { serviceName: 'extra', serviceId: 13, imageId: 103, image: 'fleetlab/test-app:1', environment: {}, labels: {} };
  return {
    name: 'crash-safety',
    config: { SUPERVISOR_LOCAL_MODE: '1' },
    apps: {
      [String(APP)]: {
        name: 'crashapp', commit: `commit${s.release}`, releaseId: String(s.release), services,
        volumes: { data: {}, ...(s.cache ? { cache: {} } : {}) }, networks: {},
      },
    },
  };
}

async function post(sup: SupervisorProcess, state: WireLocalState): Promise<void> {
  const res = await fetch(`${sup.url}/v2/local/target-state`, {
    method: 'POST', headers: { authorization: `Bearer ${sup.key}`, 'content-type': 'application/json' }, body: JSON.stringify({ local: state }),
  });
  if (res.status !== 200) throw new Error(`target refused: ${res.status} ${await res.text()}`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Engine {
  containers(): Promise<Array<{ id: string; service: string; release: string; running: boolean; env: string[] }>>;
  volumeDir(volume: string): Promise<string | undefined>;
}

function engineOf(sup: SupervisorProcess): Engine {
  const filters = () => ({ label: [`${LABEL.device}=${sup.uuid()}`] });
  return {
    async containers() {
      const list = await sup.docker.listContainers({ all: true, filters: filters() });
      return Promise.all(list.map(async (c) => ({
        id: c.Id,
        service: c.Labels[LABEL.serviceName] ?? '',
        release: c.Labels[LABEL.releaseId] ?? '',
        running: c.State === 'running',
        env: (await sup.docker.getContainer(c.Id).inspect().catch(() => undefined))?.Config.Env ?? [],
      })));
    },
    async volumeDir(volume) {
      const list = await sup.docker.listVolumes({ filters: { label: [`${LABEL.device}=${sup.uuid()}`, `${LABEL.volume}=${volume}`] } });
      return list.Volumes?.[0]?.Mountpoint;
    },
  };
}

/** What is wrong with the device against the target shape now; empty once it has converged. */
async function divergence(sup: SupervisorProcess, engine: Engine, s: Shape): Promise<string[]> {
  const problems: string[] = [];
  const status = await fetch(`${sup.url}/v2/state/status`, { headers: { authorization: `Bearer ${sup.key}` } }).then((r) => r.json() as Promise<{ appState: string }>);
  if (status.appState !== 'applied') problems.push(`appState ${status.appState}`);
  const want = ['main', 'worker', ...(s.extra ? ['extra'] : [])].sort();
  const containers = await engine.containers();
  const names = containers.map((c) => c.service).sort();
  if (JSON.stringify(names) !== JSON.stringify(want)) problems.push(`containers ${names.join(',')} (want ${want.join(',')})`);
  for (const c of containers) {
    if (!c.running) problems.push(`${c.service} not running`);
    if (c.release !== String(s.release)) problems.push(`${c.service} on release ${c.release}`);
    if (c.service === 'main' && !c.env.includes(`ROUND=${s.round}`)) problems.push(`main without ROUND=${s.round}`);
  }
  if (s.cache && !(await engine.volumeDir('cache'))) problems.push('volume cache missing');
  return problems;
}

async function converge(sup: SupervisorProcess, engine: Engine, s: Shape, logMark = 0): Promise<number> {
  const started = Date.now();
  let last: string[] = [];
  while (Date.now() - started < CONVERGE_MS) {
    last = await divergence(sup, engine, s);
    if (last.length === 0) return Date.now() - started;
    await sleep(100);
  }
  // The log goes with its directory when the run ends, and CI keeps only this message: carry it.
  const log = readFileSync(sup.logPath, 'utf8').slice(logMark).split('\n').filter(Boolean).slice(-LOG_LINES_ON_FAILURE);
  throw new Error(`not converged within ${CONVERGE_MS} ms of the restart (seed ${SEED}): ${last.join('; ')}\nthe supervisor's log since the restart (last ${log.length} lines):\n${log.join('\n')}`);
}

/** Lock files under the lock root that carry the supervisor's mark (left behind if any). */
function supervisorLockFiles(lockRoot: string): string[] {
  if (!existsSync(lockRoot)) return [];
  const found: string[] = [];
  for (const app of readdirSync(lockRoot)) {
    for (const service of readdirSync(join(lockRoot, app))) {
      const file = join(lockRoot, app, service, LOCK_FILE);
      if (existsSync(file) && readFileSync(file, 'utf8').includes('fleetlab-supervisor')) found.push(file);
    }
  }
  return found;
}

/** The app takes its lock as an app does: O_EXCL, empty. False when the file exists (the supervisor has it). */
function appTakesLock(lockRoot: string): boolean {
  const file = join(lockRoot, String(APP), 'worker', LOCK_FILE);
  try {
    closeSync(openSync(file, 'wx'));
    return true;
  } catch {
    return false;
  }
}

interface Figures {
  points: number;
  storeWritePoints: number;
  lockedPoints: number;
  convergeMs: number[];
  windowMs: number;
}

interface PointOptions {
  /** Run before each point (and the calibration): faults to inject, images to drop. */
  faults?: (random: () => number) => Promise<void>;
  /** The least window to draw kill points from (a download the calibration may not have seen). */
  minWindowMs?: number;
}

async function runPoints(sup: SupervisorProcess, count: number, random: () => number, label: string, options: PointOptions = {}): Promise<Figures> {
  const { faults, minWindowMs = 500 } = options;
  const engine = engineOf(sup);
  let shape: Shape = { release: 1, extra: false, cache: false, round: 0 };
  await post(sup, targetOf(shape));
  await converge(sup, engine, shape);
  // How long an uninterrupted release change takes here (faults and downloads included) sets
  // the window kill points are drawn from.
  await faults?.(seededRandom(SEED ^ 0x5eed));
  shape = changed(shape, 'release');
  const updateStart = Date.now();
  await post(sup, targetOf(shape));
  await converge(sup, engine, shape);
  const windowMs = Math.max(minWindowMs, Math.min(8000, 1.2 * (Date.now() - updateStart)));
  const dataDir = await engine.volumeDir('data');
  expect(dataDir, 'the data volume has a mount point').toBeTruthy();
  const figures: Figures = { points: 0, storeWritePoints: 0, lockedPoints: 0, convergeMs: [], windowMs };

  for (let i = 0; i < count; i++) {
    const where = `${label} point ${i} (seed ${SEED})`;
    writeFileSync(join(dataDir!, `marker-${i}`), String(i));
    const change = CHANGES[Math.floor(random() * CHANGES.length)]!;
    const next = changed(shape, change);
    await faults?.(random);
    // A quarter of the points: the app tries to take the worker's lock at a random instant of the update.
    const lockAt = random() < 0.25 ? random() * windowMs : undefined;
    let appLock: { heldFrom: number; workerId: string | undefined } | undefined;
    const lockTry = lockAt === undefined ? Promise.resolve() : sleep(lockAt).then(async () => {
      if (!appTakesLock(sup.lockRoot)) return;
      const worker = (await engine.containers()).find((c) => c.service === 'worker' && c.running);
      appLock = { heldFrom: Date.now(), workerId: worker?.id };
    });
    const byStoreWrite = random() < 0.4;
    const killAfter = byStoreWrite ? sup.storeWrites(1 + Math.floor(random() * 3), windowMs) : sleep(random() * windowMs);
    await post(sup, targetOf(next));
    await killAfter;
    await sup.kill9();
    await lockTry;
    figures.points += 1;
    if (byStoreWrite) figures.storeWritePoints += 1;
    shape = next;

    const logMark = sup.logSize();
    await sup.restart();
    if (appLock) {
      figures.lockedPoints += 1;
      const held = appLock;
      // The app holds the lock: whatever the supervisor does now, it must not replace the
      // worker it guards. Give it time to try (it logs once that updates are locked), or to
      // finish if the update needs nothing more of the worker.
      const deadline = Date.now() + CONVERGE_MS;
      while (Date.now() < deadline) {
        const log = readFileSync(sup.logPath, 'utf8').slice(logMark);
        if (/Updates are locked/.test(log) || (await divergence(sup, engine, shape)).length === 0) break;
        await sleep(100);
      }
      const lockFile = join(sup.lockRoot, String(APP), 'worker', LOCK_FILE);
      expect(existsSync(lockFile) && readFileSync(lockFile, 'utf8'), `${where}: the app's lock file is still the app's`).toBe('');
      if (held.workerId) {
        const worker = (await engine.containers()).find((c) => c.id === held.workerId);
        expect(worker?.running, `${where}: the worker the app's lock guards was stopped or replaced`).toBe(true);
      }
      rmSync(lockFile);
    }
    const ms = await converge(sup, engine, shape, logMark);
    figures.convergeMs.push(ms);
    expect(supervisorLockFiles(sup.lockRoot), `${where}: no lock of the supervisor's is left`).toEqual([]);
    for (let m = 0; m <= i; m++) {
      expect(existsSync(join(dataDir!, `marker-${m}`)) && readFileSync(join(dataDir!, `marker-${m}`), 'utf8'), `${where}: marker ${m} in the data volume`).toBe(String(m));
    }
  }
  return figures;
}

function summary(label: string, f: Figures): string {
  const sorted = [...f.convergeMs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  return `crash-safety ${label}: seed ${SEED}, ${f.points} kill -9 points (${f.storeWritePoints} at store writes, ${f.lockedPoints} with the app holding a lock) drawn from a ${Math.round(f.windowMs)} ms update window, all converged; after restart p50 ${at(0.5)} ms, max ${at(1)} ms`;
}

const random = seededRandom(SEED);
const simPoints = Math.max(1, Math.round(POINTS / 5));
const dockerdPoints = POINTS - simPoints;

/** Runs `fn` on a supervisor process that is closed afterwards, whether `fn` passed or not. */
async function withSupervisor(options: Parameters<typeof startSupervisorProcess>[0], fn: (sup: SupervisorProcess) => Promise<void>): Promise<void> {
  const sup = await startSupervisorProcess(options);
  try {
    await fn(sup);
  } finally {
    await sup.close();
  }
}

describe(`kill -9 at random points of updates (seed ${SEED})`, () => {
  beforeAll(() => {
    console.log(`crash-safety: seed ${SEED}, ${POINTS} points (FLEETLAB_CRASH_SEED=${SEED} reruns them)`);
  });

  it(`on dockerd: ${dockerdPoints} points`, () => withSupervisor({ engine: 'dockerd' }, async (sup) => {
    const figures = await runPoints(sup, dockerdPoints, random, 'dockerd');
    console.log(summary('dockerd', figures));
  }), dockerdPoints * 45_000 + 60_000);

  it(`on the simulated engine while faults run: ${simPoints} points`, () => withSupervisor({ engine: 'sim', bandwidth: 1_000_000 }, async (sup) => {
    const sim = sup.simEngine!;
    const docker = sup.docker;
    const faults = async (r: () => number) => {
      sim.clearFaults();
      // The image main does not use now goes, so the next release change downloads it again.
      for (const image of await docker.listImages()) {
        await docker.getImage(image.Id).remove().catch(() => undefined); // in use: refused, stays
      }
      const pick = r();
      if (pick < 0.4) sim.addPullFault({ image: 'fleetlab/test-app:2', failAfterBytes: 500_000, times: 1, message: 'simulated: connection reset by peer' });
      else if (pick < 0.7) sim.addPullFault({ image: 'fleetlab/test-app:1', failAfterBytes: 300_000, times: 1, message: 'simulated: connection reset by peer' });
      else sim.addContainerFault({ match: { label: `${LABEL.serviceName}=main` }, exitCode: 3, afterMs: 100, times: 1 });
    };
    // A download of the other test image (about 2 MB at 1 MB/s) takes about 2 s.
    const figures = await runPoints(sup, simPoints, random, 'sim engine', { faults, minWindowMs: 3000 });
    console.log(summary('sim engine', figures));
  }), simPoints * 60_000 + 60_000);
});
