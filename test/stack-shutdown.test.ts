/**
 * `fleetlab sim stack` (npm start) stopped every way a user stops it leaves nothing behind:
 * no container, network or volume of its device on dockerd, no process, no mount, no state
 * directory. The device's volumes go too: every start is a new device, so no later run could
 * reach their data. What stays on purpose is the test images (fleetlab/test-app:1, :2), a
 * cache every start and the test suite share, imported once; and the state root itself.
 *
 * Real peers throughout: the CLI as a child process, dockerd, the processes of the device.
 * Each case first checks that the probes see the running stack's traces, so a missing
 * cleanup fails the check after the stop rather than passing unseen.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { hostNetworkContainerName } from '../sim/host-network.js';
import { NO_TRACES, commandLine, deployApp, startStackProcess, tracesOf, waitExit, waitForStderr, type StackProcess, type Traces } from './helpers/stack-process.js';

const docker = new Docker({ socketPath: process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock' });
const CASE_MS = 300_000;

let stateRoot: string;
const started: StackProcess[] = [];

beforeAll(() => {
  stateRoot = mkdtempSync(join(tmpdir(), 'fleetlab-shutdown-'));
});

afterAll(async () => {
  // A failed case must not leave its stack on the shared dockerd: only what carries its labels goes.
  for (const stack of started) {
    try {
      process.kill(-stack.pid, 'SIGKILL');
    } catch {
      // already gone
    }
    const traces = await tracesOf(stack, docker).catch(() => NO_TRACES);
    for (const p of traces.processes) {
      try {
        process.kill(Number(p.split(' ')[0]), 'SIGKILL');
      } catch {
        // already gone
      }
    }
    const filters = { label: [`io.fleetlab.device=${stack.ready.device.uuid}`] };
    for (const c of await docker.listContainers({ all: true, filters })) await docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined);
    for (const n of await docker.listNetworks({ filters })) await docker.getNetwork(n.Id).remove().catch(() => undefined);
    for (const v of (await docker.listVolumes({ filters })).Volumes ?? []) await docker.getVolume(v.Name).remove().catch(() => undefined);
  }
  rmSync(stateRoot, { recursive: true, force: true });
});

async function start(): Promise<StackProcess> {
  const stack = await startStackProcess(stateRoot);
  started.push(stack);
  return stack;
}

/** A stack with an app deployed, and the check that the probes see all of it. */
async function startWithApp(): Promise<StackProcess> {
  const stack = await start();
  await deployApp(stack.ready, docker);
  const running = await tracesOf(stack, docker);
  // The app's container and the device's host-network container (sim/host-network.ts).
  expect(running.containers).toHaveLength(2);
  expect(running.containers.some((c) => c.startsWith(`/${hostNetworkContainerName(stack.ready.device.uuid)}`))).toBe(true);
  expect(running.networks.length).toBeGreaterThanOrEqual(1);
  expect(running.volumes).toHaveLength(1);
  // The stack, the supervisor, its D-Bus daemon and journal-remote at least.
  expect(running.processes.length).toBeGreaterThanOrEqual(4);
  expect(running.processes.some((p) => p.includes(' supervisor '))).toBe(true);
  expect(running.processes.some((p) => p.includes('dbus-daemon'))).toBe(true);
  // The supervisor's simulated /sys/class, bound in its private mount namespace.
  expect(running.mounts.length).toBeGreaterThan(0);
  expect(running.runDir).toBe(true);
  return stack;
}

const runDirs = () => readdirSync(stateRoot).filter((n) => !n.startsWith('.'));

/** Nothing of `stack`'s run remains; the state root holds only the runs of `live` stacks. */
async function expectNothingLeft(stack: StackProcess, live: StackProcess[] = []): Promise<void> {
  const left: Traces = await tracesOf(stack, docker);
  expect(left, stack.stderr()).toEqual(NO_TRACES);
  expect(runDirs()).toEqual(live.map((s) => basename(s.ready.stateDir)));
}

describe('fleetlab sim stack: nothing of a run remains after its stop', () => {
  it('Ctrl-C (SIGINT to the process group): a clean stop, exit 0', { timeout: CASE_MS }, async () => {
    const stack = await startWithApp();
    process.kill(-stack.pid, 'SIGINT');
    expect(await waitExit(stack)).toBe(0);
    await expectNothingLeft(stack);
  });

  it('SIGTERM to the stack PID alone: a clean stop, exit 0', { timeout: CASE_MS }, async () => {
    const stack = await startWithApp();
    process.kill(stack.pid, 'SIGTERM');
    expect(await waitExit(stack)).toBe(0);
    await expectNothingLeft(stack);
  });

  it('one Ctrl-C delivered twice (the terminal to the group, a wrapper such as npm passing it on): one clean stop, exit 0', { timeout: CASE_MS }, async () => {
    const stack = await startWithApp();
    process.kill(-stack.pid, 'SIGINT');
    // The wrapper's copy comes once its own handler has run: the stack is already stopping.
    await waitForStderr(stack, 'stopping the stack');
    process.kill(stack.pid, 'SIGINT');
    expect(await waitExit(stack)).toBe(0);
    expect(stack.stderr()).not.toContain('forcing');
    await expectNothingLeft(stack);
  });

  it('a second Ctrl-C forces: a hung supervisor is killed at once, exit 130, and the rest is still removed', { timeout: CASE_MS }, async () => {
    const stack = await startWithApp();
    // A supervisor that does not answer its SIGTERM: the graceful stop waits on it.
    const supervisor = stack.descendants.find((p) => commandLine(p.pid).includes(' supervisor '));
    if (!supervisor) throw new Error(`no supervisor among the stack's processes: ${stack.descendants.map((p) => commandLine(p.pid)).join('; ')}`);
    process.kill(supervisor.pid, 'SIGSTOP');
    process.kill(-stack.pid, 'SIGINT');
    await waitForStderr(stack, 'stopping the stack');
    // A second press, not the first one repeated (see SAME_PRESS_MS in src/stop-signals.ts).
    await sleep(1_000);
    process.kill(-stack.pid, 'SIGINT');
    expect(await waitExit(stack)).toBe(130);
    expect(stack.stderr()).toContain('forcing');
    await expectNothingLeft(stack);
  });

  it('kill -9 of the stack: the next start reaps what it left, and its own clean stop leaves nothing', { timeout: CASE_MS }, async () => {
    const killed = await startWithApp();
    process.kill(killed.pid, 'SIGKILL');
    expect(await waitExit(killed)).toBe('SIGKILL');
    // What a kill -9 leaves: without the reaping below these would stay for good.
    const orphaned = await tracesOf(killed, docker);
    expect(orphaned.containers).toHaveLength(2);
    expect(orphaned.volumes).toHaveLength(1);
    expect(orphaned.processes.some((p) => p.includes(' supervisor '))).toBe(true);
    expect(orphaned.mounts.length).toBeGreaterThan(0);
    expect(orphaned.runDir).toBe(true);

    const next = await start();
    expect(next.stderr()).toContain(killed.ready.stateDir);
    await expectNothingLeft(killed, [next]);

    process.kill(-next.pid, 'SIGINT');
    expect(await waitExit(next)).toBe(0);
    await expectNothingLeft(next);
  });
});
