/**
 * The HIL fixtures every spec imports instead of `@playwright/test`:
 *
 * - `device`: the DeviceUnderTest of the project's target. One device per spec file (per
 *   worker, restarted when the worker moves to another file): starting a simulated device
 *   costs a few seconds (see hil/README.md), cheap against a file's tests but not against
 *   every test, and a file is the unit that owns the device's global state. A file that
 *   cannot leave the device clean sets `test.use({ deviceScope: 'test' })` to get a fresh
 *   device per test. A failed test also retires the device, so the next test starts clean.
 * - `api`: the typed client (lib/device-api.ts) on that device.
 * - `needs(...caps)`: skips the test, with the reason printed and gathered into the end
 *   summary, when the target lacks a capability.
 * - `fleet`: virtual devices registered to a cloud of their own, for rollout specs
 *   (`test.use({ fleetOptions: { devices: 500 } })`); `expect(fleet).toConverge(...)` waits
 *   for a release. It runs in the worker's process whatever the target.
 *
 * Every protocol call is a step (lib/steps.ts); each test gets its timeline attached, and a
 * failed test also gets the journal, the supervisor log and the LED transitions.
 */
import { test as base, expect as baseExpect } from '@playwright/test';
import type { TestInfo } from '@playwright/test';
import { DeviceApi } from '../lib/device-api.js';
import { TIME_SCALE_VARIABLE } from '../lib/wait.js';
import { instrumentDevice, StepEmitter, StepRecorder } from '../lib/steps.js';
import { checkBindings } from '../targets/bindings.js';
import { loadTarget } from '../targets/index.js';
import type { Capability, DeviceUnderTest } from '../../device-access/protocols.js';
import type { TargetDriver, TargetStartOptions } from '../targets/target-driver.js';
import { startFleetCloud, type FleetCloud } from '../../sim/stack.js';
import { Device, type DeviceContext } from './device.js';
import { applySupervisorVersion } from './supervisor-version.js';
import { FleetUnderTest, type ConvergeOptions, type FleetOptions } from './fleet.js';
import { readBundle } from '../capture/bundle.js';
import { captureTestDevice } from '../capture/test-device.js';
import { showBundle } from '../capture/show.js';
import { renderTimelineHtml } from '../lib/timeline/render.js';
import { TimelineRecorder } from './timeline-recorder.js';
import { pointRecording } from './point-timeline.js';
import { errorText, FleetlabError } from '../../src/errors.js';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

const JOURNAL_LINES = 500;
const LOG_TAIL_BYTES = 256 * 1024;
const CAPTURE_JOURNAL_ENTRIES = 5_000;
const CAPTURE_VOLUME_BYTES = 4 * 1024 * 1024;

interface Held {
  file: string;
  raw: DeviceUnderTest;
  device: DeviceUnderTest;
  /** The lab cloud the device is registered to (files that `test.use({ withCloud: true })`). */
  cloud?: LabCloud;
}

type LabCloud = FleetCloud & { dispose(): Promise<void> };

/** A fresh cloud with one fleet, in the harness process, for one device. */
async function startLabCloud(): Promise<LabCloud> {
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-hil-cloud-'));
  const cloud = await startFleetCloud({ port: 0, dataDir: dir, fleetName: 'hil' });
  return { ...cloud, dispose: async () => (await cloud.close(), await rm(dir, { recursive: true, force: true })) };
}

/** The device of the current spec file in this worker. */
class DevicePool {
  #held: Held | undefined;
  /** One emitter for the worker: a test's recorder also sees its device start and retire. */
  readonly steps = new StepEmitter();

  constructor(private readonly driver: TargetDriver) {}

  async forFile(file: string, withCloud: boolean, bundle?: string, supervisorVersion?: string): Promise<Held> {
    // A describe block of the file with another version gets a device of its own.
    const key = `${file}@${supervisorVersion ?? ''}`;
    if (this.#held?.file === key) return this.#held;
    await this.retire();
    if (bundle && !this.driver.startsFromBundle) {
      throw new FleetlabError('HIL_ERR_CAPABILITY', `target ${this.driver.name} cannot start a device from a bundle yet (fromBundle ${bundle}): run this spec on the sim, container or qemu target`);
    }
    // A target that cannot partition the device from a cloud gets none; its cloud specs skip.
    const cloud = withCloud && this.driver.provides.includes('network') ? await startLabCloud() : undefined;
    const options: TargetStartOptions = { ...(cloud ? { cloud: { url: cloud.url, provisioningKey: cloud.provisioningKey } } : {}), ...(bundle ? { bundle } : {}), ...(supervisorVersion ? { supervisorVersion } : {}) };
    let raw: DeviceUnderTest | undefined;
    try {
      raw = await this.steps.run('target', 'start', { target: this.driver.name, cloud: Boolean(cloud) }, () => this.driver.start(options), (d) => ({ capabilities: [...d.capabilities] }));
      checkBindings(this.driver, raw);
    } catch (err) {
      await raw?.close().catch(() => undefined);
      await cloud?.dispose();
      throw err;
    }
    // The worker runs one target: its deadlines follow that target's speed (lib/wait.ts).
    process.env[TIME_SCALE_VARIABLE] = String(raw.facts?.timeScale ?? 1);
    this.#held = { file: key, raw, device: instrumentDevice(raw, this.steps), ...(cloud ? { cloud } : {}) };
    return this.#held;
  }

  get cloud(): FleetCloud | undefined {
    return this.#held?.cloud;
  }

  async retire(): Promise<void> {
    const held = this.#held;
    this.#held = undefined;
    if (!held) return;
    try {
      await this.steps.run('target', 'close', { target: this.driver.name }, () => held.raw.close());
    } finally {
      await held.cloud?.dispose();
    }
  }
}

export interface HilWorkerFixtures {
  /** Name of the target (a key of hil/targets/index.ts); each project sets it. */
  target: string;
  targetDriver: TargetDriver;
  devicePool: DevicePool;
}

export type TimelineMode = 'on' | 'on-failure' | 'off';

export interface HilTestFixtures {
  /** `file` (default): one device per spec file; `test`: a fresh device for every test. */
  deviceScope: 'file' | 'test';
  /** Register the file's device to a fresh lab cloud (fleet `hil`) instead of local mode. */
  withCloud: boolean;
  /** The compose file or directory `device.deploy()` builds when it is given none. */
  app: string | undefined;
  /** Refused compose keys `device.deploy()` leaves out (`ignoreComposeKeys` in fleetlab.config). */
  ignoreComposeKeys: string[];
  /**
   * Start the file's device in the state this bundle captured (`fleetlab capture`), as
   * `fleetlab replay` does; a path relative to the spec file. The sim, container and qemu targets.
   */
  fromBundle: string | undefined;
  device: Device;
  /**
   * The upstream supervisor version X.Y.Z the device answers as (`test.use`, a project's `use`,
   * defineConfig); undefined: fleetlab's own, every endpoint. Tests marked `since()` a newer one skip.
   */
  supervisorVersion: string | undefined;
  /** Annotates each test with its device's version and skips it when too old (automatic). */
  supervisorVersionCheck: void;
  /** The lab cloud of a `withCloud` file; undefined when the target cannot take part. */
  cloud: FleetCloud | undefined;
  api: DeviceApi;
  needs: (...capabilities: Capability[]) => void;
  /**
   * The device timeline page (LED, power, network, containers, supervisor state, steps, journal,
   * serial, CPU and RSS on one axis): `on-failure` (default) attaches it to failed and flaky
   * tests, `on` to every test, `off` records nothing. The recording runs unless `off`.
   */
  timeline: TimelineMode;
  /** The `fleet` fixture's devices and faults; a spec that uses `fleet` sets it. */
  fleetOptions: FleetOptions | undefined;
  fleet: FleetUnderTest;
}

export const test = base.extend<HilTestFixtures, HilWorkerFixtures>({
  target: ['sim', { scope: 'worker', option: true }],
  targetDriver: [
    async ({ target }, use) => {
      const driver = await loadTarget(target);
      await driver.prepare?.();
      await use(driver);
    },
    // prepare() may wait in a lab's queue for a board, bounded by its own wait (FLEETLAB_LAB_WAIT_S).
    { scope: 'worker', timeout: 0 },
  ],
  devicePool: [
    async ({ targetDriver }, use) => {
      const pool = new DevicePool(targetDriver);
      await use(pool);
      try {
        await pool.retire();
      } finally {
        await targetDriver.dispose?.();
      }
    },
    { scope: 'worker', timeout: 120_000 },
  ],
  deviceScope: ['file', { option: true }],
  withCloud: [false, { option: true }],
  app: [undefined, { option: true }],
  ignoreComposeKeys: [[], { option: true }],
  fromBundle: [undefined, { option: true }],
  supervisorVersion: [undefined, { option: true }],
  supervisorVersionCheck: [
    async ({ supervisorVersion }, use, testInfo) => {
      applySupervisorVersion(testInfo, supervisorVersion);
      await use();
    },
    { auto: true },
  ],
  timeline: ['on-failure', { option: true }],

  device: async ({ targetDriver, devicePool, deviceScope, withCloud, app, ignoreComposeKeys, fromBundle, supervisorVersion, timeline }, use, testInfo) => {
    const recorder = new StepRecorder(devicePool.steps);
    const origin = Date.now();
    let held: Awaited<ReturnType<DevicePool['forFile']>> | undefined;
    let recording: TimelineRecorder | undefined;
    let endedAt: number | undefined;
    try {
      // A repeat (--repeat-each) of a file is a new run of it: it gets its own device.
      const bundle = fromBundle ? resolve(dirname(testInfo.file), fromBundle) : undefined;
      const file = `${testInfo.file}#${testInfo.repeatEachIndex}`;
      const context: DeviceContext = {
        ...(app ? { app } : {}),
        ignoreComposeKeys,
        ...(bundle ? { bundle } : {}),
        startedAt: origin,
        log: (line) => console.log(`fleetlab: ${line}`),
        attach: async (name, body, contentType) => void (await testInfo.attach(name, { body, contentType })),
        // Boxed: a failure inside points at the spec's line, not at the harness.
        step: (title, fn, harness) => (harness ? devicePool.steps.run('harness', harness.action, title, () => base.step(title, fn, { box: true })) : base.step(title, fn, { box: true })),
      };
      // A sweep's devices: each a new one from the pool, the file's own device retired first;
      // the evidence of a failure comes from the last of them.
      let sweeps = 0;
      context.freshDevice = async () => {
        held = await devicePool.forFile(`${file}#sweep-${++sweeps}`, withCloud, bundle, supervisorVersion);
        return new Device(held.device, context);
      };
      if (timeline !== 'off') {
        context.recordPoint = () =>
          pointRecording(held!.raw, devicePool.steps, async (id, html) => {
            const path = testInfo.outputPath(`sweep-${id}.timeline.html`);
            await writeFile(path, html);
            await testInfo.attach(`sweep point ${id}: device timeline`, { path, contentType: 'text/html' });
            return path;
          });
      }
      held = await devicePool.forFile(file, withCloud, bundle, supervisorVersion);
      if (timeline !== 'off') recording = new TimelineRecorder(held.raw, devicePool.steps, origin, held.raw.facts?.timeScale).start();
      await use(new Device(held.device, context));
      endedAt = Date.now();
    } finally {
      endedAt ??= Date.now();
      const failed = !held || testInfo.status !== testInfo.expectedStatus;
      // Ctrl-C (or the run's parent killed): the person wants the run stopped, not a report of a
      // device they stopped. Reading it back (timeline, journal, capture) takes half a minute
      // on an emulated board, and leaves the boards running that long after the interrupt.
      const interrupted = testInfo.status === 'interrupted';
      await recording?.stop();
      // Flaky: a retry that passes after a failed attempt.
      if (recording && held && !interrupted && (timeline === 'on' || failed || testInfo.retry > 0)) await attachTimeline(recording, testInfo, endedAt, failed);
      if (failed && held?.raw.infrastructureFailure) {
        // The lab failed, not the device: said in the report, and apart in the run's summary.
        testInfo.annotations.push({ type: 'infrastructure failure', description: held.raw.infrastructureFailure });
        console.error(`fleetlab: infrastructure failure (not the device's): ${held.raw.infrastructureFailure}`);
      }
      if (testInfo.status !== 'skipped' && !interrupted) await labelAttempt(targetDriver, testInfo, !failed, held?.raw.infrastructureFailure);
      if (failed && held && !interrupted) await attachEvidence(held.raw, testInfo, origin);
      if (failed || deviceScope === 'test') await devicePool.retire();
      recorder.stop();
      await testInfo.attach('step timeline', { body: recorder.timeline(origin), contentType: 'text/plain' });
    }
  },

  api: async ({ device }, use) => use(new DeviceApi(device.api)),

  cloud: async ({ device, devicePool }, use) => {
    void device; // the cloud is the device's: set up together, by the device fixture
    await use(devicePool.cloud);
  },

  fleetOptions: [undefined, { option: true }],
  fleet: async ({ fleetOptions }, use, testInfo) => {
    if (!fleetOptions) throw new FleetlabError('HIL_ERR_FLEET', 'the fleet fixture needs its size: test.use({ fleetOptions: { devices: 100 } }) in the spec file');
    const fleet = await FleetUnderTest.start(fleetOptions);
    try {
      await use(fleet);
    } finally {
      if (testInfo.status !== testInfo.expectedStatus) {
        const stuck = fleet.stuck(undefined, 50).map((s) => `device ${s.index} ${s.uuid ?? ''}${s.faults.length ? ` (${s.faults.join(', ')})` : ''}: ${s.phase}, release ${s.releaseId ?? 'none'}, ${s.reason}`);
        await testInfo.attach('fleet', { body: [JSON.stringify(fleet.counts()), ...stuck].join('\n'), contentType: 'text/plain' });
      }
      await fleet.dispose();
    }
  },

  needs: async ({ targetDriver }, use, testInfo) => {
    await use((...capabilities) => {
      const missing = capabilities.filter((c) => !targetDriver.provides.includes(c));
      if (missing.length === 0) return;
      const reason = `target ${targetDriver.name} lacks capability ${missing.join(', ')}`;
      console.log(`skipped "${testInfo.title}": ${reason}`);
      testInfo.skip(true, reason);
    });
  },
});

export const expect = baseExpect.extend({
  /** `await expect(fleet).toConverge({ release, within })`: the devices applied the release in time. */
  async toConverge(fleet: FleetUnderTest, options: ConvergeOptions) {
    const result = await fleet.converge(options);
    return { pass: result.pass, message: () => result.message, name: 'toConverge' };
  },
});

/** The device timeline page; read from the device before it retires, so what it kept itself is there. */
async function attachTimeline(recording: TimelineRecorder, testInfo: TestInfo, end: number, failed: boolean): Promise<void> {
  try {
    const error = testInfo.errors.map((e) => e.message ?? e.value ?? '').join('\n').replace(/\x1b\[[0-9;]*m/g, '') || `test ${testInfo.status}`;
    const timeline = await recording.timeline({ title: testInfo.titlePath.slice(1).join(' › '), end, ...(failed ? { failure: { at: end, error } } : {}) });
    // A file, not a body: the report links it as a page of its own, and it opens from disk.
    const path = testInfo.outputPath('device-timeline.html');
    await writeFile(path, renderTimelineHtml(timeline));
    await testInfo.attach('device timeline', { path, contentType: 'text/html' });
  } catch (err) {
    await testInfo.attach('device timeline', { body: `(could not draw the device timeline: ${errorText(err)})`, contentType: 'text/plain' });
  }
}

/** The journal, the supervisor log and the LED transitions, attached to a failed test. */
/** Tells the driver how the test's attempt ended (a lab keeps it against the board) and puts its label, if any, on the report. */
async function labelAttempt(driver: TargetDriver, testInfo: TestInfo, passed: boolean, infrastructure: string | undefined): Promise<void> {
  if (!driver.attemptEnded) return;
  try {
    const label = await driver.attemptEnded({ test: testInfo.testId, title: testInfo.titlePath.slice(1).join(' › '), retry: testInfo.retry, passed, ...(infrastructure ? { infrastructure } : {}) });
    if (label) testInfo.annotations.push(label);
  } catch (err) {
    // The test's own outcome stands; only its count against the board is missing, and said.
    console.error(`fleetlab: the test's outcome was not kept against its board: ${errorText(err)}`);
  }
}

async function attachEvidence(device: DeviceUnderTest, testInfo: TestInfo, since: number): Promise<void> {
  const attach = async (name: string, read: () => Promise<string>) => {
    let body: string;
    try {
      body = await read();
    } catch (err) {
      body = `(could not read ${name}: ${err instanceof Error ? err.message : String(err)})`;
    }
    await testInfo.attach(name, { body, contentType: 'text/plain' });
  };
  if (device.journal) {
    await attach('journal', async () =>
      (await device.journal!.entries({ lines: JOURNAL_LINES }))
        .map((e) => `${new Date(e.realtimeUs / 1000).toISOString()} ${e.unit ?? '-'}: ${e.message}`)
        .join('\n'),
    );
  }
  await attach('supervisor log', async () => {
    const log = await device.supervisorLog();
    return log.length > LOG_TAIL_BYTES ? `…(earlier output cut)\n${log.slice(-LOG_TAIL_BYTES)}` : log;
  });
  if (device.consoleLog) await attach('serial console', () => device.consoleLog!(since));
  await attachCapture(device, testInfo);
  if (device.led) {
    await attach('LED transitions', async () =>
      (await device.led!.transitions(since)).map((t) => `+${t.at - since} ms ${t.value}`).join('\n') || '(no transitions during the test)',
    );
  }
}

/**
 * The device as a bundle (`fleetlab capture`), with its summary: what a developer reads first,
 * and what `fleetlab bundle show` reads again later.
 */
async function attachCapture(device: DeviceUnderTest, testInfo: TestInfo): Promise<void> {
  const out = testInfo.outputPath('device-capture.tar.gz');
  try {
    // A test device's volumes hold test data: the bundle restores them in a replay.
    await captureTestDevice(device, out, { journalEntries: CAPTURE_JOURNAL_ENTRIES, volumeBytes: CAPTURE_VOLUME_BYTES });
  } catch (err) {
    await testInfo.attach('device capture', { body: `(could not capture the device: ${errorText(err)})`, contentType: 'text/plain' });
    return;
  }
  await testInfo.attach('device capture', { path: out, contentType: 'application/gzip' });
  await testInfo.attach('device capture summary', { body: showBundle(await readBundle(out)), contentType: 'text/plain' });
}
