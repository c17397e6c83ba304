/**
 * The device's app containers as its engine tells it: the Engine API's `/events` stream,
 * filtered to containers labelled with the device's uuid, followed for as long as a test runs.
 * The stream ends when the engine goes away (a simulated device's engine at a power cut, an SSH
 * forward at a board's reboot); it is opened again every second with `since` at the last event
 * seen, so what happened meanwhile is replayed, and duplicates are dropped.
 */
import Docker from 'dockerode';
import { LABEL } from '../../../src/protocol/engine-labels.js';
import type { ContainerEvent } from './build.js';

const REOPEN_MS = 1000;
/** How long stop() waits for a reopen in flight (an SSH forward to a board that is off may hang): a test's end is not held up by it. */
const STOP_WAIT_MS = 2000;
/** Actions a reader of the timeline cares about; exec_* and attach are the supervisor's own probes. */
const KEPT = /^(create|start|die|restart|destroy|kill|stop|oom|pause|unpause|health_status.*)$/;

interface RawEvent {
  Type?: string;
  Action?: string;
  Actor?: { ID?: string; Attributes?: Record<string, string> };
  timeNano?: number;
  time?: number;
}

/** An engine event as the timeline keeps it, or undefined for one it leaves out. */
export function containerEvent(e: RawEvent): ContainerEvent | undefined {
  const action = e.Action ?? '';
  if (e.Type !== 'container' || !KEPT.test(action)) return undefined;
  const attrs = e.Actor?.Attributes ?? {};
  const at = e.timeNano ? Math.floor(e.timeNano / 1e6) : (e.time ?? 0) * 1000;
  const name = attrs.name ?? attrs[LABEL.serviceName] ?? (e.Actor?.ID ?? '?').slice(0, 12);
  const exitCode = attrs.exitCode !== undefined ? Number(attrs.exitCode) : undefined;
  return { at, action: action.replace(/^health_status: /, 'health: '), name, ...(exitCode !== undefined && Number.isFinite(exitCode) ? { exitCode } : {}) };
}

export interface EngineFollower {
  stop(): Promise<void>;
}

/**
 * Follows `uuid`'s container events from `sinceMs` on; `socket` is asked again at each reopen
 * (a forward that went away is made again). `onNote` hears once why the stream is down.
 */
export function followEngineEvents(options: { socket: () => Promise<string>; uuid: string; sinceMs: number; onEvent: (e: ContainerEvent) => void; onNote: (note: string) => void }): EngineFollower {
  let stopped = false;
  let current: NodeJS.ReadableStream | undefined;
  let lastNano = options.sinceMs * 1e6;
  const seen = new Set<string>();
  let noted = false;
  let wake: () => void = () => undefined;
  const running = (async () => {
    while (!stopped) {
      try {
        const docker = new Docker({ socketPath: await options.socket() });
        const stream = (await docker.getEvents({
          since: Math.floor(lastNano / 1e9),
          filters: JSON.stringify({ type: ['container'], label: [`${LABEL.device}=${options.uuid}`] }),
        })) as NodeJS.ReadableStream;
        current = stream;
        // stop() came while the stream was opening: end it here, nobody else will.
        if (stopped) {
          (stream as { destroy?: () => void }).destroy?.();
          break;
        }
        await new Promise<void>((resolve) => {
          let partial = '';
          stream.on('data', (chunk: Buffer) => {
            const lines = (partial + chunk.toString('utf8')).split('\n');
            partial = lines.pop() ?? '';
            for (const line of lines) {
              if (!line.trim()) continue;
              let raw: RawEvent;
              try {
                raw = JSON.parse(line) as RawEvent;
              } catch {
                continue;
              }
              // `since` has a resolution of a second: a reopen replays that second.
              const key = `${raw.timeNano}:${raw.Actor?.ID}:${raw.Action}`;
              if (seen.has(key)) continue;
              if (seen.size > 5_000) seen.clear(); // bounded; a duplicate can only come from the last second
              seen.add(key);
              if (raw.timeNano) lastNano = Math.max(lastNano, raw.timeNano);
              const e = containerEvent(raw);
              if (e) options.onEvent(e);
            }
          });
          stream.on('end', resolve);
          stream.on('close', resolve);
          stream.on('error', () => resolve());
        });
      } catch (err) {
        if (!noted) options.onNote(`container events: the engine's event stream was unreachable at times (${err instanceof Error ? err.message : String(err)}); events are replayed from when it answers again`);
        noted = true;
      }
      if (!stopped) await new Promise<void>((r) => ((wake = r), setTimeout(r, REOPEN_MS)));
    }
  })();
  return {
    async stop() {
      stopped = true;
      wake();
      (current as { destroy?: () => void } | undefined)?.destroy?.();
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([running, new Promise<void>((r) => (timer = setTimeout(r, STOP_WAIT_MS)))]);
      clearTimeout(timer);
    },
  };
}
