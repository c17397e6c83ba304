/**
 * One simulated device: the real supervisor process, started the way a board starts it, with
 * simulated peers behind its adapters: a private D-Bus with hostname1/systemd1/login1, a
 * sysfs GPIO tree in a private mount namespace, and a journal written by journal-remote.
 * A reboot through login1 restarts the supervisor process with its state kept (and clears
 * the lock root, as tmpfs does on a board); a power-off stops the device.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, createWriteStream, mkdirSync, readFileSync, rmSync, type WriteStream } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { EventEmitter } from 'node:events';
import Docker from 'dockerode';
import { FleetlabError, errorText } from '../src/errors.js';
import { LABEL } from '../src/supervisor/adapters/engine.js';
import { startHostPeer, type HostPeer } from './dbus/host-peer.js';
import { startPrivateBus, type PrivateBus } from './dbus/private-bus.js';
import { cliCommand } from './entry.js';
import { untilStopped } from '../src/stop-signals.js';
import { startPartitionableLink, type PartitionableLink } from './network/partitionable-link.js';
import { gpioNamespaceCommand } from './gpio/namespace.js';
import { startSysfsGpio, type SysfsGpio } from './gpio/sysfs-gpio.js';
import { ContainerLogFollower } from './journal/container-logs.js';
import { startJournalSim, supervisorUnit, type JournalSim } from './journal/journal-sim.js';
import { startSimEngine, type Scenario, type SimEngineHandle } from './engine/index.js';
import { freePort } from '../src/free-port.js';

export interface SimDeviceOptions {
  /** Device API port; 0 picks a free one. */
  port: number;
  dataDir?: string;
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
  /** Address the device API listens on; default 127.0.0.1 (0.0.0.0 inside a container, for a mapped port). */
  listenAddress?: string;
  /** Register with a cloud and follow its target state, through a link the sim can partition. */
  cloud?: SimCloudOptions;
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
export const SIM_LED_CHIP = 'pinctrl-bcm2835';

function hostAndPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  if (u.protocol !== 'http:') throw new FleetlabError('SUP_ERR_BAD_REQUEST', `the simulated device reaches the cloud over http only, got ${url}`);
  return { host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port || 80) };
}


async function waitExit(child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
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
  /** The device's own simulated engine (engine: 'sim'), for fault injection in tests. */
  simEngine: SimEngineHandle | undefined;
  /** The device's network path to the cloud (with `cloud`): partition and heal it. */
  cloudLink: PartitionableLink | undefined;

  private constructor(
    readonly options: Required<Omit<SimDeviceOptions, 'apiKey' | 'dataDir' | 'bandwidth' | 'scenario' | 'cloud'>> & { apiKey?: string; dataDir: string; cloud?: SimCloudOptions },
    readonly bus: PrivateBus,
    readonly host: HostPeer,
    readonly gpio: SysfsGpio,
    readonly journal: JournalSim,
    private readonly follower: ContainerLogFollower,
  ) {
    super();
    this.docker = new Docker({ socketPath: options.dockerSocket });
  }

  static async start(opts: SimDeviceOptions): Promise<SimDevice> {
    const dataDir = resolve(opts.dataDir ?? (await mkdtemp(join(tmpdir(), 'fleetlab-sim-'))));
    const port = opts.port === 0 ? await freePort() : opts.port;
    for (const d of ['dbus', 'host', 'gpio', 'journal', 'boot', 'locks', 'supervisor']) mkdirSync(join(dataDir, d), { recursive: true });
    const dockerSocket = opts.engine === 'sim' ? join(dataDir, 'engine', 'engine.sock') : opts.dockerSocket;
    const options = { port, dataDir, engine: opts.engine, dockerSocket, localMode: opts.localMode, apiKey: opts.apiKey, vendor: opts.vendor ?? 'platform', ledOffset: opts.ledOffset ?? 17, listenAddress: opts.listenAddress ?? '127.0.0.1', cloud: opts.cloud };
    const started: Array<{ close(): Promise<void> } | { stop(): Promise<void> }> = [];
    try {
      const simEngine = opts.engine === 'sim'
        ? await startSimEngine({ socketPath: dockerSocket, dataDir: join(dataDir, 'engine', 'data'), ...(opts.bandwidth ? { bandwidth: opts.bandwidth } : {}), ...(opts.scenario ? { scenario: opts.scenario } : {}) })
        : undefined;
      if (simEngine) started.push(simEngine);
      const cloudLink = opts.cloud ? await startPartitionableLink(hostAndPort(opts.cloud.url)) : undefined;
      if (cloudLink) started.push(cloudLink);
      const bus = await startPrivateBus({ dir: join(dataDir, 'dbus') });
      started.push(bus);
      let device: SimDevice | undefined;
      const host = await startHostPeer({
        busAddress: bus.address,
        stateDir: join(dataDir, 'host'),
        defaultHostname: 'fleetlab',
        onReboot: () => device?.queue(() => device!.reboot()),
        onPowerOff: () => device?.queue(() => device!.powerOff()),
      });
      started.push(host);
      const gpio = await startSysfsGpio({ dir: join(dataDir, 'gpio') });
      started.push(gpio);
      const ledFile = join(dataDir, LED_TRANSITIONS_FILE);
      gpio.onTransition((t) => {
        if (t.gpio === 512 + options.ledOffset) appendFileSync(ledFile, `${JSON.stringify({ value: t.value, at: t.at })}\n`);
      });
      const journal = await startJournalSim({ directory: join(dataDir, 'journal'), hostname: 'fleetlab-sim' });
      started.push(journal);
      const follower = new ContainerLogFollower({ docker: new Docker({ socketPath: options.dockerSocket }), journal });
      device = new SimDevice(options, bus, host, gpio, journal, follower);
      device.simEngine = simEngine;
      device.cloudLink = cloudLink;
      await device.boot();
      return device;
    } catch (err) {
      for (const s of started.reverse()) await ('close' in s ? s.close() : s.stop()).catch(() => undefined);
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
    return join(this.options.dataDir, 'locks');
  }

  get supervisorLog(): string {
    return join(this.options.dataDir, 'supervisor.log');
  }

  private queue(fn: () => Promise<void>): void {
    this.transitions = this.transitions.then(fn).catch((err) => {
      this.logFile?.write(`sim: ${errorText(err)}\n`);
    });
  }

  private supervisorArgs(): string[] {
    const o = this.options;
    const d = (p: string) => join(o.dataDir, p);
    return [
      'supervisor',
      '--port', String(o.port),
      '--listen-address', o.listenAddress,
      '--data-dir', d('supervisor'),
      '--vendor', o.vendor,
      '--local-mode', String(o.localMode),
      ...(o.apiKey ? ['--api-key', o.apiKey] : []),
      '--supervisor-address', this.url,
      '--docker-socket', o.dockerSocket,
      '--dbus-address', this.bus.address,
      '--led-gpio', `${SIM_LED_CHIP}:${o.ledOffset}`,
      '--proxy-config-dir', d('boot/system-proxy'),
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
    const cli = cliCommand(this.supervisorArgs());
    const cmd = gpioNamespaceCommand(this.gpio.classDir, [cli.file, ...cli.args]);
    this.logFile ??= createWriteStream(this.supervisorLog, { flags: 'a' });
    const child = spawn(cmd.file, cmd.args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FORCE_COLOR: '0' } });
    this.child = child;
    child.stdout!.pipe(this.logFile, { end: false });
    child.stderr!.pipe(this.logFile, { end: false });
    void this.journal.pipeLines(child.stdout!, { unit: supervisorUnit, identifier: 'fleetlab-supervisor' });
    void this.journal.pipeLines(child.stderr!, { unit: supervisorUnit, identifier: 'fleetlab-supervisor', priority: 3 });
    child.once('exit', (code) => {
      if (this.child === child) this.child = null;
      if (!this.stopping) this.emit('exit', code);
    });
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new FleetlabError('SUP_ERR_INTERNAL', `the supervisor exited during start (code ${child.exitCode ?? child.signalCode}); see ${this.supervisorLog}`);
      }
      try {
        const res = await fetch(`${this.url}/ping`);
        if (res.ok) {
          this.follower.start(this.info().uuid);
          return;
        }
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    await waitExit(child, 1000);
    throw new FleetlabError('SUP_ERR_INTERNAL', `the supervisor did not answer /ping within ${READY_TIMEOUT_MS / 1000} s; see ${this.supervisorLog}`);
  }

  private async stopSupervisor(): Promise<void> {
    const child = this.child;
    if (child) await waitExit(child, STOP_GRACE_MS);
    this.child = null;
  }

  private async deviceContainers(): Promise<Docker.ContainerInfo[]> {
    return this.docker.listContainers({ all: true, filters: { label: [`${LABEL.device}=${this.info().uuid}`] } });
  }

  /** A power cycle: the supervisor and the containers stop, tmpfs (the lock root) is cleared. */
  async reboot(): Promise<void> {
    this.stopping = true;
    try {
      await this.stopSupervisor();
      await Promise.all((await this.deviceContainers()).map((c) => this.docker.getContainer(c.Id).stop({ t: 10 }).catch(() => undefined)));
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

  async powerOff(): Promise<void> {
    this.stopping = true;
    await this.stopSupervisor();
    await Promise.all((await this.deviceContainers()).map((c) => this.docker.getContainer(c.Id).stop({ t: 10 }).catch(() => undefined)));
    this.emit('poweroff');
  }

  /** Stops everything and removes the containers and networks the device created. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.transitions;
    const uuid = this.info().uuid;
    await this.stopSupervisor();
    await this.follower.stop();
    for (const c of await this.deviceContainers()) await this.docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined);
    const networks = await this.docker.listNetworks({ filters: { label: [`${LABEL.device}=${uuid}`] } });
    for (const n of networks) await this.docker.getNetwork(n.Id).remove().catch(() => undefined);
    await this.simEngine?.close().catch(() => undefined);
    await this.cloudLink?.close().catch(() => undefined);
    await this.journal.close().catch(() => undefined);
    await this.gpio.close().catch(() => undefined);
    await this.host.close().catch(() => undefined);
    await this.bus.stop().catch(() => undefined);
    this.logFile?.end();
  }
}

/** `fleetlab sim device`: start, print the ready line, run until a signal or power-off. */
export async function runSimDevice(opts: SimDeviceOptions): Promise<void> {
  const device = await SimDevice.start(opts);
  const info = device.info();
  process.stdout.write(`${JSON.stringify({ event: 'ready', ...info })}\n`);
  process.stderr.write(
    [
      `fleetlab: simulated device ${info.uuid} is up`,
      `  device API:   ${info.url}  (key: ${info.apiKey})`,
      `  try:          curl "${info.url}/v1/device?apikey=${info.apiKey}"`,
      `  state:        ${info.dataDir}`,
      `  supervisor log: ${device.supervisorLog}`,
      `  journal:      journalctl --directory ${join(info.dataDir, 'journal')}`,
      ...(device.simEngine ? [`  engine:       DOCKER_HOST=unix://${device.simEngine.socketPath} docker ps`] : []),
      '  stop with Ctrl-C',
      '',
    ].join('\n'),
  );
  const { done, trigger } = untilStopped(() => device.stop());
  device.once('poweroff', trigger);
  await done;
}
