/**
 * Records one test's device timeline while it runs: the harness's steps, the app's container
 * events, the supervisor's state and its CPU and RSS once a second, each into a bounded ring.
 * What the device keeps itself (the LED's transitions, the journal, the serial console) is read
 * once at the end, and only for a test whose page is attached, so a green test pays for the
 * live part alone. bench/timeline.bench.ts measures what that costs a suite.
 */
import type { DeviceUnderTest } from '../../device-access/protocols.js';
import type { StepEmitter, StepEvent } from '../lib/steps.js';
import { buildTimeline, type ContainerEvent, type StateSample, type TextLine, type UsageSample } from '../lib/timeline/build.js';
import { followEngineEvents, type EngineFollower } from '../lib/timeline/engine-events.js';
import { LIMITS, Ring, type Timeline } from '../lib/timeline/model.js';

const SAMPLE_MS = 1000;
const STATE_TIMEOUT_MS = 2000;

interface StatusBody {
  status?: string;
  appState?: string;
  overallDownloadProgress?: number | null;
}

export class TimelineRecorder {
  readonly #steps = new Ring<StepEvent>(LIMITS.steps * 2);
  readonly #containers = new Ring<ContainerEvent>(LIMITS.containerEvents);
  readonly #states = new Ring<StateSample>(LIMITS.stateChanges);
  readonly #usage = new Ring<UsageSample>(LIMITS.samples);
  readonly #notes = new Set<string>();
  readonly #listener = (e: StepEvent) => this.#steps.push(e);
  #events: EngineFollower | undefined;
  #timer: NodeJS.Timeout | undefined;
  #sampling = false;
  #lastState = '';
  #lastUsage: { at: number; cpuSeconds: number } | undefined;
  #stopped = false;

  constructor(
    private readonly device: DeviceUnderTest,
    private readonly steps: StepEmitter,
    readonly origin: number,
    /** How much slower than the simulator the target is: the state poll is that much rarer. */
    private readonly timeScale = 1,
  ) {}

  start(): this {
    this.steps.on('step', this.#listener);
    const observe = this.device.observe;
    for (const m of observe?.missing ?? []) this.#notes.add(m);
    if (!observe) this.#notes.add(`target ${this.device.target} observes nothing beyond the harness's steps`);
    const socket = observe?.engineSocket;
    if (socket) {
      this.#events = followEngineEvents({
        socket: () => socket.call(observe),
        uuid: this.device.api.identity.uuid,
        sinceMs: this.origin,
        onEvent: (e) => this.#containers.push(e),
        onNote: (n) => this.#notes.add(n),
      });
    }
    this.#timer = setInterval(() => void this.#sample(), SAMPLE_MS);
    // A sampler must never keep a finished worker alive.
    this.#timer.unref();
    void this.#sample();
    return this;
  }

  /** One round: every second the usage, every `timeScale` seconds the state; skipped while the last one runs. */
  async #sample(): Promise<void> {
    if (this.#sampling || this.#stopped) return;
    this.#sampling = true;
    try {
      const at = Date.now();
      await Promise.all([this.#sampleUsage(at), Math.round((at - this.origin) / SAMPLE_MS) % Math.max(1, Math.round(this.timeScale)) === 0 ? this.#sampleState(at) : undefined]);
    } finally {
      this.#sampling = false;
    }
  }

  async #sampleUsage(at: number): Promise<void> {
    const read = this.device.observe?.supervisorUsage;
    if (!read) return;
    const usage = await read.call(this.device.observe).catch(() => undefined);
    if (!usage) return void (this.#lastUsage = undefined);
    const before = this.#lastUsage;
    const cpuPercent = before && at > before.at && usage.cpuSeconds >= before.cpuSeconds ? ((usage.cpuSeconds - before.cpuSeconds) * 1000 * 100) / (at - before.at) : undefined;
    this.#lastUsage = { at, cpuSeconds: usage.cpuSeconds };
    this.#usage.push({ at, rssBytes: usage.rssBytes, ...(cpuPercent !== undefined ? { cpuPercent } : {}) });
  }

  async #sampleState(at: number): Promise<void> {
    let sample: StateSample;
    try {
      // The raw protocol, not the instrumented one: the recording is not one of the test's steps.
      const res = await this.device.api.request('GET', '/v2/state/status', { timeoutMs: STATE_TIMEOUT_MS });
      const body = res.status === 200 ? res.json<StatusBody>() : {};
      const locks = this.device.observe?.heldLocks ? await this.device.observe.heldLocks().catch(() => undefined) : undefined;
      sample = { at, ...(body.status ? { status: body.status } : {}), ...(body.appState ? { appState: body.appState } : {}), download: body.overallDownloadProgress ?? null, ...(locks ? { locks } : {}) };
    } catch (err) {
      sample = { at, unreachable: err instanceof Error ? err.message : String(err) };
    }
    // Only changes are kept: a quiet device costs one entry, not one a second.
    const key = JSON.stringify({ ...sample, at: 0, unreachable: sample.unreachable !== undefined });
    if (key === this.#lastState) return;
    this.#lastState = key;
    this.#states.push(sample);
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.steps.off('step', this.#listener);
    clearInterval(this.#timer);
    await this.#events?.stop();
  }

  /**
   * The timeline, with what the device kept itself read now: the LED's transitions, the
   * journal and the serial console since the test started. Call after `stop()`.
   */
  async timeline(test: { title: string; end: number; failure?: { at: number; error: string } }): Promise<Timeline> {
    const device = this.device;
    const notes = this.#notes;
    const read = async <T>(what: string, fn: () => Promise<T>): Promise<T | undefined> => {
      try {
        return await fn();
      } catch (err) {
        notes.add(`${what}: could not be read (${err instanceof Error ? err.message : String(err)})`);
        return undefined;
      }
    };
    const led = device.led
      ? await read('LED', async () => {
          const all = await device.led!.transitions(0);
          const before = all.filter((t) => t.at < this.origin).at(-1);
          return { line: device.led!.line, initial: before?.value ?? 0, transitions: all.filter((t) => t.at >= this.origin && t.at <= test.end) };
        })
      : undefined;
    const journal = device.journal
      ? await read('journal', async () =>
          (await device.journal!.entries({ lines: LIMITS.lines }))
            .map((e): TextLine => ({ at: Math.floor(e.realtimeUs / 1000), text: `${e.unit ?? '-'}: ${e.message}` }))
            .filter((l) => l.at >= this.origin),
        )
      : undefined;
    const consoleLines = device.observe?.consoleLines;
    const serial = consoleLines ? await read('serial console', () => consoleLines.call(device.observe, this.origin)) : undefined;
    const target = `target ${device.target}`;
    const cannotReadUsage = `${target} cannot read the supervisor's /proc`;
    const absent = {
      ...(device.led ? {} : { led: `${target} has no LED observer` }),
      ...(device.observe?.engineSocket ? {} : { containers: `${target} gives no way to its engine's events` }),
      ...(device.journal ? {} : { journal: `${target} has no journal` }),
      ...(consoleLines ? {} : { serial: `${target} has no serial console${device.target === 'board' ? ' configured' : ''}` }),
      ...(device.observe?.supervisorUsage ? {} : { cpu: cannotReadUsage, rss: cannotReadUsage }),
    };
    const steps = this.#steps.toArray();
    return buildTimeline({
      title: test.title,
      subject: `target ${device.target}, device ${device.api.identity.uuid.slice(0, 7)}`,
      origin: this.origin,
      end: test.end,
      ...(test.failure ? { failure: test.failure } : {}),
      steps,
      stepsDropped: Math.ceil(this.#steps.dropped / 2),
      ...(led ? { led } : {}),
      ...(device.observe?.engineSocket ? { containers: { events: this.#containers.toArray(), dropped: this.#containers.dropped } } : {}),
      states: { samples: this.#states.toArray(), dropped: this.#states.dropped },
      ...(journal ? { journal } : {}),
      ...(serial ? { serial: [...serial] } : {}),
      ...(device.observe?.supervisorUsage ? { usage: { samples: this.#usage.toArray(), dropped: this.#usage.dropped } } : {}),
      notes: [...notes],
      absent,
    });
  }
}
