/**
 * What the supervisor benches share about the device's supervisor process: its memory as
 * /proc shows it, the node process below a simulated device's wrappers, and the device
 * bundle of another revision to compare with. Linux only (/proc).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { errorText } from '../src/errors.js';

/** A bench's own failure: printed as its message alone, without a stack. */
export class BenchError extends Error {}

export interface Memory {
  rssKiB: number;
  hwmKiB: number;
  /** RssAnon: the process's own memory, without the mapped binary and libraries. */
  anonKiB: number;
}

export function readMemory(pid: number): Memory {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch (err) {
    throw new BenchError(`cannot read /proc/${pid}/status (${errorText(err)}): did the supervisor exit?`);
  }
  const field = (name: string): number => {
    const m = new RegExp(`^${name}:\\s+(\\d+)\\s+kB$`, 'm').exec(text);
    if (!m) throw new BenchError(`no ${name} in /proc/${pid}/status`);
    return Number(m[1]);
  };
  return { rssKiB: field('VmRSS'), hwmKiB: field('VmHWM'), anonKiB: field('RssAnon') };
}

function commOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '';
  }
}

function childrenOf(pid: number): number[] {
  const out: number[] = [];
  let tasks: string[] = [];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tasks) {
    try {
      const text = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      if (text) out.push(...text.split(/\s+/).map(Number));
    } catch {
      // kernel without CONFIG_PROC_CHILDREN, or the task went away
    }
  }
  return out;
}

/**
 * The node process that runs the supervisor. The sim spawns it through unshare and sh, which
 * both exec, so the spawned PID normally is node already; if some wrapper did not exec, look
 * for the node process below it (bounded breadth-first walk).
 */
export function supervisorNodePid(spawned: number): number {
  const queue = [spawned];
  for (let seen = 0; queue.length && seen < 64; seen++) {
    const pid = queue.shift()!;
    // Node 24 names its main thread, and so the process, MainThread.
    if (commOf(pid) === 'node' || commOf(pid) === 'MainThread') return pid;
    queue.push(...childrenOf(pid));
  }
  throw new BenchError(`no node process found at or below PID ${spawned} (comm ${commOf(spawned) || '?'})`);
}

export function mib(kib: number): number {
  return Math.round((kib / 1024) * 10) / 10;
}

/**
 * The device bundle of `rev`, built by that revision's own bundler (its device-image/payload.ts)
 * in a temporary git worktree of `repoRoot` that uses this checkout's node_modules; gives the
 * short commit.
 */
export async function bundleAtRevision(repoRoot: string, rev: string, out: string): Promise<string> {
  const commit = execFileSync('git', ['-C', repoRoot, 'rev-parse', '--short', rev], { encoding: 'utf8' }).trim();
  const tree = await mkdtemp(join(tmpdir(), 'fleetlab-bench-base-'));
  execFileSync('git', ['-C', repoRoot, 'worktree', 'add', '--detach', tree, commit], { stdio: 'ignore' });
  try {
    await symlink(join(repoRoot, 'node_modules'), join(tree, 'node_modules'));
    // The bundler moved from qemu/image/ to device-image/ (issue 40); older revisions have it at the old place.
    const bundler = [join(tree, 'device-image', 'payload.ts'), join(tree, 'qemu', 'image', 'payload.ts')].find((f) => existsSync(f))!;
    const payload = (await import(bundler)) as { bundleSupervisor(root: string, out: string): Promise<void> };
    await payload.bundleSupervisor(tree, out);
    return commit;
  } finally {
    execFileSync('git', ['-C', repoRoot, 'worktree', 'remove', '--force', tree], { stdio: 'ignore' });
    await rm(tree, { recursive: true, force: true });
  }
}
