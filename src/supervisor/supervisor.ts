/**
 * Composition root: one Supervisor from a config object and its adapters. Nothing here is
 * global, so several supervisors can live in one process (tests, fleet simulation). Only
 * `listen()` opens a port.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { arch as osArch } from 'node:os';
import type { FastifyInstance } from 'fastify';
import { checkStoredTarget, emptyCheckedTarget, storedForm, type CheckedTarget } from '../protocol/checked-target.js';
import type { SupervisorConfig } from './config.js';
import type { TunnelRequest, TunnelResponse } from '../protocol/device-cloud.js';
import { BootConfig } from './adapters/boot-config.js';
import { defaultBackoff } from './adapters/cloud/backoff.js';
import { CloudClient } from './adapters/cloud/cloud-client.js';
import { CloudLink } from './adapters/cloud/cloud-link.js';
import { currentReport } from './adapters/cloud/report.js';
import { Engine, engineArch, type EngineOptions } from './adapters/engine.js';
import type { HostPort, JournalPort, LedPort } from './adapters/ports.js';
import type { SupervisorContext } from './api/context.js';
import { buildApi } from './api/server.js';
import { cachedAddresses } from './host-addresses.js';
import { GatewayListener } from './gateway-listener.js';
import { Blinker } from './blink.js';
import { LogBus } from './log-bus.js';
import { AppActions } from './state/app-actions.js';
import { ApiKeys, newKey } from './state/keys.js';
import { UpdateLocks } from './state/locks.js';
import { processStart } from '../processes.js';
import { StateEngine, type Logger } from './state/state-engine.js';
import { DeviceStore, type DeviceRecord } from './state/store.js';
import { apiAt, formatVersion, parseSupervisorVersion, type SupervisorApi } from './versions.js';

/** Set by the device bundle's build (device-image/payload.ts), which has no package.json beside it. */
declare const __FLEETLAB_VERSION__: string | undefined;

export const supervisorVersion: string =
  typeof __FLEETLAB_VERSION__ === 'string'
    ? __FLEETLAB_VERSION__
    : (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url.replace('/dist/', '/')), 'utf8')) as { version: string }).version;

export interface SupervisorDeps {
  config: SupervisorConfig;
  host: HostPort;
  journal: JournalPort;
  /** Undefined when the device has no LED: blink then only logs. */
  led?: LedPort;
  logger: Logger;
  /** Defaults to dockerode on config.dockerSocket. */
  engine?: Engine;
  /** The device's IP and MAC addresses as reports show them; default: this host's interfaces. */
  addresses?: () => { ip: string; mac: string };
  /** The device's wall clock in ms since the epoch; default: this host's (Date.now). */
  clock?: () => number;
  /** How the default engine adapter reaches its engine beyond config.dockerSocket (see EngineOptions); snapshotFromEvents defaults to on. */
  engineOptions?: Pick<EngineOptions, 'agent' | 'snapshotFromEvents'>;
}

function readOsVersion(): string {
  try {
    const text = readFileSync('/etc/os-release', 'utf8');
    return /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(text)?.[1] ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * A fresh id for this supervisor instance, from the kernel's random UUID where there is one:
 * a device starting on its existing store then loads no node:crypto (device-image/lazy-builtins.ts).
 */
function newInstanceId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/uuid', 'utf8').trim();
  } catch {
    return randomUUID();
  }
}

/** This boot's id: a lock recorded under another boot cannot belong to a live process. */
function readBootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return 'unknown';
  }
}



export class Supervisor implements SupervisorContext {
  readonly config: SupervisorConfig;
  readonly store: DeviceStore;
  readonly keys: ApiKeys;
  readonly engine: Engine;
  readonly locks: UpdateLocks;
  readonly state: StateEngine;
  readonly actions: AppActions;
  readonly host: HostPort;
  readonly journal: JournalPort;
  readonly blinker: Blinker;
  private readonly readAddresses: () => { ip: string; mac: string };
  readonly logs = new LogBus();
  readonly log: Logger;
  /** The version reported (/v1/device, /v2/version, the cloud): the emulated one, else fleetlab's own. */
  readonly version: string;
  /** What the API and the state engine are at that version (versions.ts). */
  readonly supervisorApi: SupervisorApi;
  readonly osVersion: string;
  /** Built on first use: a device reached only through its cloud link (fleet simulation) may never need it. */
  private builtApi: FastifyInstance | null = null;
  readonly bootConfig: BootConfig;
  /** Null when no cloud is configured. */
  readonly cloud: CloudLink | null;
  /** Set while a reboot or shutdown is under way. */
  private powerAction: Promise<void> | null = null;
  /** close() has begun: a host call cut off by it is the shutdown, not a failure. */
  private closing = false;
  /** Opened by `listen()`: the API on the supervisor network's gateway, once that network exists. */
  private gateway: GatewayListener | null = null;
  private supervisorNetwork: { apiHost: string; subnet: string } | null = null;

  constructor(private readonly deps: SupervisorDeps) {
    const { config } = deps;
    this.config = config;
    this.host = deps.host;
    this.journal = deps.journal;
    this.osVersion = config.osVersion || readOsVersion();
    this.supervisorApi = apiAt(config.supervisorVersion ? parseSupervisorVersion(config.supervisorVersion, 'supervisorVersion') : undefined);
    this.version = this.supervisorApi.emulated ? formatVersion(this.supervisorApi.emulated) : supervisorVersion;
    this.store = DeviceStore.open(config.dataDir, () => ({
      uuid: config.uuid || randomUUID().replace(/-/g, ''),
      deviceKey: config.apiKey || newKey(),
      appKeys: {},
      localMode: config.localMode,
      deviceName: '',
      localTarget: null,
      cloudTarget: null,
      registered: false,
      cloudKey: '',
      generation: 0,
    }));
    const record = this.store.get();
    this.log = this.busLogger(deps.logger);
    this.keys = new ApiKeys(this.store);
    this.readAddresses = deps.addresses ?? cachedAddresses();
    this.engine = deps.engine ?? new Engine({
      snapshotFromEvents: true,
      ...deps.engineOptions,
      socketPath: config.dockerSocket,
      device: record.uuid,
      supervisorNetwork: {
        name: config.supervisorNetwork,
        subnet: config.supervisorSubnet,
        ...(config.supervisorContainer ? { supervisorContainer: config.supervisorContainer } : {}),
        ...(config.hostNetworkContainer ? { hostNetworkContainer: config.hostNetworkContainer } : {}),
      },
    });
    this.locks = new UpdateLocks({
      lockRoot: config.lockRoot,
      ledger: this.store.lockLedger(),
      owner: { instance: newInstanceId(), boot: readBootId(), pid: process.pid, start: processStart(process.pid) },
    });
    this.bootConfig = new BootConfig(config.bootConfigPath);
    this.state = new StateEngine(
      {
        engine: this.engine,
        locks: this.locks,
        log: this.log,
        supervisorNetworkSeen: async ({ apiHost, subnet }) => {
          this.supervisorNetwork = { apiHost, subnet };
          await this.gateway?.open(this.supervisorNetwork);
        },
        // Before 10.0 a normal update removed the volumes no target declares (the spec's Versioning table).
        removeUnreferencedVolumes: !this.supervisorApi.has('keepsUnreferencedVolumes'),
        specContext: () => ({
          vendor: config.vendor,
          // Before 7.22.0 a labelled service's variables had the legacy word (docs/decisions.md item 21).
          ...(this.supervisorApi.has('vendorPrefix') ? {} : { apiVendor: config.legacyVendor }),
          uuid: this.uuid,
          deviceName: this.deviceName,
          deviceType: config.deviceType,
          arch: this.arch,
          supervisorAddress: this.address,
          supervisorPort: config.port,
          ...(config.publishAddress ? { publishAddress: config.publishAddress } : {}),
          ...(config.hostNetworkContainer ? { hostNetwork: { container: config.hostNetworkContainer, supervisorInside: config.hostNetworkContainer === config.supervisorContainer } } : {}),
          appKey: (appId) => this.keys.appKey(appId),
          lockDir: (appId, service) => this.locks.dir(appId, service),
          networkName: (appId, n) => this.engine.networkName(appId, n),
          volumeName: (appId, v) => this.engine.volumeName(appId, v),
        }),
      },
      this.loadTarget(record),
    );
    this.actions = new AppActions({ state: this.state, engine: this.engine, locks: this.locks, log: this.log });
    this.blinker = new Blinker({ led: deps.led ?? { set: async () => undefined, close: async () => undefined }, log: { warn: (obj, msg) => this.log.warn(`${msg ?? 'blink'}: ${JSON.stringify(obj)}`) } });
    this.cloud = config.cloudUrl ? this.buildCloudLink() : null;
  }

  private buildCloudLink(): CloudLink {
    const { config } = this;
    return new CloudLink({
      client: new CloudClient({ url: config.cloudUrl, timeoutMs: 30_000, interactiveTimeoutMs: 5_000 }),
      provisioningKey: config.provisioningKey,
      identity: () => {
        const record = this.store.get();
        return {
          uuid: record.uuid,
          deviceKey: record.cloudKey || record.deviceKey,
          deviceType: config.deviceType,
          deviceName: record.deviceName || undefined,
          supervisorVersion: this.version,
          osVersion: this.osVersion,
        };
      },
      registered: () => this.store.get().registered,
      markRegistered: async () => {
        await this.store.update((r) => ({ registered: true, cloudKey: r.cloudKey || r.deviceKey }));
      },
      onTarget: (target) => this.setCloudTarget(target),
      report: async () => {
        const { ip, mac } = this.addresses();
        return currentReport(await this.state.view(), {
          osVersion: this.osVersion,
          supervisorVersion: this.version,
          ipAddress: ip,
          macAddress: mac,
          apiPort: config.port,
          updateFailed: this.state.updateFailed,
        });
      },
      handle: (req) => this.handleTunnelRequest(req),
      pollIntervalMs: () => this.state.getTarget().settings.pollIntervalMs ?? config.pollIntervalMs,
      reportIntervalMs: config.reportIntervalMs,
      backoff: defaultBackoff,
      heartbeatMs: config.tunnelHeartbeatMs,
      log: this.log,
    });
  }

  /** A device API call arriving through the cloud tunnel, made with the device key. */
  private async handleTunnelRequest(req: TunnelRequest): Promise<TunnelResponse> {
    try {
      const res = await this.api.inject({
        method: req.method,
        url: req.path,
        headers: { authorization: `Bearer ${this.store.get().deviceKey}`, ...(req.body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(req.body === undefined ? {} : { payload: JSON.stringify(req.body) }),
      });
      const contentType = res.headers['content-type'];
      return { type: 'response', id: req.id, status: res.statusCode, body: res.body, ...(typeof contentType === 'string' ? { contentType } : {}) };
    } catch (err) {
      return { type: 'response', id: req.id, status: 500, contentType: 'application/json', body: JSON.stringify({ status: 'failed', message: String(err) }) };
    }
  }

  /** State-engine messages also go to /v2/local/logs, as the supervisor's own lines. */
  private busLogger(base: Logger): Logger {
    const publish = (message: string) => this.logs.publish({ message, timestamp: this.now(), serviceName: 'supervisor' });
    return {
      info: (m) => (base.info(m), publish(m)),
      warn: (m) => (base.warn(m), publish(m)),
      error: (m) => (base.error(m), publish(m)),
    };
  }

  get api(): FastifyInstance {
    this.builtApi ??= buildApi(this);
    return this.builtApi;
  }

  get uuid(): string {
    return this.store.get().uuid;
  }

  get deviceName(): string {
    return this.store.get().deviceName || this.uuid.slice(0, 7);
  }

  get arch(): string {
    return engineArch(osArch());
  }

  /** PLATFORM_SUPERVISOR_ADDRESS of labelled services on the supervisor network; empty: its gateway's (container-spec.ts). */
  get address(): string {
    return this.config.supervisorAddress;
  }

  addresses(): { ip: string; mac: string } {
    return this.readAddresses();
  }

  now(): number {
    return (this.deps.clock ?? Date.now)();
  }

  localMode(): boolean {
    return this.store.get().localMode;
  }

  /** Stores a local target state, checked by the route that took it, then applies it. */
  async setLocalTarget(target: CheckedTarget): Promise<void> {
    this.noteSettings(target);
    await this.storeTarget('localTarget', target);
    await this.applyTarget(target);
  }

  /**
   * Stores the cloud's target; applies it unless the device is in local mode, where the
   * cloud's apps are ignored (its name still counts: /v2/device/name is the cloud's name).
   */
  async setCloudTarget(target: CheckedTarget): Promise<void> {
    this.noteSettings(target);
    await this.storeTarget('cloudTarget', target);
    if (this.localMode()) {
      this.log.info('Local mode: the target state from the cloud is stored, not applied');
      return;
    }
    await this.applyTarget(target);
  }

  /** Keeps a target with the name and local-mode switch it carries. */
  private async storeTarget(source: 'localTarget' | 'cloudTarget', target: CheckedTarget): Promise<void> {
    const { localMode } = target.settings;
    await this.store.update((current) => ({
      [source]: storedForm(target),
      deviceName: target.name || current.deviceName,
      ...(localMode !== undefined ? { localMode } : {}),
    }));
  }

  /** What a new target's config says that the supervisor does not act on: the check found it, the supervisor logs it. */
  private noteSettings(target: CheckedTarget): void {
    for (const key of target.unknownConfigKeys) this.log.warn(`Unknown config key ${key} kept`);
    if (target.settings.deltaEnabled) this.log.info('Delta downloads are not implemented; full images are fetched');
  }

  /**
   * The target to start from (local in local mode, else the cloud's, else the local one),
   * checked once here so the engine gets its settings like any other target.
   */
  private loadTarget(record: Readonly<DeviceRecord>): CheckedTarget {
    const stored = record.localMode ? record.localTarget : (record.cloudTarget ?? record.localTarget);
    if (!stored) return emptyCheckedTarget(record.deviceName);
    const { target, problems } = checkStoredTarget(stored);
    if (problems.length) this.log.warn(`The stored target fails a check (${problems.join('; ')}); kept, as it was accepted when stored`);
    return target;
  }

  private async applyTarget(target: CheckedTarget): Promise<void> {
    await this.keys.ensureAppKeys(target.apps.map((a) => a.appId));
    this.state.setTarget(target);
    if (await this.bootConfig.apply(target.settings.hostConfig)) {
      this.log.warn(`${this.config.bootConfigPath} changed (HOST_CONFIG_* values): reboot the device to apply them`);
    }
  }

  /** Applies the stored target (first round also restarts services a user stopped). */
  async start(): Promise<void> {
    for (const file of this.locks.releaseStale()) this.log.info(`Released update lock ${file} left by an earlier supervisor process`);
    const target = this.state.getTarget();
    await this.keys.ensureAppKeys(target.apps.map((a) => a.appId));
    this.state.trigger();
    this.cloud?.start();
  }

  /** Listens where configured, and on the supervisor network's gateway once that network exists. */
  async listen(): Promise<string> {
    const url = await this.api.listen({ port: this.config.port, host: this.config.listenAddress });
    this.gateway = new GatewayListener({ api: this.api, port: this.config.port, listenAddress: this.config.listenAddress, log: this.log });
    if (this.supervisorNetwork) await this.gateway.open(this.supervisorNetwork);
    return url;
  }

  /** Reboot or power off after the response is flushed (docs/decisions.md item 13). */
  schedulePower(action: 'reboot' | 'poweroff', force: boolean): void {
    if (this.powerAction) return;
    this.powerAction = (async () => {
      this.log.info(`${action === 'reboot' ? 'Rebooting' : 'Shutting down'}: stopping services first`);
      try {
        await this.actions.stopAll(force);
      } catch (err) {
        this.log.warn(`stopping services before ${action} failed: ${String(err)}`);
      }
      await (action === 'reboot' ? this.host.reboot() : this.host.powerOff());
    })().catch((err) => {
      // systemd stops this service as the reboot it was asked for begins, and that stop can come
      // before logind's answer (the simulated login1 always; a loaded board may): that cut-off
      // call is the reboot under way.
      if (this.closing) this.log.info(`${action === 'reboot' ? 'Rebooting' : 'Shutting down'}: the supervisor was stopped before the host answered`);
      else this.log.error(`${action} failed: ${String(err)}`);
      this.powerAction = null;
    });
  }

  async healthy(): Promise<{ ok: boolean; reason?: string }> {
    try {
      await this.engine.ping();
    } catch (err) {
      return { ok: false, reason: String(err) };
    }
    return { ok: true };
  }

  async close(): Promise<void> {
    this.closing = true;
    this.cloud?.close();
    this.state.close();
    // A round in flight may still create a container; let it land so callers can clean up.
    await this.state.settled();
    this.blinker.stop();
    await this.gateway?.close();
    await this.builtApi?.close();
    await this.host.close();
    this.engine.close();
  }
}
