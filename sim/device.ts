/**
 * One simulated device: the real supervisor process, started the way a board starts it, with
 * simulated peers behind its adapters: a private D-Bus with hostname1/systemd1/login1, a
 * sysfs GPIO tree in a private mount namespace, and a journal written by journal-remote.
 * A reboot through login1 restarts the supervisor process with its state kept (and clears
 * the lock root, as tmpfs does on a board); a power-off stops the device.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { appendFileSync, createWriteStream, mkdirSync, readFileSync, rmSync, writeFileSync, type WriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { userTmpDir } from '../src/user-tmp.js';
import { join, resolve } from 'node:path';
import { EventEmitter } from 'node:events';
import Docker from 'dockerode';
import { SUPERVISOR_RESTART_SEC } from '../src/supervisor/restart-policy.js';
import { FleetlabError, errorText } from '../src/errors.js';
import { parseSupervisorVersion } from '../src/supervisor/versions.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { until } from '../src/wait.js';
import { startHostPeer, type HostPeer } from './dbus/host-peer.js';
import { startPrivateBus, type PrivateBus } from './dbus/private-bus.js';
import { cliCommand, simModule } from './entry.js';
import { CLOCK_OFFSET_VARIABLE } from './clock/offset.js';
import { untilStopped } from '../src/stop-signals.js';
import { killProcesses, sessionEnv, sessionProcesses, stopProcesses } from '../src/processes.js';
import { Teardown } from '../src/teardown.js';
import { removeDeviceLeftovers, storedUuid } from './device-leftovers.js';
import { ownerRecord, reapStale, writeOwner, type Owner } from '../src/owned-dirs.js';
import { startPartitionableLink, type PartitionableLink } from './network/partitionable-link.js';
import { gpioNamespaceCommand, requireUserNamespace } from './gpio/namespace.js';
import { startSysfsGpio, type SysfsGpio } from './gpio/sysfs-gpio.js';
import { ContainerLogFollower } from './journal/container-logs.js';
import { startJournalSim, supervisorUnit, type JournalSim } from './journal/journal-sim.js';
import { startSimEngine, type Scenario, type SimEngineHandle } from './engine/index.js';
import { freePort } from '../src/free-port.js';
import { sharedEngineNetwork, sharedEngineNetworkArgs, type SharedEngineNetwork } from './supervisor-network.js';
import { keptPublishAddress } from './publish-address.js';
import { startHostNetwork } from './host-network.js';

export interface SimDeviceOptions {
  /** Device API port; 0 picks a free one. */
  port: number;
  dataDir?: string;
  /**
   * The data dir was made for this device alone, so no later start can find it: its stop
   * removes it, and the device's volumes with it. Default: when `dataDir` is not given (the
   * device makes one); a replay that made the directory itself says so.
   */
  ownsDataDir?: boolean;
  /** `sim`: the device runs its own simulated engine (sim/engine) on `<dataDir>/engine/engine.sock`; dockerSocket is then unused. */
  engine: 'docker' | 'sim';
  dockerSocket: string;
  /** Simulated engine only: registry bandwidth (bytes/s) and a scenario (object or file path). */
  bandwidth?: number;
  scenario?: Scenario | string;
  localMode: boolean;
  apiKey?: string;
  vendor?: string;
  /** The LED line: a BCM pin of the simulated pinctrl-bcm2835 chip. */
  ledOffset?: number;
  /** The device type the supervisor reports; default its own. */
  deviceType?: string;
  /** The upstream supervisor version X.Y.Z to answer as (src/supervisor/versions.ts); default fleetlab's own, every endpoint. */
  supervisorVersion?: string;
  /**
   * Runs once the peers and the engine are up and before the supervisor first starts: puts
   * the device into a state (a replay writes its store, engine objects and lock files).
   */
  prepare?: (device: SimDevice) => Promise<void>;
  /**
   * Start the supervisor under Node's inspector on this loopback port, stopped before its
   * first line until a debugger attaches and lets it run (`fleetlab replay --paused`). The
   * start returns without waiting for its API; needs a data dir with a store already.
   */
  inspectBrk?: number;
  /** The supervisor's wall clock this far off this host's (ms; a replayed device's captured offset). */
  clockOffsetMs?: number;
  /** Address the device API listens on; default 127.0.0.1 (0.0.0.0 inside a container, for a mapped port). */
  listenAddress?: string;
  /**
   * Host address the device's published ports bind to (the supervisor's publishAddress):
   * default a loopback address of its own (publish-address.ts), so devices sharing an engine
   * each have their 8080; empty: as each compose file says, as on a board.
   */
  publishAddress?: string;
  /** Register with a cloud and follow its target state, through a link the sim can partition. */
  cloud?: SimCloudOptions;
  /**
   * The label (src/processes.ts) every process of the device carries, so its stop, or the
   * next start of an owner killed with -9, finds them all; default: a new one.
   */
  session?: string;
  /**
   * How the supervisor runs; default this tree's `fleetlab` CLI on this Node. A bench passes
   * the device bundle (`fleetlab-device.mjs`, what a board runs) and the Node to run it on.
   */
  supervisorEntry?: SupervisorEntry;
  /**
   * The container of the engine at `dockerSocket` this device runs in (the HIL container
   * target): the supervisor connects it to its supervisor network, where labelled services
   * reach the API at its address, and it is the device's host network, where the API is on
   * loopback, as on a board. Engine `docker` only.
   */
  deviceContainer?: string;
  /**
   * Engine `docker` without `deviceContainer`: run host-network services in the machine's own
   * network, shared with every other device on the engine, instead of a host-network container
   * of the device's (host-network.ts). Only to measure what that container costs
   * (bench/host-network.bench.ts): two devices then collide on a host-network service's port.
   */
  sharedHostNetwork?: boolean;
}

export interface SupervisorEntry {
  /** The node binary; default this process's. */
  node?: string;
  /** Node's own options before the module (the device's V8 limits). */
  nodeArgs?: readonly string[];
  /** A module that takes the CLI's `supervisor` command (the device bundle). */
  module: string;
  /** Environment beside the device's own (a board's unit sets NODE_COMPILE_CACHE). */
  env?: Readonly<Record<string, string>>;
}

export interface SimCloudOptions {
  url: string;
  provisioningKey: string;
  pollIntervalMs?: number;
  reportIntervalMs?: number;
  /** The device's tunnel heartbeat; short in tests so a partition shows within seconds. */
  tunnelHeartbeatMs?: number;
}

export interface SimDeviceInfo {
  url: string;
  apiKey: string;
  uuid: string;
  dataDir: string;
}

const READY_TIMEOUT_MS = 30_000;
/**
 * The LED line's transitions, one JSON object a line, in the data dir: how an observer
 * outside the sim's process (the HIL container target) sees the line. Outside gpio/, which is
 * volatile like sysfs and may be rebuilt at a power cycle.
 */
export const LED_TRANSITIONS_FILE = 'led-transitions.ndjson';
const STOP_GRACE_MS = 10_000;
/** The directories devices make for themselves when given none, under the temporary directory. */
const SIM_DIR_PREFIX = 'fleetlab-sim-';
/** Where else a device may own its directory: `fleetlab replay`'s (hil/capture/replay.ts). */
const OWNED_DIR_PREFIXES = [SIM_DIR_PREFIX, 'fleetlab-replay-'];
/** In such a directory: the dockerd its containers are in. */
const ENGINE_FILE = 'engine.json';

/**
 * Devices of processes killed with -9 (their directory's owner is gone): their processes
 * stopped, their containers, networks and volumes removed, their directories too.
 */
export async function reapAbandonedDevices(): Promise<string[]> {
  const reaped: string[] = [];
  // The harness's runs (a sweep, a spec) keep their devices in this user's own temporary
  // directory (src/user-tmp.ts), a command run by hand in the plain one: each start looks in both.
  for (const base of new Set([tmpdir(), userTmpDir()])) {
    for (const prefix of OWNED_DIR_PREFIXES) reaped.push(...(await reapStale(base, prefix, removeEngineLeftovers)));
  }
  return reaped;
}

async function removeEngineLeftovers(_owner: Owner, dir: string): Promise<void> {
  const uuid = storedUuid(dir);
  let engine: { dockerSocket?: string } = {};
  try {
    engine = JSON.parse(readFileSync(join(dir, ENGINE_FILE), 'utf8')) as typeof engine;
  } catch {
    return; // the simulated engine: its objects live in the directory
  }
  if (uuid && engine.dockerSocket) await removeDeviceLeftovers(new Docker({ socketPath: engine.dockerSocket }), uuid);
}

const SUPERVISOR_RESTART_MS = SUPERVISOR_RESTART_SEC * 1000;
export const SIM_LED_CHIP = 'pinctrl-bcm2835';

function hostAndPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  if (u.protocol !== 'http:') throw new FleetlabError('SUP_ERR_BAD_REQUEST', `the simulated device reaches the cloud over http only, got ${url}`);
  return { host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port || 80) };
}


/**
 * Where a simulated device keeps the supervisor's files in its data dir, and the socket of
 * its own engine (engine: 'sim'): one layout for the device and for a capture given only the dir.
 */
export function simDeviceFiles(dataDir: string): { dataDir: string; lockRoot: string; engineSocket: string; hostnameFile: string; proxyConfigDir: string } {
  return {
    dataDir: join(dataDir, 'supervisor'),
    lockRoot: join(dataDir, 'locks'),
    engineSocket: join(dataDir, 'engine', 'engine.sock'),
    // The simulated hostnamed keeps the name here, as /etc/hostname on a board.
    hostnameFile: join(dataDir, 'host', 'hostname'),
    proxyConfigDir: join(dataDir, 'boot', 'system-proxy'),
  };
}

const running = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

async function waitExit(child: ChildProcess, graceMs: number): Promise<void> {
  if (!running(child)) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

export class SimDevice extends EventEmitter<{ reboot: []; poweroff: []; exit: [code: number | null] }> {
  private child: ChildProcess | null = null;
  private logFile: WriteStream | null = null;
  private readonly docker: Docker;
  private transitions: Promise<void> = Promise.resolve();
  private stopping = false;
  /** Set while a supervisor that died waits to be started again. */
  private restartTimer: NodeJS.Timeout | undefined;
  /** The device's own simulated engine (engine: 'sim'), for fault injection in tests. */
  simEngine: SimEngineHandle | undefined;
  /** The device's network path to the cloud (with `cloud`): partition and heal it. */
  cloudLink: PartitionableLink | undefined;
  /** The inspector port of the supervisor's first start (`inspectBrk`), taken by it. */
  private inspectBrk: number | undefined;
  /** On dockerd, which other devices share, a supervisor network of its own; its own simulated engine has balena's. */
  private readonly supervisorNetwork: SharedEngineNetwork | undefined;
  /** The uuid drawn for a device whose supervisor has not stored one yet (`uuid`). */
  private firstUuid: string | undefined;

  private constructor(
    readonly options: Required<Omit<SimDeviceOptions, 'apiKey' | 'dataDir' | 'bandwidth' | 'scenario' | 'cloud' | 'session' | 'deviceType' | 'supervisorVersion' | 'prepare' | 'inspectBrk' | 'clockOffsetMs' | 'supervisorEntry' | 'deviceContainer' | 'sharedHostNetwork'>> & { apiKey?: string; dataDir: string; cloud?: SimCloudOptions; deviceType?: string; supervisorVersion?: string; inspectBrk?: number; clockOffsetMs?: number; supervisorEntry?: SupervisorEntry; deviceContainer?: string; sharedHostNetwork?: boolean },
    /** The label its processes carry. */
    readonly session: string,
    private readonly teardown: Teardown,
    readonly bus: PrivateBus,
    readonly host: HostPeer,
    readonly gpio: SysfsGpio,
    readonly journal: JournalSim,
    private readonly follower: ContainerLogFollower,
  ) {
    super();
    this.docker = new Docker({ socketPath: options.dockerSocket });
    this.inspectBrk = options.inspectBrk;
    this.supervisorNetwork = options.engine === 'docker' ? sharedEngineNetwork() : undefined;
  }

  /**
   * The uuid the device has, or will have at its supervisor's first start (which is given it):
   * the host-network container made before that start carries it, so it goes with the device.
   */
  private get uuid(): string {
    const stored = storedUuid(this.options.dataDir);
    if (stored) return stored;
    this.firstUuid ??= randomUUID().replace(/-/g, '');
    return this.firstUuid;
  }

  /**
   * The device's host network as the supervisor is told it: its own container, a host-network
   * container made for it, or (the simulated engine, or sharedHostNetwork) the engine host's.
   */
  private async hostNetworkArgs(): Promise<string[]> {
    const o = this.options;
    if (o.engine !== 'docker') return [];
    if (o.deviceContainer) return ['--supervisor-container', o.deviceContainer, '--host-network-container', o.deviceContainer];
    if (o.sharedHostNetwork) return [];
    return ['--host-network-container', await startHostNetwork(this.docker, o.dockerSocket, this.uuid)];
  }

  static async start(opts: SimDeviceOptions): Promise<SimDevice> {
    // Refused here, with the range accepted, rather than by a supervisor that never answers.
    if (opts.supervisorVersion) parseSupervisorVersion(opts.supervisorVersion, 'supervisorVersion (--supervisor-version)');
    requireUserNamespace();
    const ownsDataDir = opts.ownsDataDir ?? opts.dataDir === undefined;
    for (const dir of await reapAbandonedDevices()) process.stderr.write(`fleetlab: removed the simulated device in ${dir}, left by a run that was killed\n`);
    const dataDir = resolve(opts.dataDir ?? (await mkdtemp(join(tmpdir(), SIM_DIR_PREFIX))));
    const port = opts.port === 0 ? await freePort() : opts.port;
    for (const d of ['dbus', 'host', 'gpio', 'journal', 'boot', 'locks', 'supervisor']) mkdirSync(join(dataDir, d), { recursive: true });
    const dockerSocket = opts.engine === 'sim' ? simDeviceFiles(dataDir).engineSocket : opts.dockerSocket;
    if (opts.deviceContainer && opts.engine !== 'docker') throw new FleetlabError('SUP_ERR_BAD_REQUEST', 'deviceContainer (--device-container) names a container of dockerd: use it with engine docker');
    const options = { port, dataDir, ownsDataDir, engine: opts.engine, dockerSocket, localMode: opts.localMode, apiKey: opts.apiKey, vendor: opts.vendor ?? 'platform', ledOffset: opts.ledOffset ?? 17, listenAddress: opts.listenAddress ?? '127.0.0.1', publishAddress: opts.publishAddress ?? keptPublishAddress(dataDir), cloud: opts.cloud, deviceType: opts.deviceType, supervisorVersion: opts.supervisorVersion, inspectBrk: opts.inspectBrk, supervisorEntry: opts.supervisorEntry, ...(opts.clockOffsetMs ? { clockOffsetMs: opts.clockOffsetMs } : {}), ...(opts.deviceContainer ? { deviceContainer: opts.deviceContainer } : {}), ...(opts.sharedHostNetwork ? { sharedHostNetwork: true } : {}) };
    const session = opts.session ?? `sim-${randomUUID()}`;
    const env = sessionEnv(session);
    // A device in a directory it owns, killed with its owner (kill -9 of a sweep, a replay, a
    // test run), is reaped by the next start: its processes by their label, its containers by
    // the uuid in its store, on the engine it names here.
    if (ownsDataDir) {
      if (opts.engine === 'docker') writeFileSync(join(dataDir, ENGINE_FILE), JSON.stringify({ dockerSocket }));
      writeOwner(dataDir, ownerRecord({ session }));
    }
    // Undone in reverse: the supervisor first, then what it created in the engine, then the
    // peers it used, and last whatever still carries the session's label (a journalctl the
    // supervisor started, a peer that ignored its stop).
    const teardown = new Teardown();
    // Undone last, once nothing of the device can still write to it.
    if (ownsDataDir) teardown.defer({ name: `the data dir ${dataDir}`, stop: () => rm(dataDir, { recursive: true, force: true }) });
    teardown.defer({
      name: `processes labelled ${session}`,
      stop: async () => void (await stopProcesses(sessionProcesses(session), STOP_GRACE_MS)),
      kill: () => killProcesses(sessionProcesses(session)),
    });
    try {
      const simEngine = opts.engine === 'sim'
        ? await startSimEngine({ socketPath: dockerSocket, dataDir: join(dataDir, 'engine', 'data'), ...(opts.bandwidth ? { bandwidth: opts.bandwidth } : {}), ...(opts.scenario ? { scenario: opts.scenario } : {}) })
        : undefined;
      if (simEngine) teardown.defer({ name: 'the simulated engine', stop: () => simEngine.close() });
      const cloudLink = opts.cloud ? await startPartitionableLink(hostAndPort(opts.cloud.url)) : undefined;
      if (cloudLink) teardown.defer({ name: 'the link to the cloud', stop: () => cloudLink.close() });
      const bus = await startPrivateBus({ dir: join(dataDir, 'dbus'), env, detached: true });
      teardown.defer({ name: 'the D-Bus daemon', stop: () => bus.stop(), kill: () => bus.kill() });
      let device: SimDevice | undefined;
      const host = await startHostPeer({
        busAddress: bus.address,
        stateDir: join(dataDir, 'host'),
        defaultHostname: 'fleetlab',
        onReboot: () => device?.queue(() => device!.reboot()),
        onPowerOff: () => device?.queue(() => device!.powerOff()),
      });
      teardown.defer({ name: 'the host peer', stop: () => host.close() });
      const gpio = await startSysfsGpio({ dir: join(dataDir, 'gpio') });
      teardown.defer({ name: 'the GPIO peer', stop: () => gpio.close() });
      const ledFile = join(dataDir, LED_TRANSITIONS_FILE);
      gpio.onTransition((t) => {
        if (t.gpio === 512 + options.ledOffset) appendFileSync(ledFile, `${JSON.stringify({ value: t.value, at: t.at })}\n`);
      });
      const journal = await startJournalSim({ directory: join(dataDir, 'journal'), hostname: 'fleetlab-sim', env, detached: true });
      teardown.defer({ name: 'the journal peer', stop: () => journal.close(), kill: () => journal.kill() });
      const follower = new ContainerLogFollower({ docker: new Docker({ socketPath: options.dockerSocket }), journal });
      const created = new SimDevice(options, session, teardown, bus, host, gpio, journal, follower);
      device = created;
      device.simEngine = simEngine;
      device.cloudLink = cloudLink;
      teardown.defer({
        name: ownsDataDir ? "the device's containers, networks and volumes" : "the device's containers and networks",
        stop: () => created.removeEngineObjects({ keepVolumes: !ownsDataDir }),
      });
      teardown.defer({ name: 'the container log follower', stop: () => follower.stop() });
      teardown.defer({ name: 'the supervisor log', stop: () => created.closeLog() });
      teardown.defer({ name: 'the supervisor', stop: () => created.stopSupervisor(), kill: () => created.killSupervisor() });
      await opts.prepare?.(created);
      await device.boot();
      return device;
    } catch (err) {
      // The start's own error says what went wrong; a failure to undo it would only hide it.
      await teardown.stop().catch(() => undefined);
      throw err;
    }
  }

  get url(): string {
    return `http://127.0.0.1:${this.options.port}`;
  }

  get ledGpio(): number {
    return 512 + this.options.ledOffset;
  }

  /** uuid and key as the supervisor stored them. */
  info(): SimDeviceInfo {
    const record = JSON.parse(readFileSync(join(this.options.dataDir, 'supervisor', 'device.json'), 'utf8')) as { uuid: string; deviceKey: string };
    return { url: this.url, apiKey: record.deviceKey, uuid: record.uuid, dataDir: this.options.dataDir };
  }

  get supervisorPid(): number | undefined {
    return this.child?.pid;
  }

  get lockRoot(): string {
    return simDeviceFiles(this.options.dataDir).lockRoot;
  }

  /** Where the supervisor keeps its files, as a capture with a shell on this host reads them. */
  get paths(): { dataDir: string; lockRoot: string; dockerHost: string } {
    const { dataDir, lockRoot } = simDeviceFiles(this.options.dataDir);
    return { dataDir, lockRoot, dockerHost: `unix://${this.options.dockerSocket}` };
  }

  get supervisorLog(): string {
    return join(this.options.dataDir, 'supervisor.log');
  }

  private queue(fn: () => Promise<void>): void {
    this.transitions = this.transitions.then(fn).catch((err) => {
      this.logFile?.write(`sim: ${errorText(err)}\n`);
    });
  }

  private supervisorArgs(hostNetwork: readonly string[]): string[] {
    const o = this.options;
    const d = (p: string) => join(o.dataDir, p);
    // Given at the first start only: the store keeps it after that (the host-network container carries it already).
    const firstUuid = storedUuid(o.dataDir) === undefined && o.engine === 'docker' ? ['--uuid', this.uuid] : [];
    return [
      'supervisor',
      ...firstUuid,
      ...hostNetwork,
      '--port', String(o.port),
      '--listen-address', o.listenAddress,
      ...(o.publishAddress ? ['--publish-address', o.publishAddress] : []),
      '--data-dir', d('supervisor'),
      '--vendor', o.vendor,
      '--local-mode', String(o.localMode),
      ...(o.apiKey ? ['--api-key', o.apiKey] : []),
      ...(o.deviceType ? ['--device-type', o.deviceType] : []),
      ...(o.supervisorVersion ? ['--supervisor-version', o.supervisorVersion] : []),
      ...(this.supervisorNetwork ? sharedEngineNetworkArgs(this.supervisorNetwork) : []),
      '--docker-socket', o.dockerSocket,
      '--dbus-address', this.bus.address,
      '--led-gpio', `${SIM_LED_CHIP}:${o.ledOffset}`,
      '--proxy-config-dir', simDeviceFiles(this.options.dataDir).proxyConfigDir,
      '--boot-config-path', d('boot/config.txt'),
      '--journal-directory', d('journal'),
      '--lock-root', this.lockRoot,
      ...(o.cloud && this.cloudLink
        ? [
            '--cloud-url', this.cloudLink.url,
            '--provisioning-key', o.cloud.provisioningKey,
            ...(o.cloud.pollIntervalMs ? ['--poll-interval-ms', String(o.cloud.pollIntervalMs)] : []),
            ...(o.cloud.reportIntervalMs ? ['--report-interval-ms', String(o.cloud.reportIntervalMs)] : []),
            ...(o.cloud.tunnelHeartbeatMs ? ['--tunnel-heartbeat-ms', String(o.cloud.tunnelHeartbeatMs)] : []),
          ]
        : []),
    ];
  }

  /** Starts the supervisor process and waits until the API answers /ping. */
  private async boot(): Promise<void> {
    const offset = this.options.clockOffsetMs;
    const preload = offset ? [simModule('clock/shifted-clock')] : [];
    const entry = this.options.supervisorEntry;
    // Up before the supervisor: a reboot stopped it with the device's other containers, and the first round starts theirs again.
    const args = this.supervisorArgs(await this.hostNetworkArgs());
    const cli = entry
      ? { file: entry.node ?? process.execPath, args: [...(entry.nodeArgs ?? []), ...preload.flatMap((m) => ['--import', m]), entry.module, ...args] }
      : cliCommand(args, preload);
    // Once: a reboot of a paused device starts its supervisor as any other.
    const inspect = this.inspectBrk === undefined ? [] : [`--inspect-brk=127.0.0.1:${this.inspectBrk}`];
    this.inspectBrk = undefined;
    const cmd = gpioNamespaceCommand(this.gpio.classDir, [cli.file, ...inspect, ...cli.args]);
    this.logFile ??= createWriteStream(this.supervisorLog, { flags: 'a' });
    // Its own process group: a Ctrl-C meant for the owner must not stop the supervisor before
    // the owner does, in order, with the peers it uses still up.
    const child = spawn(cmd.file, cmd.args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...sessionEnv(this.session), ...entry?.env, FORCE_COLOR: '0', ...(offset ? { [CLOCK_OFFSET_VARIABLE]: String(offset) } : {}) }, detached: true });
    this.child = child;
    child.stdout!.pipe(this.logFile, { end: false });
    child.stderr!.pipe(this.logFile, { end: false });
    void this.journal.pipeLines(child.stdout!, { unit: supervisorUnit, identifier: 'fleetlab-supervisor' });
    void this.journal.pipeLines(child.stderr!, { unit: supervisorUnit, identifier: 'fleetlab-supervisor', priority: 3 });
    child.once('exit', (code) => {
      if (this.child === child) this.child = null;
      if (this.stopping) return;
      this.emit('exit', code);
      // A supervisor that dies (killed, crashed) is started again, as systemd does on a board
      // (Restart=always, RestartSec=2 in device-image/board-layout.ts's unit).
      this.logFile?.write(`sim: the supervisor exited (${code ?? child.signalCode}); starting it again in ${SUPERVISOR_RESTART_MS} ms\n`);
      clearTimeout(this.restartTimer);
      this.restartTimer = setTimeout(() => {
        if (!this.stopping && !this.child) this.queue(() => this.boot());
      }, SUPERVISOR_RESTART_MS);
    });
    if (inspect.length) {
      // Stopped for a debugger, it answers once the developer lets it run: the start does not wait.
      this.follower.start(this.info().uuid);
      return;
    }
    // A refused connection (not listening yet) is retried by until.
    const ping = () => fetch(`${this.url}/ping`).then((res) => res.ok);
    await until('the supervisor answers /ping', ping, (ok) => ok, {
      timeoutMs: READY_TIMEOUT_MS,
      intervalMs: 100,
      alive: () => child.exitCode === null && child.signalCode === null,
      fail: async (f) => {
        if (f.end === 'gone') return new FleetlabError('SUP_ERR_INTERNAL', `the supervisor exited during start (code ${child.exitCode ?? child.signalCode}); see ${this.supervisorLog}`);
        await waitExit(child, 1000);
        return new FleetlabError('SUP_ERR_INTERNAL', `the supervisor did not answer /ping within ${READY_TIMEOUT_MS / 1000} s; see ${this.supervisorLog}`);
      },
    });
    this.follower.start(this.info().uuid);
  }

  private async stopSupervisor(): Promise<void> {
    const child = this.child;
    if (child) await waitExit(child, STOP_GRACE_MS);
    this.child = null;
  }

  private killSupervisor(): void {
    if (this.child && running(this.child)) this.child.kill('SIGKILL');
  }

  private async closeLog(): Promise<void> {
    const log = this.logFile;
    this.logFile = null;
    if (log) await new Promise<void>((resolve) => log.end(resolve));
  }

  /** Its apps' containers and its host-network container. */
  private async deviceContainers(): Promise<Docker.ContainerInfo[]> {
    return this.docker.listContainers({ all: true, filters: { label: [`${LABEL.device}=${this.uuid}`] } });
  }

  /**
   * With `keepVolumes` the volumes stay: they are the device's data, kept with the data dir the
   * caller named. By the uuid drawn for it too: a supervisor that never stored one may have a
   * host-network container made for it.
   */
  private async removeEngineObjects(options: { keepVolumes: boolean }): Promise<void> {
    const uuid = storedUuid(this.options.dataDir) ?? this.firstUuid;
    if (uuid) await removeDeviceLeftovers(this.docker, uuid, options);
  }

  /**
   * A reboot: the supervisor and the containers stop, tmpfs (the lock root) is cleared. With
   * `powerLost` it is a power cut instead: every container dies at once, as on a board whose
   * power goes, with no time to finish what it was writing.
   */
  async reboot(options: { powerLost?: boolean } = {}): Promise<void> {
    this.stopping = true;
    clearTimeout(this.restartTimer);
    try {
      await this.stopSupervisor();
      await Promise.all((await this.deviceContainers()).map((c) => this.#stopContainer(this.docker.getContainer(c.Id), options).catch(() => undefined)));
      // On a board the engine restarts with the OS; the simulated one does the same.
      await this.simEngine?.restartEngine({ downMs: 0 });
      rmSync(this.lockRoot, { recursive: true, force: true });
      mkdirSync(this.lockRoot, { recursive: true });
      this.journal.newBoot();
    } finally {
      this.stopping = false;
    }
    await this.boot();
    this.emit('reboot');
  }

  /** A shutdown (login1 PowerOff); with `powerLost`, power cut: the supervisor and every container die at once. */
  async powerOff(options: { powerLost?: boolean } = {}): Promise<void> {
    this.stopping = true;
    clearTimeout(this.restartTimer);
    if (options.powerLost) this.killSupervisor();
    await this.stopSupervisor();
    await Promise.all((await this.deviceContainers()).map((c) => this.#stopContainer(this.docker.getContainer(c.Id), options).catch(() => undefined)));
    this.emit('poweroff');
  }

  /**
   * Stops everything it started, last started first, each awaited (see the start), and removes
   * the containers and networks the device created. Its volumes and data dir stay when the
   * caller named the data dir (a later start resumes from both); a data dir the device made
   * itself goes, and its volumes with it. What could not be removed is named in the error.
   */
  #stopContainer(container: Docker.Container, options: { powerLost?: boolean }): Promise<unknown> {
    return options.powerLost ? container.kill() : container.stop({ t: 10 });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.restartTimer);
    await this.transitions;
    await this.teardown.stop();
  }

  /** A forced stop: kills its processes at once; a `stop` under way still removes what it can. */
  kill(): void {
    this.stopping = true;
    clearTimeout(this.restartTimer);
    this.teardown.force();
  }
}

/** `fleetlab sim device`: start, print the ready line, run until a signal or power-off. */
export async function runSimDevice(opts: SimDeviceOptions): Promise<void> {
  const device = await SimDevice.start(opts);
  await serveSimDevice(device, `fleetlab: simulated device ${device.info().uuid} is up`);
}

/**
 * Prints a started device's ready line (stdout, JSON) and how to reach it (stderr), then runs
 * until a signal (again to force) or its power-off, and stops it.
 */
export async function serveSimDevice(device: SimDevice, heading: string, more: string[] = []): Promise<void> {
  const info = device.info();
  process.stdout.write(`${JSON.stringify({ event: 'ready', ...info })}\n`);
  process.stderr.write(
    [
      heading,
      `  device API:   ${info.url}  (key: ${info.apiKey})`,
      `  try:          curl "${info.url}/v1/device?apikey=${info.apiKey}"`,
      `  state:        ${info.dataDir}${device.options.ownsDataDir ? "  (removed at the stop, with the device's volumes; --data-dir keeps both)" : ''}`,
      `  supervisor log: ${device.supervisorLog}`,
      `  journal:      journalctl --directory ${join(info.dataDir, 'journal')}`,
      ...(device.options.publishAddress ? [`  app ports:    published at ${device.options.publishAddress} (the port numbers as the compose file says; --publish-address to choose)`] : []),
      ...(device.simEngine ? [`  engine:       DOCKER_HOST=unix://${device.simEngine.socketPath} docker ps`] : []),
      ...more,
      '  stop with Ctrl-C',
      '',
    ].join('\n'),
  );
  const { done, trigger } = untilStopped(() => device.stop(), {
    force: () => device.kill(),
    onSignal: () => process.stderr.write('fleetlab: stopping the device (again to force)\n'),
  });
  device.once('poweroff', trigger);
  await done;
}
