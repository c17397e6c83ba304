/**
 * A fleet of virtual devices in this process (`fleetlab sim fleet`, the `fleet` fixture, the
 * fleet bench): each the real supervisor's cloud logic over its own in-process simulated
 * engine (fleet-device.ts). Devices come up at a steady rate, as a fleet does, not in one
 * burst. Devices drawn for `partition` reach the cloud through one partitionable link, which
 * `partition()` cuts and `heal()` restores; `disk-full` and `pull-fails` are set on their
 * engines from the start; `clock-skew` sets the device's wall clock off (fault-plan.ts).
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { FleetlabError } from '../../src/errors.js';
import { createJournalAdapter } from '../../src/supervisor/adapters/journal.js';
import type { Logger } from '../../src/supervisor/state/state-engine.js';
import type { CatalogueEntry } from '../engine/registry.js';
import { startPartitionableLink, type PartitionableLink } from '../network/partitionable-link.js';
import { assignFaults, clockSkewOf, shardRange, type FaultKind, type FaultSpec } from './fault-plan.js';
import { devicesPerProcess, openFileLimit } from './fd-budget.js';
import { FleetDevice, type DevicePhase } from './fleet-device.js';
import { CloudLatency, type LatencySummary } from './latency.js';
import { groupUnsettled, type StuckDevice, type UnsettledGroup } from './unsettled.js';

export interface FleetOptions {
  /** Devices in the whole fleet (every shard together). */
  readonly devices: number;
  /** `i/n`: run only this shard's share of the devices. */
  readonly shard?: string;
  readonly cloudUrl: string;
  readonly provisioningKey: string;
  /** Created if missing; each device keeps its state under `devices/<index>`. */
  readonly dataDir: string;
  /** Remove `dataDir` on close (the CLI's default temporary directory). */
  readonly removeDataDir?: boolean;
  readonly faults?: readonly FaultSpec[];
  /** Cut the partitioned devices' link before they start (default: they start connected, and `partition()` cuts it). */
  readonly partitionFromStart?: boolean;
  /** Picks which devices get each fault; the same seed picks the same devices. */
  readonly seed?: number;
  readonly pollIntervalMs?: number;
  readonly reportIntervalMs?: number;
  readonly tunnelHeartbeatMs?: number;
  readonly deviceType?: string;
  /** Devices started per second (default: the fleet comes up over one poll interval, at least 50 a second). */
  readonly startRate?: number;
  readonly registry?: readonly CatalogueEntry[];
  readonly bandwidth?: number;
  /** The devices' own log lines (default: dropped; a fleet of them would drown a terminal). */
  readonly logger?: Logger;
  /** Called as each device comes up, with how many have. */
  readonly onStarted?: (started: number, of: number) => void;
}

export type FleetCounts = Record<DevicePhase, number> & {
  readonly total: number;
  /** Devices per release id of the target they hold ('none' before the first target). */
  readonly byRelease: Readonly<Record<string, number>>;
};


/**
 * A device reads its engine's state every report interval to find what changed; a board does
 * that every 2 s. Ten thousand devices doing it in one process would spend the process on it,
 * so a fleet device looks every 15 s: a change reaches the cloud within 15 s, not 2 s.
 */
export const DEFAULT_REPORT_INTERVAL_MS = 15_000;

const quiet: Logger = { info: () => undefined, warn: () => undefined, error: () => undefined };

export class Fleet {
  private closed = false;

  private constructor(
    readonly devices: readonly FleetDevice[],
    private readonly link: PartitionableLink | null,
    private readonly latencyWatch: CloudLatency,
    private readonly options: FleetOptions,
    /** The range of fleet indices this process runs. */
    readonly range: { readonly from: number; readonly to: number; readonly label: string },
  ) {}

  static async start(options: FleetOptions): Promise<Fleet> {
    if (!Number.isInteger(options.devices) || options.devices < 1) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--devices must be a whole number of at least 1, got ${options.devices}`);
    let cloud: URL;
    try {
      cloud = new URL(options.cloudUrl);
    } catch {
      throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--cloud ${JSON.stringify(options.cloudUrl)} is not a URL: give the cloud's base URL, e.g. http://127.0.0.1:48400`);
    }
    if (cloud.protocol !== 'http:') throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--cloud must be an http:// URL (the fleet's partition link forwards plain TCP), got ${options.cloudUrl}`);
    const range = shardRange(options.devices, options.shard);
    const faultsByIndex = assignFaults(options.devices, options.faults ?? [], options.seed ?? 1);
    const partitionedHere = [...faultsByIndex].filter(([i, kinds]) => i >= range.from && i < range.to && kinds.includes('partition')).length;
    const here = range.to - range.from;
    const limit = openFileLimit();
    const fits = limit === null ? here : devicesPerProcess(limit, partitionedHere / here);
    if (here > fits) {
      throw new FleetlabError(
        'SUP_ERR_BAD_REQUEST',
        `${here} devices in one process need more file descriptors than this process may open (${limit}, ulimit -n); at most ${fits} fit: run them in ${Math.ceil(here / fits)} processes (fleetlab sim fleet --workers ${Math.ceil(here / fits)}, or --shard), or raise ulimit -n`,
      );
    }
    mkdirSync(options.dataDir, { recursive: true });
    const needsLink = partitionedHere > 0;
    const link = needsLink ? await startPartitionableLink({ host: cloud.hostname, port: Number(cloud.port || 80) }) : null;
    if (options.partitionFromStart) link?.partition();
    const latency = new CloudLatency(new Set([cloud.origin, ...(link ? [new URL(link.url).origin] : [])]));
    const journal = createJournalAdapter({ directory: join(options.dataDir, 'journal') });
    const devices: FleetDevice[] = [];
    const fleet = new Fleet(devices, link, latency, options, range);
    const pollIntervalMs = options.pollIntervalMs ?? 60_000;
    // Spread over a poll interval, the devices' polls stay spread, as a fleet's do.
    const startRate = options.startRate ?? Math.max(50, Math.ceil((range.to - range.from) / (pollIntervalMs / 1000)));
    const startedAt = Date.now();
    try {
      for (let index = range.from; index < range.to; index++) {
        const faults = faultsByIndex.get(index) ?? [];
        devices.push(
          await FleetDevice.start({
            index,
            dataDir: join(options.dataDir, 'devices', String(index)),
            cloudUrl: faults.includes('partition') ? link!.url : options.cloudUrl,
            provisioningKey: options.provisioningKey,
            deviceType: options.deviceType ?? 'raspberrypi3',
            pollIntervalMs,
            reportIntervalMs: options.reportIntervalMs ?? DEFAULT_REPORT_INTERVAL_MS,
            tunnelHeartbeatMs: options.tunnelHeartbeatMs ?? 15_000,
            journal,
            faults,
            ...(faults.includes('clock-skew') ? { clockOffsetMs: clockSkewOf(index, options.seed ?? 1) } : {}),
            ...(options.registry ? { registry: options.registry } : {}),
            ...(options.bandwidth ? { bandwidth: options.bandwidth } : {}),
            logger: options.logger ?? quiet,
          }),
        );
        // Paced against the schedule, not by fixed pauses: a slow start must not slow the rate.
        options.onStarted?.(devices.length, range.to - range.from);
        const ahead = startedAt + (devices.length * 1000) / startRate - Date.now();
        // A rate limit (startRate devices a second), not a wait for anything: no deadline applies.
        if (ahead >= 20 && index + 1 < range.to) await new Promise((r) => setTimeout(r, ahead));
      }
    } catch (err) {
      await fleet.close();
      throw err;
    }
    return fleet;
  }

  counts(): FleetCounts {
    const phases: Record<DevicePhase, number> = { starting: 0, offline: 0, applying: 0, applied: 0, failed: 0, off: 0 };
    const byRelease: Record<string, number> = {};
    for (const d of this.devices) {
      const s = d.status();
      phases[s.phase] += 1;
      const key = s.releaseId === null ? 'none' : String(s.releaseId);
      byRelease[key] = (byRelease[key] ?? 0) + 1;
    }
    return { ...phases, total: this.devices.length, byRelease };
  }

  /** How many of `devices` (default: all) have applied `releaseId`. */
  appliedOn(releaseId: number, devices: readonly FleetDevice[] = this.devices): number {
    return devices.filter((d) => {
      const s = d.status();
      return s.phase === 'applied' && s.releaseId === releaseId;
    }).length;
  }

  /** Devices that have not applied `releaseId` (or are not applied at all), with why. */
  private *unsettledDevices(releaseId: number | null): Generator<StuckDevice> {
    for (const d of this.devices) {
      const s = d.status();
      if (s.phase === 'applied' && (releaseId === null || s.releaseId === releaseId)) continue;
      const reason = s.phase === 'applied' ? `holds release ${s.releaseId ?? 'none'}${s.reason ? `; ${s.reason}` : ''}` : (s.reason ?? s.phase);
      yield { index: d.index, uuid: d.uuid, phase: s.phase, releaseId: s.releaseId, faults: d.faults, reason };
    }
  }

  /** The first `limit` devices that have not applied `releaseId`, with why. */
  stuck(releaseId: number | null, limit = 20): StuckDevice[] {
    const out: StuckDevice[] = [];
    if (limit <= 0) return out;
    for (const s of this.unsettledDevices(releaseId)) {
      out.push(s);
      if (out.length >= limit) break;
    }
    return out;
  }

  /** Every device that has not applied `releaseId`, grouped by why (unsettled.ts). */
  unsettled(releaseId: number | null): UnsettledGroup[] {
    return groupUnsettled(this.unsettledDevices(releaseId), this.range.label);
  }

  /** Target-state polls and reports since the last reset. */
  latency(): { targetState: LatencySummary; report: LatencySummary } {
    return { targetState: this.latencyWatch.summary('target-state'), report: this.latencyWatch.summary('report') };
  }

  /** The round-trip times behind `latency()`, to merge with other processes' (fleet-workers.ts). */
  latencySamples(): { targetState: readonly number[]; report: readonly number[] } {
    return { targetState: this.latencyWatch.raw('target-state'), report: this.latencyWatch.raw('report') };
  }

  resetLatency(): void {
    this.latencyWatch.reset();
  }

  get partitioned(): boolean {
    return this.link?.partitioned ?? false;
  }

  /** Cuts the link of the devices drawn for `partition` from the cloud. */
  partition(): void {
    this.link?.partition();
  }

  /** Restores the partitioned devices' link to the cloud. */
  heal(): void {
    this.link?.heal();
  }

  /** Stops every device and its engine, and the link; removes the data dir if asked. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // All at once: a device's engine gives its containers their stop timeout, as dockerd does.
    // Those timers do not hold the process open (an engine's socket would): this one does.
    const keepAlive = setInterval(() => undefined, 1000);
    try {
      await Promise.all(this.devices.map((d) => d.close().catch(() => undefined)));
    } finally {
      clearInterval(keepAlive);
    }
    this.latencyWatch.close();
    await this.link?.close();
    if (this.options.removeDataDir) rmSync(this.options.dataDir, { recursive: true, force: true });
  }
}
