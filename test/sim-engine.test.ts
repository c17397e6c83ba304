/**
 * What only the simulated engine has: scenario validation, the `/_sim/` control API, fault
 * injection (stall, disk full, engine restart), state kept across restarts in its data
 * directory, and `fleetlab sim engine` driven by the real docker CLI.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { createInterface } from 'node:readline';
import Docker from 'dockerode';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimEngine, validateScenario, loadScenarioFile, type SimEngineHandle } from '../sim/engine/index.js';
import { cliCommand } from '../sim/entry.js';
import { buildTestImages } from '../sim/images/test-images.js';
import { demux, engineError, eventually, pullMessages } from './helpers/engine-targets.js';

const scenariosDir = new URL('../fixtures/scenarios/', import.meta.url).pathname;

function control(socketPath: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: string }> {
  return new Promise((resolveReq, reject) => {
    const req = request({ socketPath, method, path, headers: body === undefined ? {} : { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolveReq({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

describe('scenario files', () => {
  it('every fixture under fixtures/scenarios validates', () => {
    const files = readdirSync(scenariosDir).filter((f) => f.endsWith('.json'));
    expect(files.length).toBeGreaterThanOrEqual(5);
    for (const f of files) expect(() => loadScenarioFile(join(scenariosDir, f)), f).not.toThrow();
  });

  it('names the bad field of an invalid scenario', () => {
    expect(() => validateScenario({ pulls: [{ image: 'a:1', failAfterBytes: 'lots' }] }, 'x.json')).toThrow(/^x\.json: \/pulls\/0\/failAfterBytes: /);
    expect(() => validateScenario({ containers: [{ match: {}, exitCode: 300, afterMs: 1 }] }, 'y')).toThrow(/^y: \/containers\/0\/exitCode: /);
    expect(() => validateScenario({ bandwidth: 0 }, 'z')).toThrow(/^z: \/bandwidth: /);
    expect(() => validateScenario({ pulls: [{ image: 'a:1' }] }, 'w')).toThrow(/^w: \/pulls\/0: needs failAfterBytes or stallAfterBytes/);
    expect(() => validateScenario({ diskfull: true }, 'v')).toThrow(/^v: .*diskfull|^v: \/: Unexpected property/i);
  });
});

describe('simulated engine', () => {
  let dir: string;
  let engine: SimEngineHandle;
  let docker: Docker;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-sim-engine-'));
    engine = await startSimEngine({ socketPath: join(dir, 'engine.sock'), dataDir: join(dir, 'data'), bandwidth: 4_000_000 });
    docker = new Docker({ socketPath: engine.socketPath });
  });
  afterAll(async () => {
    await engine?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('control API: state, validation errors name the field, disk full', async () => {
    const state = JSON.parse((await control(engine.socketPath, 'GET', '/_sim/state')).body);
    expect(state.registry).toEqual(expect.arrayContaining(['fleetlab/test-app:1', 'fleetlab/test-app:2', 'busybox:latest']));
    expect(state.bandwidth).toBe(4_000_000);
    const bad = await control(engine.socketPath, 'POST', '/_sim/faults/pull', { image: 'busybox:latest', failAfterBytes: -1 });
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body).message).toMatch(/\/pulls\/0\/failAfterBytes/);
    expect((await control(engine.socketPath, 'PUT', '/_sim/disk', { full: true })).status).toBe(204);
    const full = await engineError(docker.createVolume({ Name: 'fills-disk' }));
    expect(full.statusCode).toBe(500);
    expect(full.message).toMatch(/^create fills-disk: mkdir .*: no space left on device$/);
    expect((await control(engine.socketPath, 'PUT', '/_sim/disk', { full: false })).status).toBe(204);
    expect((await docker.getVolume((await docker.createVolume({ Name: 'fits' })).name).inspect()).Name).toBe('fits');
  });

  it('a stalled pull makes no progress until the fault is cleared, then completes', async () => {
    await control(engine.socketPath, 'POST', '/_sim/faults/pull', { image: 'fleetlab/test-app:2', stallAfterBytes: 500_000 });
    const stream = (await docker.pull('fleetlab/test-app:2')) as Readable;
    const seen: Array<Record<string, unknown>> = [];
    const done = new Promise<void>((r) => docker.modem.followProgress(stream, () => r(), (m: Record<string, unknown>) => seen.push(m)));
    const downloaded = () => seen.filter((m) => m.status === 'Downloading').reduce((max, m) => Math.max(max, (m.progressDetail as { current: number }).current), 0);
    await eventually(async () => (downloaded() > 0 ? true : undefined), 5_000, 'download starts');
    await new Promise((r) => setTimeout(r, 1000));
    const stalledAt = seen.length;
    await new Promise((r) => setTimeout(r, 1000));
    // Nothing new while stalled (no byte moved past the limit).
    expect(seen.length).toBe(stalledAt);
    expect(seen.some((m) => String(m.status).startsWith('Status:'))).toBe(false);
    expect((await control(engine.socketPath, 'DELETE', '/_sim/faults')).status).toBe(204);
    await done;
    expect(seen.at(-1)).toEqual({ status: 'Status: Downloaded newer image for fleetlab/test-app:2' });
  });

  it('keeps images, containers, volumes, networks and logs across an engine restart; restart policies decide what runs', async () => {
    await pullMessages(docker, 'fleetlab/test-app:1');
    const net = await docker.createNetwork({ Name: 'keepnet', Labels: { keep: '1' } });
    // A check that passes at once, so each is healthy before the restart.
    const Healthcheck = { Test: ['CMD', 'true'], Interval: 100e6 };
    const always = await docker.createContainer({ Image: 'fleetlab/test-app:1', name: 'keep-always', Labels: { keep: '1' }, Healthcheck, HostConfig: { Binds: ['keepvol:/data'], RestartPolicy: { Name: 'always' }, NetworkMode: 'keepnet' } } as Docker.ContainerCreateOptions);
    const never = await docker.createContainer({ Image: 'fleetlab/test-app:1', name: 'keep-never', Labels: { keep: '1' }, Healthcheck } as Docker.ContainerCreateOptions);
    await always.start();
    await never.start();
    writeFileSync(join((await docker.getVolume('keepvol').inspect()).Mountpoint, 'kept'), 'yes');
    await eventually(async () => (demux((await always.logs({ stdout: true, follow: false })) as unknown as Buffer).length >= 2 ? true : undefined), 5_000, 'logs');
    await eventually(async () => ((await never.inspect()).State.Health?.Status === 'healthy' ? true : undefined), 5_000, 'healthy before the restart');
    const events = (await docker.getEvents()) as unknown as Readable;
    const eventsEnded = new Promise<void>((r) => {
      events.on('close', () => r());
      events.on('error', () => r());
      events.on('end', () => r());
    });
    const res = await control(engine.socketPath, 'POST', '/_sim/engine/restart', { downMs: 300 });
    expect(res.status).toBe(202);
    // Connections drop, as when dockerd goes away.
    await eventsEnded;
    await engine.restarted();
    expect(JSON.parse(readFileSync(join(engine.dataDir, 'state.json'), 'utf8')).containers.length).toBeGreaterThanOrEqual(2);
    const a = await always.inspect();
    expect(a.State.Running).toBe(true);
    expect(a.Mounts[0]!.Name).toBe('keepvol');
    expect(a.NetworkSettings.Networks.keepnet?.NetworkID).toBe(net.id);
    const nv = await never.inspect();
    // SIGTERM at shutdown: the test-app traps it and exits 0; policy "no" leaves it stopped.
    expect(nv.State).toMatchObject({ Running: false, Status: 'exited', ExitCode: 0 });
    // Stopped with the engine, its health is left unhealthy, as a stop leaves it; the one started again runs its checks again.
    expect(nv.State.Health).toMatchObject({ Status: 'unhealthy', FailingStreak: 0 });
    expect(['starting', 'healthy']).toContain(a.State.Health?.Status);
    expect(existsSync(join((await docker.getVolume('keepvol').inspect()).Mountpoint, 'kept'))).toBe(true);
    const logs = demux((await never.logs({ stdout: true, follow: false })) as unknown as Buffer).map((f) => f.text);
    expect(logs).toEqual(expect.arrayContaining(['test-app v1: started\n', 'test-app v1: stopping\n']));
    expect((await docker.listImages()).some((i) => i.RepoTags?.includes('fleetlab/test-app:1'))).toBe(true);
    expect((await docker.listNetworks({ filters: { label: ['keep=1'] } })).map((n) => n.Name)).toEqual(['keepnet']);
  });
});

describe('images built and faults scheduled', () => {
  let dir: string;
  let engine: SimEngineHandle;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-sim-engine2-'));
    engine = await startSimEngine({ socketPath: join(dir, 'engine.sock'), dataDir: join(dir, 'data'), scenario: { engineRestarts: [{ afterMs: 1500, downMs: 100 }] } });
  });
  afterAll(async () => {
    await engine?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('fleetlab test-images build works against it (import with changes); the imported test-app runs and logs', async () => {
    const refs = await buildTestImages(engine.socketPath);
    expect(refs).toEqual(['fleetlab/test-app:1', 'fleetlab/test-app:2']);
    const docker = new Docker({ socketPath: engine.socketPath });
    const image = await docker.getImage('fleetlab/test-app:2').inspect();
    // Imported, not pulled: no registry digest.
    expect(image.RepoDigests).toEqual([]);
    const c = await docker.createContainer({ Image: 'fleetlab/test-app:2', name: 'built' });
    await c.start();
    const frames = await eventually(async () => {
      const f = demux((await c.logs({ stdout: true, follow: false })) as unknown as Buffer);
      return f.some((x) => x.text === 'test-app v2: tick 1\n') ? f : undefined;
    }, 5_000, 'first tick');
    expect(frames[0]).toEqual({ stream: 1, text: 'test-app v2: started\n' });
  });

  it('a scenario\'s engineRestarts restarts the engine on schedule', async () => {
    const first = engine.engine;
    await eventually(async () => (engine.engine !== first ? true : undefined), 10_000, 'engine replaced');
    await engine.restarted();
    expect((await new Docker({ socketPath: engine.socketPath }).ping()).toString()).toBe('OK');
  });
});

describe('state on disk', () => {
  it('kill -9 while changes stream in: every acknowledged change is there after a restart, the state file is whole', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-engine-kill-'));
    const socket = join(dir, 'e.sock');
    const cmd = cliCommand(['sim', 'engine', '--socket', socket, '--data-dir', join(dir, 'data')]);
    const child = spawn(cmd.file, cmd.args, { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await new Promise<void>((resolveReady, reject) => {
        const timer = setTimeout(() => reject(new Error('no ready line within 30 s')), 30_000);
        createInterface({ input: child.stdout! }).once('line', () => {
          clearTimeout(timer);
          resolveReady();
        });
      });
      const docker = new Docker({ socketPath: socket });
      const acked: string[] = [];
      const exited = new Promise((r) => child.once('exit', r));
      // Two writers in parallel, so the kill lands with writes in flight.
      const writer = async (w: number) => {
        for (let i = 0; i < 500; i++) {
          try {
            await docker.createVolume({ Name: `v${w}-${i}` });
            acked.push(`v${w}-${i}`);
          } catch {
            return;
          }
          if (acked.length === 60) child.kill('SIGKILL');
        }
      };
      await Promise.all([writer(1), writer(2)]);
      await exited;
      expect(acked.length).toBeGreaterThanOrEqual(60);
      const again = await startSimEngine({ socketPath: socket, dataDir: join(dir, 'data') });
      try {
        const names = new Set(((await new Docker({ socketPath: socket }).listVolumes()).Volumes ?? []).map((v) => v.Name));
        for (const a of acked) expect(names.has(a), a).toBe(true);
        expect(readdirSync(join(dir, 'data')).filter((f) => f.includes('.tmp-'))).toEqual([]);
      } finally {
        await again.close();
      }
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  }, 90_000);
});

describe('fleetlab sim engine with the docker CLI', () => {
  const dockerCli = ['/usr/bin/docker', '/usr/local/bin/docker'].find((p) => existsSync(p));

  it.runIf(dockerCli)('serves docker ps, images, pull, run (detached and attached --rm), logs, volume ls (needs the docker CLI)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-cli-engine-'));
    const socket = join(dir, 'e.sock');
    const cmd = cliCommand(['sim', 'engine', '--socket', socket, '--data-dir', join(dir, 'data'), '--bandwidth', '10000000']);
    const child = spawn(cmd.file, cmd.args, { stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      const lines = createInterface({ input: child.stdout! });
      const ready = await new Promise<Record<string, unknown>>((resolveReady, reject) => {
        const timer = setTimeout(() => reject(new Error('no ready line within 30 s')), 30_000);
        lines.once('line', (l) => {
          clearTimeout(timer);
          resolveReady(JSON.parse(l));
        });
        child.once('exit', (code) => reject(new Error(`exited with ${code}`)));
      });
      expect(ready).toMatchObject({ event: 'ready', socket, dockerHost: `unix://${socket}` });
      const env = { ...process.env, DOCKER_HOST: `unix://${socket}` };
      const d = (...args: string[]) => execa(dockerCli!, args, { env });
      expect((await d('ps')).stdout).toMatch(/^CONTAINER ID\s+IMAGE\s+COMMAND/);
      expect((await d('pull', 'fleetlab/test-app:1')).stdout).toMatch(/Status: Downloaded newer image for fleetlab\/test-app:1/);
      expect((await d('images')).stdout).toMatch(/fleetlab\/test-app\s+1\s+[0-9a-f]{12}/);
      const id = (await d('run', '-d', '--name', 'cli-app', '-v', 'cli-vol:/data', 'fleetlab/test-app:1')).stdout.trim();
      expect(id).toMatch(/^[0-9a-f]{64}$/);
      expect((await d('ps')).stdout).toMatch(/cli-app/);
      expect((await d('logs', 'cli-app')).stdout).toMatch(/test-app v1: started/);
      expect((await d('volume', 'ls')).stdout).toMatch(/local\s+cli-vol/);
      // Attached run: the CLI attaches (HTTP upgrade), starts, waits for removal (--rm).
      const attached = await execa(dockerCli!, ['run', '--rm', 'fleetlab/test-app:1', 'sh', '-c', 'echo attached-out; echo attached-err >&2; exit 5'], { env, reject: false, timeout: 20_000 });
      expect(attached.exitCode).toBe(5);
      expect(attached.stdout).toBe('attached-out');
      expect(attached.stderr).toBe('attached-err');
      expect((await d('ps', '-a', '--format', '{{.Image}} {{.Status}}')).stdout).not.toMatch(/Exited \(5\)/);
      await d('rm', '-f', 'cli-app');
      expect((await d('ps', '-a')).stdout).not.toMatch(/cli-app/);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      await rm(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
