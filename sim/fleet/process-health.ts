/**
 * How well a process that runs devices keeps up: its event loop's delay and the CPU it used
 * since the last sample. A fleet worker whose loop stalls for seconds misses its devices'
 * heartbeats and polls at once, and the cloud sees all of its devices drop together; this
 * tells that apart from the cloud being slow.
 */
import { summarize } from './latency.js';

export interface ProcessHealth {
  /** The process's range label (`1/2`), as fleet-workers.ts names its workers. */
  readonly label: string;
  readonly pid: number;
  /** User and system CPU since the last sample, in percent of one core. */
  readonly cpuPercent: number;
  /** How late a 20 ms timer came since the last sample: the most, and the 99th percentile (of the last five minutes at most). */
  readonly loopDelayP99Ms: number;
  readonly loopDelayMaxMs: number;
  readonly sinceMs: number;
}

/** How often the loop's timer ticks: a late tick is the loop's delay. */
const TICK_MS = 20;
/** Ticks kept for the percentile (five minutes' worth): a watch nobody samples stays small. */
const KEPT = 15_000;

/** Samples this process; each `sample()` covers the time since the one before. */
export class HealthWatch {
  /** How late each tick of the timer came, in ms, since the last sample. */
  private delays: number[] = [];
  private maxDelay = 0;
  private readonly timer: NodeJS.Timeout;
  private cpu = process.cpuUsage();
  private at = performance.now();

  constructor(private readonly label: string) {
    // Not perf_hooks' monitorEventLoopDelay: after its reset() it under-reads a stall (a 600 ms
    // block read as 110 ms on Node 20), and a sample must cover exactly the time since the last.
    let due = performance.now() + TICK_MS;
    this.timer = setInterval(() => {
      const now = performance.now();
      const delay = Math.max(0, now - due);
      if (this.delays.length >= KEPT) this.delays.splice(0, KEPT / 2);
      this.delays.push(delay);
      this.maxDelay = Math.max(this.maxDelay, delay);
      due = now + TICK_MS;
    }, TICK_MS);
    this.timer.unref();
  }

  sample(): ProcessHealth {
    const now = performance.now();
    const cpu = process.cpuUsage(this.cpu);
    const sinceMs = now - this.at;
    const delays = summarize(this.delays);
    const health: ProcessHealth = {
      label: this.label,
      pid: process.pid,
      cpuPercent: sinceMs > 0 ? ((cpu.user + cpu.system) / 1000 / sinceMs) * 100 : 0,
      loopDelayP99Ms: delays.count > 0 ? delays.p99Ms : 0,
      loopDelayMaxMs: this.maxDelay,
      sinceMs,
    };
    this.delays = [];
    this.maxDelay = 0;
    this.cpu = process.cpuUsage();
    this.at = now;
    return health;
  }

  close(): void {
    clearInterval(this.timer);
  }
}

/** `1/2 cpu 97% loop p99 812 ms (max 4.1 s)` for each process. */
export function describeHealth(all: readonly ProcessHealth[]): string {
  const ms = (v: number) => (v >= 1000 ? `${(v / 1000).toFixed(1)} s` : `${v.toFixed(0)} ms`);
  return all.map((h) => `${h.label} cpu ${h.cpuPercent.toFixed(0)}% loop p99 ${ms(h.loopDelayP99Ms)} (max ${ms(h.loopDelayMaxMs)})`).join(', ');
}
