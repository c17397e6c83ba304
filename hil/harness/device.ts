/**
 * `device`, the fixture a user's spec gets from `fleetlab/test`: the device under test of the
 * run's target, with the release path on top (`deploy` a compose project) and short names for
 * what specs do most (`journal`, `powerCycle`, `faults`). The protocols stay reachable under
 * their own names (`api`, `exec`, `led`, `power`, `network`, `files`), so a spec written for
 * one target runs on every target that has the capabilities it uses.
 */
import { relative, resolve } from 'node:path';
import Docker from 'dockerode';
import { FleetlabError } from '../../src/errors.js';
import { DeviceApi, type StateStatus } from '../lib/device-api.js';
import { loadCompose } from '../release/compose.js';
import { deployLocal, waitForLocalRelease, type DeployedRelease, type DeployOptions } from '../release/local-deploy.js';
import { readBundle } from '../capture/bundle.js';
import type {
  ApiProtocol,
  Capability,
  CommandProtocol,
  DevicePaths,
  DeviceUnderTest,
  FilesProtocol,
  JournalEntryText,
  LedProtocol,
  LedTransition,
  NetworkProtocol,
  PowerProtocol,
  TargetFacts,
} from '../../device-access/protocols.js';

import { parseFaults, parsePointId, type Fault } from '../sweep/points.js';
import { runSweep, type SweepResult } from '../sweep/sweep.js';
import { sweepSummary, sweepTable } from '../sweep/report.js';
import type { PointRecording, SweepDevice } from '../sweep/device.js';

export type { DeployedRelease, DeployOptions } from '../release/local-deploy.js';
export type { SweepResult, PointResult } from '../sweep/sweep.js';

export interface JournalOptions {
  /** A systemd unit, e.g. the supervisor's `fleetlab-supervisor.service`. */
  unit?: string;
  /** Keep the last N entries (default 500). */
  lines?: number;
  /** Keep entries whose message contains this text, or matches this expression. */
  grep?: string | RegExp;
}

/** The LED line as the target observes it, with the transitions since the test started. */
export interface LedView extends LedProtocol {
  /** Transitions since the start of this test, oldest first, with `at` in ms from that start. */
  timeline(): Promise<readonly LedTransition[]>;
}

/** Faults by name, each undone by its pair. */
export interface Faults {
  /** Cut the device off from its cloud (the device API stays reachable). Needs `network`. */
  partition(): Promise<void>;
  heal(): Promise<void>;
  /** Cut power, no clean shutdown; the device stays off until powerRestore(). Needs `power.cut`. */
  powerCut(): Promise<void>;
  powerRestore(): Promise<void>;
  /** The device's own container engine restarted by its OS; resolves once it answers. Needs `engine.restart`. */
  restartEngine(): Promise<void>;
  /** Every free block of the engine's and the store's filesystems taken, until freeDisk(). Needs `disk.fill`. */
  fillDisk(): Promise<void>;
  freeDisk(): Promise<void>;
}

export interface DeviceContext {
  /** The compose file or directory of the run's app (`app` in fleetlab.config), for `deploy()` without one. */
  app?: string;
  /** Refused compose keys to leave out (`ignoreComposeKeys` in fleetlab.config); the run's global setup warns about each. */
  ignoreComposeKeys?: readonly string[];
  /** The bundle the device started from (`fromBundle`), absolute. */
  bundle?: string;
  /** Epoch ms the test started: `led.timeline()` counts from it. */
  startedAt: number;
  /** Build output and deploy progress, a line at a time. */
  log?: (line: string) => void;
  /**
   * A fresh device of the worker's target in place of this one (the fixture's pool retires the
   * one before), for `sweep()`: a point starts from a device as a spec file gets it.
   */
  freshDevice?: () => Promise<Device>;
  /** Records the device `freshDevice` gave last, for a sweep point's timeline (kept when the point broke). */
  recordPoint?: () => PointRecording;
  /** Adds an attachment to the test's report. */
  attach?: (name: string, body: string, contentType: string) => Promise<void>;
  /**
   * Runs a harness action as a step of the report and the trace (Playwright's `test.step`);
   * `harness` also puts it on the timeline's steps lane (protocol calls are there already).
   */
  step?: <T>(title: string, fn: () => Promise<T>, harness?: { action: string }) => Promise<T>;
}

export interface DeviceSweepOptions {
  /** Compose files or directories: the release the device runs, and the update. */
  from: string;
  to: string;
  /** Default `['power-cut']`. */
  faults?: Fault[];
  /** How many points, spread over the measured update (default 10). */
  points?: number;
  /** Where in each slice a point lands (default: random, in the report). */
  seed?: number;
  /** One point again, as the table names it (`power-cut@1830`). */
  only?: string;
  /** The team's check of each point's end state: throw to break the point. */
  check?: (device: Device) => Promise<void>;
  /** How long every service must stay up with the same container after each point (default 10 s). */
  settleMs?: number;
  /** How long a `network-drop` or `disk-full` lasts before it is undone (default 10 s). */
  holdMs?: number;
  /** A directory: each broken point's device captured there (`<point>.tar.gz`) for `fleetlab replay`. */
  capture?: string;
}

const DEFAULT_APP_ID = 1;

export class Device {
  readonly target: string;
  readonly capabilities: ReadonlySet<Capability>;
  readonly facts: TargetFacts | undefined;
  /** The device API, sending the device's key unless a request says otherwise. */
  readonly api: ApiProtocol;
  readonly exec: CommandProtocol | undefined;
  readonly led: LedView | undefined;
  readonly power: PowerProtocol | undefined;
  readonly network: NetworkProtocol | undefined;
  readonly files: FilesProtocol | undefined;
  /** Where the supervisor keeps its data and the apps' update locks on the device. */
  readonly paths: DevicePaths | undefined;
  readonly faults: Faults;
  readonly #dut: DeviceUnderTest;
  readonly #context: DeviceContext;

  constructor(dut: DeviceUnderTest, context: DeviceContext) {
    this.#dut = dut;
    this.#context = context;
    this.target = dut.target;
    this.capabilities = dut.capabilities;
    this.facts = dut.facts;
    this.api = dut.api;
    this.exec = stepped('exec', dut.exec, context);
    this.power = stepped('power', dut.power, context);
    this.network = stepped('network', dut.network, context);
    this.files = stepped('files', dut.files, context);
    this.paths = dut.paths;
    const led = dut.led;
    this.led = led && {
      line: led.line,
      level: () => led.level(),
      transitions: (sinceMs) => led.transitions(sinceMs),
      timeline: async () => (await led.transitions(context.startedAt)).map((t) => ({ at: t.at - context.startedAt, value: t.value })),
    };
    this.faults = {
      partition: () => this.#step('fault partition', 'partition', () => this.#need(dut.network, 'faults.partition()', 'network').partition()),
      heal: () => this.#step('fault heal', 'heal', () => this.#need(dut.network, 'faults.heal()', 'network').heal()),
      powerCut: () => this.#step('fault powerCut', 'powerCut', () => this.#need(dut.power, 'faults.powerCut()', 'power.cut').off()),
      powerRestore: () => this.#step('fault powerRestore', 'powerRestore', () => this.#need(dut.power, 'faults.powerRestore()', 'power.cut').on()),
      restartEngine: () => this.#step('fault restartEngine', 'restartEngine', () => this.#need(dut.engine, 'faults.restartEngine()', 'engine.restart').restart()),
      fillDisk: () => this.#step('fault fillDisk', 'fillDisk', () => this.#need(dut.disk, 'faults.fillDisk()', 'disk.fill').fill()),
      freeDisk: () => this.#step('fault freeDisk', 'freeDisk', () => this.#need(dut.disk, 'faults.freeDisk()', 'disk.fill').free()),
    };
  }

  /** A harness action as a report step and a timeline step, where the fixture gave a way to. */
  #step<T>(title: string, action: string, fn: () => Promise<T>): Promise<T> {
    return this.#context.step ? this.#context.step(title, fn, { action }) : fn();
  }

  /** The protocol behind `capability`, or the error that says the target lacks it. */
  #need<T>(value: T | undefined, what: string, capability: Capability): T {
    if (!value || !this.capabilities.has(capability)) {
      throw new FleetlabError('HIL_ERR_CAPABILITY', `${what}: target ${this.target} lacks capability ${capability}; guard the spec with needs('${capability}')`);
    }
    return value;
  }

  /** The typed client of the device API (every endpoint as a method). */
  get client(): DeviceApi {
    return new DeviceApi(this.#dut.api);
  }

  /** `/v2/state/status`: the release, each container's status, download progress. */
  async status(): Promise<StateStatus> {
    return (await this.client.stateStatus()).body;
  }

  /**
   * The `/v2/state/status` the captured device showed, for a device that started from a bundle
   * (`fromBundle`): where the replay should be stuck too.
   */
  async capturedStatus(): Promise<StateStatus> {
    const path = this.#context.bundle;
    if (!path) throw new FleetlabError('HIL_ERR_CAPTURE', 'capturedStatus(): this device did not start from a bundle; set test.use({ fromBundle })');
    const bundle = await readBundle(path);
    if (!bundle.has('state/status.json')) throw new FleetlabError('HIL_ERR_CAPTURE', `capturedStatus(): ${path} holds no state/status.json (its capture's "state" step did not run)`);
    return bundle.json<StateStatus>('state/status.json');
  }

  /** Journal entries, newest last. */
  async journal(options: JournalOptions = {}): Promise<readonly JournalEntryText[]> {
    const journal = this.#need(this.#dut.journal, 'journal()', 'journal');
    const entries = await this.#step(`journal${options.unit ? ` ${options.unit}` : ''}`, 'journal', () => journal.entries({ lines: options.lines ?? 500, ...(options.unit ? { unit: options.unit } : {}) }));
    const { grep } = options;
    if (grep === undefined) return entries;
    return entries.filter((e) => (typeof grep === 'string' ? e.message.includes(grep) : grep.test(e.message)));
  }

  /** Hard power cycle (no clean shutdown, disk kept); resolves when the API answers again. */
  async powerCycle(): Promise<void> {
    const power = this.#need(this.#dut.power, 'powerCycle()', 'power.cycle');
    await this.#step('powerCycle', 'powerCycle', () => power.cycle());
  }

  /**
   * SIGKILL to the supervisor alone, as a crash or an OOM kill ends it (the app's containers
   * run on); resolves once the OS has started it again and it answers.
   */
  async killSupervisor(): Promise<void> {
    const supervisor = this.#need(this.#dut.supervisor, 'killSupervisor()', 'supervisor.kill');
    await this.#step('killSupervisor', 'killSupervisor', () => supervisor.kill());
  }

  /** Reboot through the OS; resolves when the API answers again. */
  async reboot(): Promise<void> {
    const power = this.#need(this.#dut.power, 'reboot()', 'power.reboot');
    await this.#step('reboot', 'reboot', () => power.reboot());
  }

  /**
   * Builds the release of a compose project (file or directory; default the config's `app`),
   * hands it to the device as its local target state, and resolves once every service runs.
   * A device that holds an update lock takes the release and installs it when the lock goes:
   * start the deploy, release the lock, then await it.
   */
  async deploy(composeFileOrDir?: string, options: DeployOptions = {}): Promise<DeployedRelease> {
    const path = composeFileOrDir ?? this.#context.app;
    if (!path) throw new FleetlabError('HIL_ERR_COMPOSE', 'device.deploy(): name a compose file or directory, or set `app` in fleetlab.config');
    const project = loadCompose(resolve(path), { ignore: this.#context.ignoreComposeKeys ?? [] });
    const images = this.#need(this.#dut.images, 'deploy()', 'images');
    return this.#step(`deploy ${relative(process.cwd(), resolve(path)) || path}`, 'deploy', async () => {
      const engine = await images.prepare();
      return deployLocal({
        api: this.client,
        project,
        docker: new Docker({ socketPath: engine.engineSocket }),
        ...(engine.registry ? { registry: engine.registry } : {}),
        ...(engine.imageSource ? { imageSource: { docker: new Docker({ socketPath: engine.imageSource.engineSocket }), architecture: engine.imageSource.architecture } } : {}),
        log: this.#context.log ?? (() => undefined),
        ...options,
      });
    });
  }

  /**
   * The URL (`http://<address>:<port>`) where this device's `service` answers on its published
   * `containerPort` (tcp), as the device's engine bound it: two devices of a run publish the
   * same port each at an address of its own. Needs `ports`; rejects while no container of the
   * service runs, or when it publishes no such port.
   */
  async address(service: string, containerPort: number, options: { appId?: number } = {}): Promise<string> {
    const ports = this.#need(this.#dut.ports, `address('${service}', ${containerPort})`, 'ports');
    const { host, port } = await ports.published(service, containerPort, { appId: options.appId ?? DEFAULT_APP_ID });
    return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  }

  /** Where the update lock of `service` lives on the device: an app holds the lock while this file exists. */
  updateLockPath(service: string, appId = DEFAULT_APP_ID): string {
    return `${this.api.identity.lockRoot}/${appId}/${service}/updates.lock`;
  }

  /**
   * A fault sweep (what `fleetlab sweep` runs): the update from `from` to `to` measured once,
   * then run again on a fresh device per point with power cut at the point's moment, and every
   * invariant checked once power is back. The table goes into the report; the result says
   * which points broke what. The sweep takes the worker's devices: this `device` is a fresh one
   * again in the next spec file.
   */
  async sweep(options: DeviceSweepOptions): Promise<SweepResult> {
    const fresh = this.#context.freshDevice;
    if (!fresh) throw new FleetlabError('HIL_ERR_CAPABILITY', 'device.sweep(): this device was not made by the device fixture of fleetlab/test, which gives a sweep its fresh devices');
    const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
    const check = options.check;
    const record = this.#context.recordPoint;
    const result = await runSweep([{ fresh, ...(record ? { record } : {}) }], {
      from: resolve(options.from),
      to: resolve(options.to),
      faults: parseFaults(options.faults ?? ['power-cut']),
      points: options.points ?? 10,
      seed,
      ...(options.only !== undefined ? { only: parsePointId(options.only) } : {}),
      ...(check ? { check: (device: SweepDevice) => check(device as Device) } : {}),
      ...(options.settleMs !== undefined ? { bounds: { settleMs: options.settleMs } } : {}),
      ...(options.holdMs !== undefined ? { holdMs: options.holdMs } : {}),
      ...(options.capture !== undefined ? { captureDir: resolve(options.capture) } : {}),
      ...(this.#context.log ? { progress: this.#context.log } : {}),
    });
    const rerun = (id: string) => `device.sweep({ ...the same options, seed: ${seed}, only: '${id}' })`;
    await this.#context.attach?.('sweep', `${sweepTable(result)}\n\n${sweepSummary(result, rerun)}\n`, 'text/plain');
    return result;
  }

  /**
   * Waits until `release` (from `deploy(..., { wait: false })`) is applied with every service
   * Running; a timeout names each service's status.
   */
  async waitForRelease(release: Pick<DeployedRelease, 'releaseId' | 'services'>, options: { timeoutMs?: number } = {}): Promise<void> {
    await this.#step(`waitForRelease ${release.releaseId}`, 'waitForRelease', () => waitForLocalRelease(this.client, release, options.timeoutMs));
  }
}

type Stepped = Record<string, unknown>;

/**
 * A protocol whose calls are report steps (`exec.run ls`, `files.read /x`): what a spec did to
 * the device shows in the report and the trace, not only in the step timeline.
 */
function stepped<P extends object>(name: string, protocol: P | undefined, context: DeviceContext): P | undefined {
  const step = context.step;
  if (!protocol || !step) return protocol;
  return new Proxy(protocol, {
    get(obj, prop, receiver) {
      const value = Reflect.get(obj, prop, receiver) as Stepped[string];
      if (typeof value !== 'function' || typeof prop !== 'string') return value;
      return (...args: unknown[]) => step(`${name}.${prop}${stepArgs(args)}`, () => (value as (...a: unknown[]) => Promise<unknown>).apply(obj, args));
    },
  });
}

/** A call's arguments as a step title shows them: argv joined, paths as they are, data left out. */
function stepArgs(args: readonly unknown[]): string {
  const first = args[0];
  const text = Array.isArray(first) ? first.join(' ') : typeof first === 'string' ? first : typeof first === 'number' ? String(first) : '';
  return text ? ` ${text.length > 80 ? `${text.slice(0, 80)}…` : text}` : '';
}
