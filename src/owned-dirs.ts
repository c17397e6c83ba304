/**
 * Working directories of what a run starts (the harness's build engine and registry, the sim
 * stack's device and cloud), each with an owner file naming the run's process and what it
 * started. A run killed with -9 cannot stop what it started; the next run finds the
 * directories whose owner is gone, stops their programs and removes them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { isRunning, processStart, sessionProcesses, stopPid, stopProcesses, stoppedWithParent } from './processes.js';

const OWNER_FILE = 'owner.json';

export interface Owner {
  /** The run's process; when it is gone, the directory is stale. */
  owner: number;
  /** Its start time (see processes.ts), so a pid reused since does not pass for the owner. */
  ownerStart?: string;
  /** A program started for it. */
  pid?: number;
  pidStart?: string;
  /** The label every process the run started carries (see processes.ts). */
  session?: string;
  /** Anything else to undo (the build engine's bridge). */
  bridge?: string;
}

/** This process as an owner, with what else to record. */
export function ownerRecord(extra: Omit<Owner, 'owner' | 'ownerStart'> = {}): Owner {
  const ownerStart = processStart(process.pid);
  return { owner: process.pid, ...(ownerStart ? { ownerStart } : {}), ...extra };
}

export function writeOwner(dir: string, owner: Owner): void {
  writeFileSync(join(dir, OWNER_FILE), JSON.stringify(owner));
}

export function readOwner(dir: string): Owner | undefined {
  try {
    return JSON.parse(readFileSync(join(dir, OWNER_FILE), 'utf8')) as Owner;
  } catch {
    return undefined;
  }
}

/**
 * Stops the programs of `<root>/<prefix>*` directories whose recorded owner is gone (its recorded
 * program, then every process carrying its session label), lets `undo` clean what else they
 * made, and removes the directories; returns those it removed.
 */
export async function reapStale(root: string, prefix: string, undo: (owner: Owner, dir: string) => Promise<void> = async () => undefined): Promise<string[]> {
  const reaped: string[] = [];
  let names: string[];
  try {
    names = readdirSync(root).filter((n) => n.startsWith(prefix));
  } catch {
    return reaped;
  }
  for (const name of names) {
    const dir = join(root, name);
    const owner = readOwner(dir);
    // No owner file: not provably a run's (another tool's or a test's directory with the same
    // prefix, or a run between making it and writing its owner); left alone.
    if (!owner || isRunning(owner.owner, owner.ownerStart)) continue;
    if (owner.pid && isRunning(owner.pid, owner.pidStart)) await stopPid(owner.pid);
    if (owner.session) await stopProcesses(sessionProcesses(owner.session));
    await undo(owner, dir);
    // One that cannot be removed (something still mounted in it) is not reaped: the next run tries again.
    if (await rm(dir, { recursive: true, force: true }).then(() => true, () => false)) reaped.push(dir);
  }
  return reaped;
}

export interface OwnedProgram {
  readonly child: ChildProcess;
  /** Settles when the program has exited. */
  readonly exited: Promise<void>;
  /** The last lines of its log, for an error that says why it did not start. */
  lastWords(): string;
}

/** Starts `binary` with its output appended to `logPath` and records it as `dir`'s program (with `extra` to undo). */
export function spawnOwned(dir: string, binary: string, args: readonly string[], logPath: string, extra: Pick<Owner, 'bridge'> = {}): OwnedProgram {
  const fd = openSync(logPath, 'a');
  // Its temporary files too (containerd dumps its stacks there when a stop is slow): whatever
  // the program leaves goes with the directory, not into the temp dir of whoever started it.
  const tmp = join(dir, 'tmp');
  mkdirSync(tmp, { recursive: true });
  let child: ChildProcess;
  try {
    // It ends with this process, even one killed with -9; the directory is the next run's to remove.
    child = spawn(...stoppedWithParent(binary, args), { stdio: ['ignore', fd, fd], env: { ...process.env, TMPDIR: tmp } });
  } finally {
    closeSync(fd);
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const pid = child.pid ?? 0;
  const pidStart = processStart(pid);
  writeOwner(dir, ownerRecord({ pid, ...(pidStart ? { pidStart } : {}), ...extra }));
  return { child, exited, lastWords: () => readFileSync(logPath, 'utf8').trim().split('\n').slice(-5).join('\n') };
}
