/**
 * Processes a run started, found again and stopped by their identity rather than by name: a
 * pid with its start time (a pid alone may belong to someone else by the time it is read
 * again), and a session label in the environment, which every descendant inherits, so the
 * programs a run started (and the programs they started) can be found after the run itself
 * was killed with -9, as testcontainers finds its containers by their session label.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { until } from './wait.js';
import { findTool, tools } from './tools.js';

/** The environment variable that labels a process with the session that started it. */
export const SESSION_VARIABLE = 'FLEETLAB_SESSION';

const STOP_MS = 20_000;
const KILLED_MS = 5_000;
const POLL_MS = 100;

/**
 * The command line that runs `binary args` so that the kernel sends it `signal` when the
 * process starting it ends, however that ends (kill -9 too): util-linux's `setpriv
 * --pdeathsig`, which sets the signal and execs the program (the same pid, so the caller's
 * child is the program). Whatever a process starts then stops with it, even when nothing of it
 * runs to stop it. Without setpriv, the program as it is: the next run's reaper stops it.
 */
export function stoppedWithParent(binary: string, args: readonly string[], signal: NodeJS.Signals = 'SIGTERM'): [string, string[]] {
  const setpriv = findTool(tools.setpriv);
  return setpriv ? [setpriv, ['--pdeathsig', signal, '--', binary, ...args]] : [binary, [...args]];
}

/** `base` (default: this process's environment) with the session label. */
export function sessionEnv(session: string, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...base, [SESSION_VARIABLE]: session };
}

/** Fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses). */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/**
 * When the process started (clock ticks since boot), which with the pid names it uniquely;
 * undefined when there is no such process or it has exited (a zombie waits only to be reaped).
 */
export function processStart(pid: number): string | undefined {
  if (!(pid > 0)) return undefined;
  const fields = statFields(pid);
  if (!fields || fields[0] === 'Z' || fields[0] === 'X') return undefined;
  return fields[19];
}

export const alive = (pid: number): boolean => processStart(pid) !== undefined;

/** The pids from `pid` up through its parents to init, while they are there to read. */
export function ancestry(pid: number): number[] {
  const chain: number[] = [];
  for (let p = pid; p > 0 && !chain.includes(p); p = Number(statFields(p)?.[1] ?? 0)) chain.push(p);
  return chain;
}

/** Whether `pid` is still the process that started at `start` (any process, without `start`). */
export function isRunning(pid: number, start?: string): boolean {
  const now = processStart(pid);
  return now !== undefined && (start === undefined || now === start);
}

/** Live processes other than this one whose environment carries `session`'s label. */
export function sessionProcesses(session: string): number[] {
  const wanted = `${SESSION_VARIABLE}=${session}`;
  const found: number[] = [];
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    let environ: string;
    try {
      environ = readFileSync(`/proc/${pid}/environ`, 'latin1');
    } catch {
      continue;
    }
    if (environ.split('\0').includes(wanted) && alive(pid)) found.push(pid);
  }
  return found;
}

async function waitGone(pids: readonly number[], ms: number, isGone: (pid: number) => boolean): Promise<number[]> {
  const left = () => pids.filter((p) => !isGone(p));
  // The pids still there at the deadline are the answer (the caller signals them harder), not an error.
  return until('processes gone', async () => left(), (l) => l.length === 0, { timeoutMs: ms, intervalMs: POLL_MS }).catch(() => left());
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // Gone meanwhile.
  }
}

/**
 * SIGTERM to each, then SIGKILL to those still there after `graceMs`; resolves once all are
 * gone (or, for one the kernel will not let go of, after a bounded wait). Returns the pids that
 * needed SIGKILL.
 */
export async function stopProcesses(pids: readonly number[], graceMs = STOP_MS, isGone: (pid: number) => boolean = (p) => !alive(p)): Promise<number[]> {
  for (const pid of pids) signal(pid, 'SIGTERM');
  const stubborn = await waitGone(pids, graceMs, isGone);
  for (const pid of stubborn) signal(pid, 'SIGKILL');
  await waitGone(stubborn, KILLED_MS, isGone);
  return stubborn;
}

/** SIGTERM, then SIGKILL after a bounded wait. */
export async function stopPid(pid: number, isGone: () => boolean = () => !alive(pid)): Promise<void> {
  await stopProcesses([pid], STOP_MS, isGone);
}

/** SIGKILL to each at once: a forced stop. */
export function killProcesses(pids: readonly number[]): void {
  for (const pid of pids) signal(pid, 'SIGKILL');
}
