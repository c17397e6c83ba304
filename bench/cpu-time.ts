/**
 * CPU time of processes, read from /proc (Linux): what each side of a bench spent, so a
 * figure says whether a server or its database was the bottleneck.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Linux reports CPU times in USER_HZ ticks, 100 a second on every mainstream build. */
const TICKS_PER_SECOND = 100;

interface Stat {
  ppid: number;
  cpuMs: number;
  /** CPU of its children that have exited and been waited for. */
  reapedChildrenMs: number;
}

function stat(pid: number): Stat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined; // gone meanwhile
  }
  // The command name may hold spaces and parentheses; fields resume after the last ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { ppid: Number(fields[1]), cpuMs: ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_SECOND, reapedChildrenMs: ((Number(fields[13]) + Number(fields[14])) * 1000) / TICKS_PER_SECOND };
}

/** User and system CPU time the process has used, in ms. */
export function processCpuMs(pid: number): number {
  return stat(pid)?.cpuMs ?? NaN;
}

/**
 * CPU time of the PostgreSQL backends serving `database`, children of `postmaster`; a
 * backend titles itself `postgres: USER DATABASE HOST ...`. A backend that exited is not
 * counted: the servers measured keep their pools' connections.
 */
export function postgresCpuMs(postmaster: number, database: string): number {
  let total = 0;
  for (const { pid, cpuMs } of childrenOf(postmaster)) {
    let title = '';
    try {
      title = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
    } catch {
      continue;
    }
    if (title.split(' ')[2] === database) total += cpuMs;
  }
  return total;
}

/** The live children of `parent`, with their CPU time. */
function* childrenOf(parent: number): Generator<{ pid: number; cpuMs: number }> {
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const s = stat(Number(name));
    if (s?.ppid === parent) yield { pid: Number(name), cpuMs: s.cpuMs };
  }
}

/**
 * CPU time of a PostgreSQL server as a whole since it started: the postmaster, its live
 * children and those that exited (a backend's time moves to its parent's account when it is
 * reaped). Never goes down, where a sum over the live backends would when one exits.
 */
export function postgresServerCpuMs(postmaster: number): number {
  const main = stat(postmaster);
  if (!main) return NaN;
  let total = main.cpuMs + main.reapedChildrenMs;
  for (const child of childrenOf(postmaster)) total += child.cpuMs;
  return total;
}
