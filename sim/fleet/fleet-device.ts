/**
 * One virtual device of a fleet: the real Supervisor (cloud link, state engine, store, locks)
 * over its own simulated engine, which serves it in-process (no socket), with its host held
 * in memory and the fleet's one journal. Its device API is built only if the cloud's proxy
 * calls it through the tunnel. A reboot closes the supervisor, restarts the engine (containers
 * die and come back by restart policy) and starts a new supervisor on the same data.
 */
import { join } from 'node:path';
import { loadConfig } from '../../src/supervisor/config.js';
import type { JournalPort } from '../../src/supervisor/adapters/ports.js';
import { Supervisor } from '../../src/supervisor/supervisor.js';
import type { Logger } from '../../src/supervisor/state/state-engine.js';
import { startSimEngine, type SimEngineHandle } from '../engine/index.js';
import type { EngineHistory } from '../engine/model.js';
import type { CatalogueEntry } from '../engine/registry.js';
import type { FaultKind } from './fault-plan.js';
import { MemoryHost } from './memory-host.js';

/**
 * What each device's engine keeps in memory. dockerd's thousand events (half a kilobyte of
 * JSON each, a container's labels included; ten for a container's pull-to-removal) would grow
 * every device by 5-10 KB a rollout until each held over half a megabyte: ten thousand
 * devices, gigabytes. The supervisor reads events as they come and never asks for the past;
 * `docker logs` through the proxy still sees a container's last 200 lines.
 */
export const FLEET_ENGINE_HISTORY: EngineHistory = { events: 50, logLines: 200 };

export type DevicePhase = 'starting' | 'offline' | 'applying' | 'applied' | 'failed' | 'off';

export interface DeviceStatus {
  readonly phase: DevicePhase;
  /** The release of the target the device holds (null: none yet). */
  readonly releaseId: number | null;
  /** Why it is offline or failed, in one line. */
  readonly reason?: string;
}

export interface FleetDeviceOptions {
  readonly index: number;
  readonly dataDir: string;
  readonly cloudUrl: string;
  readonly provisioningKey: string;
  readonly deviceType: string;
  readonly pollIntervalMs: number;
  readonly reportIntervalMs: number;
  readonly tunnelHeartbeatMs: number;
  readonly journal: JournalPort;
  readonly faults: readonly FaultKind[];
  /** How far the device's wall clock is off (its supervisor's and its engine's); default 0. */
  readonly clockOffsetMs?: number;
  readonly registry?: readonly CatalogueEntry[];
  /** Bytes/s of this device's own uplink to the registry. */
  readonly bandwidth?: number;
  readonly logger: Logger;
}

/**
 * The device's own address on its (simulated) LAN, from its index: 10.x.y.z and a locally
 * administered MAC, so the cloud sees one address per device rather than this host's.
 */
export function simulatedAddresses(index: number): { ip: string; mac: string } {
  const bytes = [(index >> 16) & 0xff, (index >> 8) & 0xff, index & 0xff];
  const hex = (b: number) => b.toString(16).padStart(2, '0').toUpperCase();
  return { ip: `10.${bytes.join('.')}`, mac: `02:F1:EE:${bytes.map(hex).join(':')}` };
}

export class FleetDevice {
  private supervisor: Supervisor | null = null;
  private restarting: Promise<void> | null = null;
  private off = false;
  /** The host outlives a reboot, as a board's static hostname and proxy files do. */
  private readonly host = new MemoryHost('fleetlab', { reboot: () => void this.reboot(), powerOff: () => void this.powerOff() });

  private constructor(
    private readonly options: FleetDeviceOptions,
    readonly engine: SimEngineHandle,
  ) {}

  static async start(options: FleetDeviceOptions): Promise<FleetDevice> {
    const engine = await startSimEngine({
      dataDir: join(options.dataDir, 'engine'),
      ...(options.registry ? { registry: options.registry } : {}),
      ...(options.bandwidth ? { bandwidth: options.bandwidth } : {}),
      ...(options.clockOffsetMs ? { clockOffsetMs: options.clockOffsetMs } : {}),
      history: FLEET_ENGINE_HISTORY,
    });
    if (options.faults.includes('disk-full')) engine.setDiskFull(true);
    if (options.faults.includes('pull-fails')) engine.addPullFault({ image: '*', failAfterBytes: 0, message: 'read tcp: connection reset by peer' });
    const device = new FleetDevice(options, engine);
    try {
      await device.boot();
    } catch (err) {
      await engine.close();
      throw err;
    }
    return device;
  }

  get index(): number {
    return this.options.index;
  }

  get faults(): readonly FaultKind[] {
    return this.options.faults;
  }

  /** Null until the device has started (or while it is off). */
  get uuid(): string | null {
    return this.supervisor?.uuid ?? null;
  }


  status(): DeviceStatus {
    const sup = this.supervisor;
    if (this.off) return { phase: 'off', releaseId: null };
    if (!sup) return { phase: 'starting', releaseId: null };
    const releaseId = sup.state.getTarget().apps[0]?.releaseId ?? null;
    const cut = this.options.faults.includes('partition');
    if (!sup.store.get().registered) return { phase: 'offline', releaseId, reason: cut ? 'partitioned from the cloud before it registered' : 'not registered with the cloud yet' };
    const link = sup.cloud?.problem();
    if (!sup.cloud?.tunnelConnected) return { phase: 'offline', releaseId, reason: cut ? 'partitioned from the cloud' : `no tunnel to the cloud${link ? ` (${link})` : ''}` };
    if (sup.state.updateFailed) return { phase: 'failed', releaseId, reason: sup.state.problem ?? 'update failed' };
    if (sup.state.isApplying() || sup.state.updateLocked) return { phase: 'applying', releaseId, reason: `${sup.state.activity()}${link ? `; ${link}` : ''}` };
    return { phase: 'applied', releaseId, ...(link ? { reason: link } : {}) };
  }

  /** This device's volumes in its engine: a volume made again has a new creation time. */
  volumes(): Array<{ name: string; createdAt: string; mountpoint: string }> {
    return this.engine.engine.volumes.records().map((v) => ({ name: v.name, createdAt: v.createdAt, mountpoint: v.mountpoint }));
  }

  async close(): Promise<void> {
    this.off = true;
    await this.restarting;
    await this.supervisor?.close();
    this.supervisor = null;
    await this.engine.close();
  }

  private async boot(): Promise<void> {
    const { options } = this;
    const config = loadConfig({
      flags: {
        dataDir: join(options.dataDir, 'supervisor'),
        lockRoot: join(options.dataDir, 'locks'),
        bootConfigPath: join(options.dataDir, 'boot', 'config.txt'),
        proxyConfigDir: join(options.dataDir, 'boot', 'system-proxy'),
        dockerSocket: '/run/fleetlab-sim/in-process.sock',
        osVersion: 'fleetlab fleet simulation',
        deviceType: options.deviceType,
        cloudUrl: options.cloudUrl,
        provisioningKey: options.provisioningKey,
        pollIntervalMs: options.pollIntervalMs,
        reportIntervalMs: options.reportIntervalMs,
        tunnelHeartbeatMs: options.tunnelHeartbeatMs,
        port: 48484,
      },
    });
    const supervisor = new Supervisor({ config, host: this.host, journal: options.journal, logger: options.logger, engineOptions: { agent: this.engine.agent(), snapshotFromEvents: true }, addresses: () => simulatedAddresses(options.index), clock: this.engine.engine.clock });
    await supervisor.start();
    this.supervisor = supervisor;
  }

  private async reboot(): Promise<void> {
    this.restarting ??= (async () => {
      await this.supervisor?.close();
      this.supervisor = null;
      await this.engine.restartEngine({ downMs: 200 });
      if (!this.off) await this.boot();
    })().finally(() => {
      this.restarting = null;
    });
    await this.restarting;
  }

  private async powerOff(): Promise<void> {
    await this.close();
  }
}
