/**
 * Steps as events (labgrid `step.py`): every call a spec makes on a device protocol emits a
 * start and a stop event with its arguments, a short result or the error, and the duration.
 * The fixture subscribes for the length of one test and attaches the timeline to its report.
 */
import { EventEmitter } from 'node:events';
import type { DeviceUnderTest } from '../../device-access/protocols.js';

export interface StepStart {
  readonly kind: 'start';
  readonly id: number;
  readonly protocol: string;
  readonly action: string;
  readonly args: unknown;
  /** Epoch ms. */
  readonly at: number;
}

export interface StepStop {
  readonly kind: 'stop';
  readonly id: number;
  readonly protocol: string;
  readonly action: string;
  readonly at: number;
  readonly durationMs: number;
  readonly result?: unknown;
  readonly error?: string;
}

export type StepEvent = StepStart | StepStop;

/** Emits `step` events; one per device, shared by every test that uses the device. */
export class StepEmitter extends EventEmitter<{ step: [StepEvent] }> {
  #next = 1;

  async run<T>(protocol: string, action: string, args: unknown, fn: () => Promise<T>, summarize: (result: T) => unknown = brief): Promise<T> {
    const id = this.#next++;
    const started = Date.now();
    this.emit('step', { kind: 'start', id, protocol, action, args, at: started });
    try {
      const result = await fn();
      this.emit('step', { kind: 'stop', id, protocol, action, at: Date.now(), durationMs: Date.now() - started, result: summarize(result) });
      return result;
    } catch (err) {
      this.emit('step', { kind: 'stop', id, protocol, action, at: Date.now(), durationMs: Date.now() - started, error: err instanceof Error ? err.message : String(err) });
      throw err;
    }
  }
}

/** Collects the events of one test. */
export class StepRecorder {
  readonly events: StepEvent[] = [];
  readonly #listener = (e: StepEvent) => void this.events.push(e);

  constructor(private readonly emitter: StepEmitter) {
    emitter.on('step', this.#listener);
  }

  stop(): void {
    this.emitter.off('step', this.#listener);
  }

  /** One line per finished step, offsets from `origin` (ms), slowest-first hints left to the reader. */
  timeline(origin: number): string {
    const starts = new Map(this.events.filter((e): e is StepStart => e.kind === 'start').map((e) => [e.id, e]));
    const done = new Set<number>();
    const lines: string[] = [];
    for (const e of this.events) {
      if (e.kind !== 'stop') continue;
      done.add(e.id);
      const start = starts.get(e.id);
      const outcome = e.error !== undefined ? `ERROR ${e.error}` : `-> ${short(e.result)}`;
      lines.push(`+${String((start?.at ?? e.at) - origin).padStart(7)} ms ${String(e.durationMs).padStart(6)} ms  ${e.protocol}.${e.action}(${short(start?.args)}) ${outcome}`);
    }
    for (const [id, s] of starts) if (!done.has(id)) lines.push(`+${String(s.at - origin).padStart(7)} ms   open     ${s.protocol}.${s.action}(${short(s.args)}) (never finished)`);
    return lines.join('\n') + '\n';
  }
}

function short(value: unknown): string {
  if (value === undefined) return '';
  // Keys are shown by their first characters only: reports get shared.
  const text = typeof value === 'string' ? value : JSON.stringify(value, (k, v) => ((k === 'key' || k === 'apikey') && typeof v === 'string' ? `${v.slice(0, 4)}…` : v));
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}

function brief(result: unknown): unknown {
  if (result === undefined || result === null) return result;
  if (typeof result === 'string') return result.length > 200 ? `${result.slice(0, 200)}…` : result;
  if (Array.isArray(result)) return { items: result.length };
  return result;
}

type Fn = (...args: never[]) => Promise<unknown>;

/** Wraps every async method of `target` so each call is a step of `protocol`. */
function instrumentProtocol<P extends object>(protocol: string, target: P, steps: StepEmitter, summaries: Record<string, (r: never) => unknown> = {}): P {
  return new Proxy(target, {
    get(obj, prop, receiver) {
      const value = Reflect.get(obj, prop, receiver);
      if (typeof value !== 'function' || typeof prop !== 'string') return value;
      return (...args: unknown[]) => {
        const call = () => (value as Fn).apply(obj, args as never[]);
        const result = call();
        if (!(result instanceof Promise)) return result;
        // Already running: the step observes it rather than starting it a second time.
        return steps.run(protocol, prop, args.length <= 1 ? args[0] : args, () => result, (summaries[prop] as ((r: unknown) => unknown) | undefined) ?? brief);
      };
    },
  });
}

/** The device with every protocol call reported to `steps`. */
export function instrumentDevice(device: DeviceUnderTest, steps: StepEmitter): DeviceUnderTest {
  const wrapped: Partial<Record<keyof DeviceUnderTest, unknown>> = {};
  wrapped.api = instrumentProtocol('api', device.api, steps, {
    request: (r: { status: number; text: string }) => ({ status: r.status, body: r.text.length > 160 ? `${r.text.slice(0, 160)}…` : r.text }),
  });
  if (device.exec) wrapped.exec = instrumentProtocol('exec', device.exec, steps, { run: (r: { exitCode: number }) => ({ exitCode: r.exitCode }) });
  if (device.led) wrapped.led = instrumentProtocol('led', device.led, steps, { transitions: (r: readonly unknown[]) => ({ transitions: r.length }) });
  if (device.power) wrapped.power = instrumentProtocol('power', device.power, steps);
  if (device.network) wrapped.network = instrumentProtocol('network', device.network, steps);
  if (device.supervisor) wrapped.supervisor = instrumentProtocol('supervisor', device.supervisor, steps);
  if (device.journal) wrapped.journal = instrumentProtocol('journal', device.journal, steps, { entries: (r: readonly unknown[]) => ({ entries: r.length }) });
  if (device.files) wrapped.files = instrumentProtocol('files', device.files, steps, { read: (r: Buffer) => ({ bytes: r.length }) });
  return new Proxy(device, {
    get(obj, prop, receiver) {
      if (typeof prop === 'string' && prop in wrapped) return wrapped[prop as keyof DeviceUnderTest];
      const value = Reflect.get(obj, prop, receiver);
      return typeof value === 'function' ? value.bind(obj) : value;
    },
  });
}
