/**
 * One simulated process: plays a Behaviour with timers, writes its output to the container's
 * LogBook, and reports its exit once. Signals: KILL ends it with 137; TERM ends it with 0 when
 * it traps TERM, and is ignored otherwise (as PID 1 without a handler ignores it).
 */
import type { LogBook } from './logs.js';
import type { Behaviour } from './process-model.js';

export type Signal = 'TERM' | 'KILL' | 'INT' | 'HUP' | 'USR1' | 'USR2' | 'QUIT';

export class SimProcess {
  private timers: NodeJS.Timeout[] = [];
  private exited = false;

  constructor(
    private readonly behaviour: Behaviour,
    private readonly log: LogBook,
    private readonly onExit: (code: number) => void,
  ) {}

  run(): void {
    const b = this.behaviour;
    for (const line of b.startLines) this.log.write(line.stream, line.text);
    if (b.tick) {
      let i = 0;
      const tick = b.tick;
      const write = () => this.log.write('stdout', tick.line.replace('{i}', String(++i)));
      // The test-app prints its first tick right after "started", then one per interval.
      if (b.startLines.length) write();
      const timer = setInterval(write, tick.everyMs);
      this.timers.push(timer);
    }
    if (b.exitAfterMs !== undefined) this.timers.push(setTimeout(() => this.exit(b.exitCode), b.exitAfterMs));
  }

  get running(): boolean {
    return !this.exited;
  }

  /** True when the signal ended the process. */
  signal(sig: Signal): boolean {
    if (this.exited) return false;
    if (sig === 'KILL') {
      this.exit(137);
      return true;
    }
    if ((sig === 'TERM' || sig === 'INT') && this.behaviour.trapsSigterm) {
      if (this.behaviour.stopLine) this.log.write('stdout', this.behaviour.stopLine);
      this.exit(0);
      return true;
    }
    return false;
  }

  /** Ends the process without an exit report (the engine itself is going away). */
  dispose(): void {
    this.exited = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers = [];
  }

  private exit(code: number): void {
    if (this.exited) return;
    this.dispose();
    this.onExit(code);
  }
}

export function parseSignal(raw: string | null): Signal | undefined {
  const s = (raw ?? 'KILL').toUpperCase().replace(/^SIG/, '');
  const byNumber: Record<string, Signal> = { '9': 'KILL', '15': 'TERM', '2': 'INT', '1': 'HUP', '10': 'USR1', '12': 'USR2', '3': 'QUIT' };
  if (byNumber[s]) return byNumber[s];
  return (['TERM', 'KILL', 'INT', 'HUP', 'USR1', 'USR2', 'QUIT'] as const).find((x) => x === s);
}

/** Linux's signal numbers by name, as dockerd's signal.ParseSignal knows them (RTMIN+n and RTMAX-n too). */
const LINUX_SIGNALS: Record<string, number> = {
  HUP: 1, INT: 2, QUIT: 3, ILL: 4, TRAP: 5, ABRT: 6, IOT: 6, BUS: 7, FPE: 8, KILL: 9, USR1: 10, SEGV: 11, USR2: 12, PIPE: 13, ALRM: 14, TERM: 15,
  STKFLT: 16, CHLD: 17, CONT: 18, STOP: 19, TSTP: 20, TTIN: 21, TTOU: 22, URG: 23, XCPU: 24, XFSZ: 25, VTALRM: 26, PROF: 27, WINCH: 28, IO: 29, POLL: 29,
  PWR: 30, SYS: 31, RTMIN: 34, RTMAX: 64,
};

/** The number of a signal given as a name (`SIGTERM`, `TERM`, `SIGRTMIN+3`) or a number, or undefined when it is none. */
export function signalNumberOf(raw: string): number | undefined {
  const s = raw.toUpperCase().replace(/^SIG/, '');
  if (/^[0-9]+$/.test(s)) return Number(s) >= 1 && Number(s) <= 64 ? Number(s) : undefined;
  const rt = /^RT(MIN|MAX)([+-][0-9]+)$/.exec(s);
  if (rt) {
    const n = LINUX_SIGNALS[`RT${rt[1]}`]! + Number(rt[2]);
    return n >= 34 && n <= 64 ? n : undefined;
  }
  return LINUX_SIGNALS[s];
}
