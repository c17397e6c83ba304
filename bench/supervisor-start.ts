/**
 * Supervisor start-up, process spawn to the first `/ping` 200, for several ways of running
 * it (the device bundle, the CLI from dist/) measured in alternating rounds so a noisy
 * moment of the machine falls on each alike. Each start is a fresh local-mode device on the
 * real dockerd, with its own data directory, stopped with SIGTERM before the next one.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitForPing } from '../qemu/boot.js';
import { freePort } from '../src/free-port.js';

export interface StartCandidate {
  name: string;
  node: string;
  nodeArgs?: readonly string[];
  /** The module that takes the CLI's `supervisor` command. */
  module: string;
  /** Environment beside this process's (a device's compile cache). */
  env?: Readonly<Record<string, string>>;
}

const READY_BOUND_MS = 60_000;
const PING_EVERY_MS = 2;
const EXIT_BOUND_MS = 10_000;

/** `supervisor` arguments for a local-mode device on 127.0.0.1:`port`, its files all under `dir`. */
export function localSupervisorArgs(port: number, dir: string, dockerSocket: string): string[] {
  return ['supervisor', '--port', String(port), '--listen-address', '127.0.0.1', '--data-dir', join(dir, 'data'), '--local-mode', '--lock-root', join(dir, 'locks'), '--journal-directory', dir, '--docker-socket', dockerSocket, '--log-level', 'warn'];
}

async function startOnce(candidate: StartCandidate, dockerSocket: string): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-bench-start-'));
  const port = await freePort();
  const args = [...(candidate.nodeArgs ?? []), candidate.module, ...localSupervisorArgs(port, dir, dockerSocket)];
  const t0 = performance.now();
  const child = spawn(candidate.node, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...candidate.env } });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    const gone = () => (child.exitCode === null ? undefined : `${candidate.name} exited with ${child.exitCode} before answering /ping: ${stderr.trim()}`);
    await waitForPing(`http://127.0.0.1:${port}`, READY_BOUND_MS, gone, PING_EVERY_MS);
    return performance.now() - t0;
  } finally {
    child.kill('SIGTERM');
    await Promise.race([exited, sleep(EXIT_BOUND_MS)]);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
}

/** Start times in ms per candidate name, `rounds` each, the order reversed every round. */
export async function measureStarts(candidates: readonly StartCandidate[], rounds: number, dockerSocket: string, progress: (line: string) => void): Promise<Map<string, number[]>> {
  const times = new Map(candidates.map((c) => [c.name, [] as number[]]));
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 ? [...candidates].reverse() : candidates;
    for (const c of order) {
      const ms = await startOnce(c, dockerSocket);
      times.get(c.name)!.push(ms);
      progress(`start round ${round + 1}/${rounds}: ${c.name} ${ms.toFixed(0)} ms`);
    }
  }
  return times;
}
