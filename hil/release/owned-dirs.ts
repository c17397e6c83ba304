/**
 * Working directories of helper programs the harness starts (the build engine's dockerd, the
 * registry), each with an owner file: the harness process and the program's pid. A run killed
 * with -9 cannot stop what it started; the next run finds the directories whose owner is gone,
 * stops the program and removes them.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { sleep } from '../lib/wait.js';

const OWNER_FILE = 'owner.json';
const STOP_MS = 20_000;

export interface Owner {
  /** The harness process; when it is gone, the directory is stale. */
  owner: number;
  /** The program started for it. */
  pid: number;
  /** Anything else to undo (the build engine's bridge). */
  bridge?: string;
}

export function writeOwner(dir: string, owner: Owner): void {
  writeFileSync(join(dir, OWNER_FILE), JSON.stringify(owner));
}

export const alive = (pid: number): boolean => {
  if (!(pid > 0)) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** SIGTERM, then SIGKILL after a bounded wait. */
export async function stopPid(pid: number, isGone: () => boolean = () => !alive(pid)): Promise<void> {
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  const deadline = Date.now() + STOP_MS;
  while (!isGone() && Date.now() < deadline) await sleep(100);
  if (isGone()) return;
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone meanwhile
  }
}

/**
 * Stops the programs of `<root>/<prefix>*` directories whose owner is gone, lets `undo` clean
 * what else they made, and removes the directories; returns those it removed.
 */
export async function reapStale(root: string, prefix: string, undo: (owner: Owner) => Promise<void> = async () => undefined): Promise<string[]> {
  const reaped: string[] = [];
  for (const name of readdirSync(root).filter((n) => n.startsWith(prefix))) {
    const dir = join(root, name);
    let owner: Owner | undefined;
    try {
      owner = JSON.parse(readFileSync(join(dir, OWNER_FILE), 'utf8')) as Owner;
    } catch {
      owner = undefined;
    }
    if (owner && alive(owner.owner)) continue;
    if (owner) {
      if (alive(owner.pid)) await stopPid(owner.pid);
      await undo(owner);
    }
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    reaped.push(dir);
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
  let child: ChildProcess;
  try {
    child = spawn(binary, args, { stdio: ['ignore', fd, fd] });
  } finally {
    closeSync(fd);
  }
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  writeOwner(dir, { owner: process.pid, pid: child.pid ?? 0, ...extra });
  return { child, exited, lastWords: () => readFileSync(logPath, 'utf8').trim().split('\n').slice(-5).join('\n') };
}
