/**
 * A fleet run in several worker processes, driven as one (`fleetlab sim fleet --workers N`,
 * the fleet bench). One process holds only so many devices (fd-budget.ts: ten thousand need
 * more descriptors than a default limit gives) and uses one core. Each worker runs a sub-shard
 * of this process's shard: worker w of W in shard i/n runs shard (i-1)·W+w of n·W, which
 * covers the same indices, so the seeded faults fall on the same devices as in one process.
 * A worker whose parent dies (kill -9) stops its devices and exits.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { getHeapStatistics } from 'node:v8';
import { FleetlabError } from '../../src/errors.js';
import { simWorker } from '../entry.js';
import { shardRange } from './fault-plan.js';
import { heapLimitFlags } from './heap-budget.js';
import { Fleet, type FleetCounts, type FleetOptions } from './fleet.js';
import type { StuckDevice } from './unsettled.js';
import { summarize, type LatencySummary } from './latency.js';
import { HealthWatch, type ProcessHealth } from './process-health.js';
import { mergeUnsettled, type UnsettledGroup } from './unsettled.js';

/** What drives a fleet, in this process or in workers; every answer may cross a process. */
export interface FleetControl {
  /** The fleet indices run here (every worker's together). */
  readonly range: { readonly from: number; readonly to: number; readonly label: string };
  /** Devices per fault kind. */
  faultCounts(): Promise<Record<string, number>>;
  counts(): Promise<FleetCounts>;
  appliedOn(releaseId: number): Promise<number>;
  stuck(releaseId: number | null, limit: number): Promise<StuckDevice[]>;
  /** Every device not settled on `releaseId`, grouped by why, across every process. */
  unsettled(releaseId: number | null): Promise<UnsettledGroup[]>;
  /** Each process's CPU and event-loop delay since the last call (process-health.ts). */
  health(): Promise<ProcessHealth[]>;
  latency(): Promise<{ targetState: LatencySummary; report: LatencySummary }>;
  resetLatency(): Promise<void>;
  /** Resident bytes now and at their peak, and heap bytes, of the processes that run the devices, summed. */
  memory(): Promise<FleetMemory & { processes: number }>;
  partition(): Promise<void>;
  heal(): Promise<void>;
  close(): Promise<void>;
}

/** What a worker is started with: the fleet's options without the callbacks. */
export type WorkerFleetOptions = Omit<FleetOptions, 'logger' | 'onStarted'>;

export type WorkerRequest =
  | { id: number; op: 'start'; options: WorkerFleetOptions }
  | { id: number; op: 'faultCounts' | 'counts' | 'latencySamples' | 'resetLatency' | 'memory' | 'health' | 'partition' | 'heal' | 'close' }
  | { id: number; op: 'appliedOn'; releaseId: number }
  | { id: number; op: 'stuck'; releaseId: number | null; limit: number }
  | { id: number; op: 'unsettled'; releaseId: number | null };

export type WorkerMessage = { id: number; result?: unknown; error?: { code: string; message: string } } | { event: 'started'; started: number; of: number };

/** The fleet in this process, behind the same interface. */
export function inProcess(fleet: Fleet): FleetControl {
  const watch = new HealthWatch(fleet.range.label);
  return {
    range: fleet.range,
    faultCounts: async () => faultCountsOf(fleet),
    counts: async () => fleet.counts(),
    appliedOn: async (releaseId) => fleet.appliedOn(releaseId),
    stuck: async (releaseId, limit) => fleet.stuck(releaseId, limit),
    unsettled: async (releaseId) => fleet.unsettled(releaseId),
    health: async () => [watch.sample()],
    latency: async () => fleet.latency(),
    resetLatency: async () => fleet.resetLatency(),
    memory: async () => ({ ...memoryOf(), processes: 1 }),
    partition: async () => fleet.partition(),
    heal: async () => fleet.heal(),
    close: () => {
      watch.close();
      return fleet.close();
    },
  };
}

export interface FleetMemory {
  readonly rss: number;
  /** The kernel's high-water mark of the resident set since the process started. */
  readonly peakRss: number;
  readonly heapUsed: number;
  /** The most the V8 heap may grow to (heap-budget.ts sets it for workers). */
  readonly heapLimit: number;
}

export function memoryOf(): FleetMemory {
  const { rss, heapUsed } = process.memoryUsage();
  return { rss, peakRss: process.resourceUsage().maxRSS * 1024, heapUsed, heapLimit: getHeapStatistics().heap_size_limit };
}

export function faultCountsOf(fleet: Fleet): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const d of fleet.devices) for (const f of d.faults) counts[f] = (counts[f] ?? 0) + 1;
  return counts;
}

/** Starts the fleet in this process (`workers` 1) or in `workers` child processes. */
export async function startFleetControl(options: FleetOptions, workers: number): Promise<FleetControl> {
  if (!Number.isInteger(workers) || workers < 1) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--workers must be a whole number of at least 1, got ${workers}`);
  if (workers === 1) return inProcess(await Fleet.start(options));
  const range = shardRange(options.devices, options.shard);
  const [i, n] = range.label.split('/').map(Number) as [number, number];
  if (workers > range.to - range.from) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--workers ${workers} is more than the ${range.to - range.from} devices to run: give at most one worker per device`);
  // The parent removes the data directory the workers share, once every one has stopped;
  // a start rate is the whole process's, shared out.
  const { logger: _logger, onStarted, removeDataDir, startRate, ...plain } = options;
  const perWorker = { ...plain, ...(startRate ? { startRate: startRate / workers } : {}) };
  const started = new Array<number>(workers).fill(0);
  const perWorkerDevices = Math.ceil((range.to - range.from) / workers);
  const children = Array.from({ length: workers }, (_, w) =>
    new WorkerHandle(perWorkerDevices, (count) => {
      started[w] = count;
      onStarted?.(started.reduce((a, b) => a + b, 0), range.to - range.from);
    }),
  );
  try {
    await Promise.all(children.map((c, w) => c.call({ op: 'start', options: { ...perWorker, shard: `${(i - 1) * workers + w + 1}/${n * workers}` } })));
  } catch (err) {
    await closeAll();
    throw err;
  }
  async function closeAll(): Promise<void> {
    await Promise.all(children.map((c) => c.close()));
    if (removeDataDir) rmSync(options.dataDir, { recursive: true, force: true });
  }
  const all = <T>(op: WorkerRequest['op'], extra: object = {}) => Promise.all(children.map((c) => c.call({ op, ...extra } as never) as Promise<T>));
  return {
    range,
    async faultCounts() {
      const out: Record<string, number> = {};
      for (const part of await all<Record<string, number>>('faultCounts')) for (const [k, v] of Object.entries(part)) out[k] = (out[k] ?? 0) + v;
      return out;
    },
    async counts() {
      return mergeCounts(await all<FleetCounts>('counts'));
    },
    async appliedOn(releaseId) {
      return (await all<number>('appliedOn', { releaseId })).reduce((a, b) => a + b, 0);
    },
    async stuck(releaseId, limit) {
      return (await all<StuckDevice[]>('stuck', { releaseId, limit })).flat().slice(0, limit);
    },
    async unsettled(releaseId) {
      return mergeUnsettled(await all<UnsettledGroup[]>('unsettled', { releaseId }));
    },
    health: () => all<ProcessHealth>('health'),
    async latency() {
      const parts = await all<{ targetState: number[]; report: number[] }>('latencySamples');
      return { targetState: summarize(parts.flatMap((p) => p.targetState)), report: summarize(parts.flatMap((p) => p.report)) };
    },
    resetLatency: async () => void (await all('resetLatency')),
    async memory() {
      const parts = await all<FleetMemory>('memory');
      const sum = (key: keyof FleetMemory) => parts.reduce((a, p) => a + p[key], 0);
      return { rss: sum('rss'), peakRss: sum('peakRss'), heapUsed: sum('heapUsed'), heapLimit: sum('heapLimit'), processes: parts.length };
    },
    partition: async () => void (await all('partition')),
    heal: async () => void (await all('heal')),
    close: closeAll,
  };
}

export function mergeCounts(parts: readonly FleetCounts[]): FleetCounts {
  const sum = { starting: 0, offline: 0, applying: 0, applied: 0, failed: 0, off: 0, total: 0 };
  const byRelease: Record<string, number> = {};
  for (const p of parts) {
    for (const k of Object.keys(sum) as Array<keyof typeof sum>) sum[k] += p[k];
    for (const [r, v] of Object.entries(p.byRelease)) byRelease[r] = (byRelease[r] ?? 0) + v;
  }
  return { ...sum, byRelease };
}

/** A request before it gets its id (Omit over each member of the union). */
type Unnumbered<T> = T extends unknown ? Omit<T, 'id'> : never;

type Pending = { resolve: (v: unknown) => void; reject: (e: Error) => void };

/** One worker process and its request/answer channel. */
class WorkerHandle {
  private readonly child: ChildProcess;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private readonly exited: Promise<void>;

  constructor(devices: number, onStarted: (started: number) => void) {
    const { module, execArgv } = simWorker('fleet/fleet-worker');
    this.child = fork(module, [], { execArgv: [...execArgv, ...heapLimitFlags(devices)], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code, signal) => {
        for (const p of this.pending.values()) p.reject(new FleetlabError('SUP_ERR_INTERNAL', `a fleet worker exited (${signal ?? `code ${code}`}) before it answered`));
        this.pending.clear();
        resolve();
      }),
    );
    this.child.on('message', (m: WorkerMessage) => {
      if ('event' in m) return onStarted(m.started);
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.error) p.reject(new FleetlabError(m.error.code as never, m.error.message));
      else p.resolve(m.result);
    });
  }

  call(request: Unnumbered<WorkerRequest>): Promise<unknown> {
    if (this.child.exitCode !== null || this.child.signalCode !== null || !this.child.connected) return Promise.reject(new FleetlabError('SUP_ERR_INTERNAL', 'a fleet worker is not running'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      // With a callback a failed send is this call's error, not an 'error' event on the child,
      // which nothing handles: a request racing close() (a Ctrl-C while the bench polls) ended
      // the whole process before its teardown stopped PostgreSQL.
      this.child.send({ id, ...request }, (err) => {
        if (!err || !this.pending.has(id)) return;
        this.pending.delete(id);
        reject(new FleetlabError('SUP_ERR_INTERNAL', `a fleet worker could not be asked (${request.op}): ${err.message}`));
      });
    });
  }

  /** Asks the worker to stop its devices; a worker that does not go within a minute is killed. */
  async close(): Promise<void> {
    await this.call({ op: 'close' }).catch(() => undefined);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 60_000);
    if (this.child.connected) this.child.disconnect();
    await this.exited;
    clearTimeout(timer);
  }
}
