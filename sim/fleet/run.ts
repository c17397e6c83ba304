/**
 * `fleetlab sim fleet`: starts the fleet, prints a live line (devices per phase, per release,
 * the cloud's target-state p99 over the last interval) until Ctrl-C, then stops every device
 * and prints a summary. The default data directory is temporary and owned: a run killed
 * with -9 leaves it, and the next run removes it.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { reapStale, ownerRecord, writeOwner } from '../../src/owned-dirs.js';
import { untilStopped } from '../../src/stop-signals.js';
import { shardRange, type FaultSpec } from './fault-plan.js';
import { processesFor } from './fd-budget.js';
import type { FleetCounts } from './fleet.js';
import { startFleetControl } from './fleet-workers.js';
import { describeHealth } from './process-health.js';
import { provisioningKeyFor } from './provisioning.js';
import { describeUnsettled } from './unsettled.js';

export interface RunFleetOptions {
  devices: number;
  cloud: string;
  /** The fleet's provisioning key, or a fleet and a key that may make one. */
  provisioningKey?: string;
  fleet?: string;
  apiKey?: string;
  shard?: string;
  faults: FaultSpec[];
  seed: number;
  pollIntervalMs: number;
  startRate?: number;
  dataDir?: string;
  /** Seconds after the start when partitioned devices lose their link (default: 0, from the start). */
  partitionAfterS?: number;
  /** Seconds after the start when partitioned devices get their link back (default: never). */
  healAfterS?: number;
  /** Seconds between live lines. */
  everyS: number;
  /** Processes to run the devices in (default: as many as this process's file descriptor limit needs). */
  workers?: number;
}

const DIR_PREFIX = 'fleetlab-fleet-';

export function describeCounts(c: FleetCounts): string {
  const releases = Object.entries(c.byRelease)
    .filter(([release]) => release !== 'none')
    .map(([release, n]) => `release ${release}: ${n}`);
  const phases = (['applied', 'applying', 'failed', 'offline', 'starting', 'off'] as const).filter((p) => c[p] > 0).map((p) => `${p} ${c[p]}`);
  return [`${c.total} devices`, ...phases, ...releases].join(' · ');
}

export async function runFleet(opts: RunFleetOptions): Promise<void> {
  const say = (line: string) => process.stderr.write(`fleetlab sim fleet: ${line}\n`);
  let provisioningKey = opts.provisioningKey;
  if (!provisioningKey) {
    const made = await provisioningKeyFor({ cloud: opts.cloud, apiKey: opts.apiKey!, fleet: opts.fleet! });
    provisioningKey = made.provisioningKey;
    say(`fleet ${made.fleetName} (id ${made.fleetId}): made a provisioning key for the devices`);
  }
  let dataDir = opts.dataDir;
  if (!dataDir) {
    for (const dir of await reapStale(tmpdir(), DIR_PREFIX)) say(`removed ${dir}, left by a fleet run that was killed`);
    dataDir = mkdtempSync(join(tmpdir(), DIR_PREFIX));
    writeOwner(dataDir, ownerRecord());
  }
  const started = Date.now();
  let lastStartLine = 0;
  const range = shardRange(opts.devices, opts.shard);
  const partitionedShare = opts.faults.filter((f) => f.kind === 'partition').reduce((s, f) => s + f.percent / 100, 0);
  const workers = opts.workers ?? processesFor(range.to - range.from, partitionedShare);
  if (workers > 1) say(`running the devices in ${workers} worker processes`);
  const fleet = await startFleetControl({
    devices: opts.devices,
    ...(opts.shard ? { shard: opts.shard } : {}),
    cloudUrl: opts.cloud,
    provisioningKey,
    dataDir,
    removeDataDir: !opts.dataDir,
    faults: opts.faults,
    partitionFromStart: !opts.partitionAfterS,
    seed: opts.seed,
    pollIntervalMs: opts.pollIntervalMs,
    ...(opts.startRate ? { startRate: opts.startRate } : {}),
    onStarted: (n, of) => {
      if (n === of || Date.now() - lastStartLine >= opts.everyS * 1000) {
        lastStartLine = Date.now();
        say(`started ${n} of ${of} devices`);
      }
    },
  }, workers);
  say(`shard ${fleet.range.label}: devices ${fleet.range.from}..${fleet.range.to - 1} of ${opts.devices}, data in ${dataDir}; stop with Ctrl-C`);
  const faulted = Object.entries(await fleet.faultCounts());
  if (faulted.length) say(`faults (seed ${opts.seed}): ${faulted.map(([k, n]) => `${k} ${n}`).join(', ')}${faulted.some(([k]) => k === 'partition') && !opts.partitionAfterS ? ' (partitioned from the start)' : ''}`);

  const afterStart = (s: number) => Math.max(0, s * 1000 - (Date.now() - started));
  const later = (what: () => Promise<void>, line: string) => () => void what().then(() => say(line), (err) => say(`${line}: failed: ${String(err)}`));
  const cut = opts.partitionAfterS ? setTimeout(later(fleet.partition, 'partition: the partitioned devices lost their link to the cloud'), afterStart(opts.partitionAfterS)) : undefined;
  const heal = opts.healAfterS === undefined ? undefined : setTimeout(later(fleet.heal, 'partition healed'), afterStart(opts.healAfterS));
  const liveLine = async () => {
    const { targetState } = await fleet.latency();
    await fleet.resetLatency();
    const p99 = targetState.count ? ` · target-state ${targetState.count} polls, p99 ${targetState.p99Ms.toFixed(1)} ms` : '';
    const mem = await fleet.memory();
    const memory = ` · rss ${(mem.rss / 1e6).toFixed(0)} MB, heap ${(mem.heapUsed / 1e6).toFixed(0)} MB${mem.processes > 1 ? ` (${mem.processes} workers)` : ''}`;
    say(`${describeCounts(await fleet.counts())}${p99}${memory} · ${describeHealth(await fleet.health())}`);
  };
  const live = setInterval(() => void liveLine().catch((err) => say(`live line: ${String(err)}`)), opts.everyS * 1000);
  const { done } = untilStopped(
    async () => {
      clearInterval(live);
      clearTimeout(cut);
      clearTimeout(heal);
      say(`stopping: ${describeCounts(await fleet.counts())}`);
      for (const line of describeUnsettled(await fleet.unsettled(null), 5)) say(line);
      await fleet.close();
      say('stopped every device');
    },
    { onSignal: () => say('stopping the devices (again to force)') },
  );
  await done;
}
