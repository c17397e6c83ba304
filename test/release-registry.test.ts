/**
 * The release path of a device that pulls (qemu, board), on real programs: a team's Dockerfile
 * built for arm64 in the private build engine (a second dockerd, RUN steps through qemu-user),
 * pushed to Debian's Distribution registry on loopback, and pulled from there by another engine
 * (the host's dockerd stands in for the board's here; the qemu target's run pulls on the board).
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCompose, parseCompose } from '../hil/release/compose.js';
import { buildRelease, localTargetState } from '../hil/release/release.js';
import { pushRelease, registryRef, repositoryComponent } from '../hil/release/push.js';
import { reapStaleBuildEngines, startBuildEngine, type BuildEngine } from '../hil/release/build-engine.js';
import { registryConfig, startRegistry, type Registry } from '../hil/release/registry.js';
import { reapStale } from '../src/owned-dirs.js';
import { alive } from '../src/processes.js';
import { pollUntil } from '../hil/lib/wait.js';
import { ensureTestImages } from '../sim/images/test-images.js';

const hostSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
const hostDocker = new Docker({ socketPath: hostSocket });
let dir: string;
let registry: Registry;
let engine: BuildEngine;
const pulledByHost: string[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-registry-test-'));
  registry = await startRegistry({ dir: join(dir, 'registry') });
  engine = await startBuildEngine();
}, 180_000);

afterAll(async () => {
  for (const ref of pulledByHost) await hostDocker.getImage(ref).remove({ force: true }).catch(() => undefined);
  await engine?.close();
  await registry?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('names', () => {
  it('makes registry references from project, service and image id', () => {
    expect(registryRef('127.0.0.1:5000', 'Device App', 'web_1', 'sha256:0123456789abcdef0123')).toBe('127.0.0.1:5000/device-app/web_1:0123456789abcdef');
    expect(repositoryComponent('--x..Y--')).toBe('x-y');
    expect(repositoryComponent('***')).toBe('app');
  });

  it('configures the registry on loopback only, storing where it is told', () => {
    const config = registryConfig({ storageDir: '/s', port: 5001 });
    expect(config).toContain('addr: 127.0.0.1:5001');
    expect(config).toContain('rootdirectory: "/s"');
  });
});

describe('a team release for an arm64 board', () => {
  it('builds for arm64, pushes to the registry, and another engine pulls it from there', async () => {
    const app = join(dir, 'app');
    mkdirSync(join(app, 'probe'), { recursive: true });
    writeFileSync(join(app, 'probe', 'Dockerfile'), 'FROM fleetlab/busybox:latest\nRUN uname -m > /arch\nCMD ["cat", "/arch"]\n');
    writeFileSync(join(app, 'compose.yaml'), 'name: Pi App\nservices:\n  probe:\n    build: ./probe\n');
    const project = loadCompose(app);
    const builder = new Docker({ socketPath: engine.socketPath });

    const built = await buildRelease(project, { docker: builder });
    const inspected = await builder.getImage(built.images.probe!).inspect();
    expect(inspected.Architecture).toBe('arm64');
    // The RUN step ran an arm64 program (through qemu-user): its output is in the image.
    const run = await builder.createContainer({ Image: built.images.probe!, HostConfig: { NetworkMode: 'none' } });
    await run.start();
    await run.wait();
    const out = (await run.logs({ stdout: true })).toString('latin1');
    await run.remove();
    expect(out).toContain('aarch64');

    const lines: string[] = [];
    const pushed = await pushRelease(built, { docker: builder, registry: registry.host, log: (l) => lines.push(l) });
    const ref = pushed.images.probe!;
    expect(ref).toBe(registryRef(registry.host, 'Pi App', 'probe', built.imageIds.probe!));
    expect(pushed.commit).toBe(built.commit);
    expect(lines).toEqual([`[probe] pushed ${ref}`]);

    const stream = await hostDocker.pull(ref);
    await new Promise<void>((resolve, reject) => hostDocker.modem.followProgress(stream, (err: Error | null) => (err ? reject(err) : resolve())));
    pulledByHost.push(ref);
    expect((await hostDocker.getImage(ref).inspect()).Architecture).toBe('arm64');
    const repo = ref.slice(registry.host.length + 1, ref.lastIndexOf(':'));
    expect(registry.pulls()).toEqual([expect.stringMatching(new RegExp(`"GET /v2/${repo}/manifests/sha256:[0-9a-f]{64} HTTP/1\\.1" 200 `))]);
  }, 300_000);

  it("an image: this machine's dockerd has for arm64 is copied into the build engine and pushed from there", async () => {
    const builder = new Docker({ socketPath: engine.socketPath });
    // A team's arm64 image, loaded into this machine's dockerd (docker load) under its own name.
    const name = `fleetlab-test/adopted-${process.pid}`;
    await builder.getImage('fleetlab/busybox:latest').tag({ repo: name, tag: '1' });
    await new Promise<void>(async (resolve, reject) => {
      const archive = await builder.getImage(`${name}:1`).get();
      hostDocker.modem.followProgress(await hostDocker.loadImage(archive), (err: Error | null) => (err ? reject(err) : resolve()));
    });
    pulledByHost.push(`${name}:1`);
    await builder.getImage(`${name}:1`).remove();
    const hostId = (await hostDocker.getImage(`${name}:1`).inspect()).Id;

    const project = parseCompose(`services:\n  tool:\n    image: ${name}:1\n`, join(dir, 'compose.yaml'));
    const lines: string[] = [];
    const built = await buildRelease(project, { docker: builder, devicePulls: true, imageSource: { docker: hostDocker, architecture: 'arm64' }, progress: (e) => e.summary && lines.push(`[${e.service}] ${e.line}`) });
    expect(lines).toEqual([`[tool] copied ${name}:1 from this machine's dockerd`]);
    expect(built.imageIds.tool).toBe(hostId);
    expect(built.pulledAsNamed).toEqual([]);
    const pushed = await pushRelease(built, { docker: builder, registry: registry.host });
    const ref = pushed.images.tool!;
    expect(ref).toBe(registryRef(registry.host, project.name, 'tool', hostId));
    const repo = ref.slice(registry.host.length + 1, ref.lastIndexOf(':'));
    const manifest = await fetch(`http://${registry.host}/v2/${repo}/manifests/${ref.slice(ref.lastIndexOf(':') + 1)}`, { headers: { accept: 'application/vnd.docker.distribution.manifest.v2+json' } });
    expect(manifest.status).toBe(200);
    expect(((await manifest.json()) as { config: { digest: string } }).config.digest).toBe(hostId);
  }, 120_000);

  it('an image: no engine here has for the device is left for the device to pull as the compose file names it', async () => {
    const builder = new Docker({ socketPath: engine.socketPath });
    // postgres:16 is nowhere here; fleetlab/test-app:1 is in this machine's dockerd, built for the host (amd64).
    await ensureTestImages(hostSocket);
    const hostArch = (await hostDocker.getImage('fleetlab/test-app:1').inspect()).Architecture;
    expect(hostArch).not.toBe('arm64');
    const project = parseCompose('services:\n  db:\n    image: postgres:16\n  app:\n    image: fleetlab/test-app:1\n', join(dir, 'compose.yaml'));
    const lines: string[] = [];
    const built = await buildRelease(project, { docker: builder, devicePulls: true, imageSource: { docker: hostDocker, architecture: 'arm64' }, progress: (e) => e.summary && lines.push(`[${e.service}] ${e.line}`) });
    expect(lines).toEqual([
      "[db] postgres:16: the device pulls it as named, from the image's own registry (it is not in this machine's dockerd)",
      `[app] fleetlab/test-app:1: the device pulls it as named, from the image's own registry (this machine's dockerd has it for ${hostArch}, not arm64)`,
    ]);
    expect(built.pulledAsNamed).toEqual(['db', 'app']);
    const pushed = await pushRelease(built, { docker: builder, registry: registry.host });
    expect(pushed.images).toEqual({ db: 'postgres:16', app: 'fleetlab/test-app:1' });
    const services = localTargetState(pushed, { appId: 1, releaseId: 1 }).apps['1']!.services;
    expect(Object.values(services).map((s) => s.image)).toEqual(['postgres:16', 'fleetlab/test-app:1']);
    // The reference is the identity: another tag is another release.
    const other = await buildRelease(parseCompose('services:\n  db:\n    image: postgres:17\n  app:\n    image: fleetlab/test-app:1\n', join(dir, 'compose.yaml')), { docker: builder, devicePulls: true });
    expect(other.commit).not.toBe(built.commit);
  });

  it('a push to a registry that is not there names the service, the reference and the registry', async () => {
    const project = parseCompose('services:\n  web:\n    image: fleetlab/busybox:latest\n', join(dir, 'compose.yaml'));
    const builder = new Docker({ socketPath: engine.socketPath });
    const built = await buildRelease(project, { docker: builder });
    await expect(pushRelease(built, { docker: builder, registry: '127.0.0.1:9' })).rejects.toThrow(
      new RegExp(`compose\\.yaml: services\\.web: pushing 127\\.0\\.0\\.1:9/${repositoryComponent(project.name)}/web:[0-9a-f]{16} to the registry at 127\\.0\\.0\\.1:9 failed`),
    );
  });
});

describe('a registry left behind', () => {
  it('by a run killed with -9 is stopped and removed by the next reap', async () => {
    const root = mkdtempSync(join(tmpdir(), 'fleetlab-reap-registry-'));
    const left = await startRegistry({ dir: join(root, 'fleetlab-registry-left') });
    // The owner file names a process that is gone, as after a kill -9 of the worker.
    const owner = JSON.parse(readFileSync(join(root, 'fleetlab-registry-left', 'owner.json'), 'utf8')) as { owner: number; pid: number };
    writeFileSync(join(root, 'fleetlab-registry-left', 'owner.json'), JSON.stringify({ ...owner, owner: 4_194_305 }));
    expect(await reapStale(root, 'fleetlab-registry-')).toEqual([join(root, 'fleetlab-registry-left')]);
    expect(await fetch(`http://${left.host}/v2/`).then(() => 'answers', () => 'gone')).toBe('gone');
    await left.close();
    rmSync(root, { recursive: true, force: true });
  });
});

describe('a build engine left behind', () => {
  it('is reaped by the next start: its dockerd stopped, its mounts undone and its directory removed', async () => {
    const root = mkdtempSync(join(tmpdir(), 'fleetlab-reap-'));
    const stale = join(root, 'fleetlab-build-engine-stale');
    mkdirSync(join(stale, 'data'), { recursive: true });
    // An owner that has exited (pid 2^22 + 1 is above Linux's pid_max) and no dockerd.
    writeFileSync(join(stale, 'owner.json'), JSON.stringify({ owner: 4_194_305, pid: 4_194_305 }));
    // What a dockerd killed with -9 leaves: its data root bind-mounted on itself, which no rm removes.
    await execa('mount', ['--bind', join(stale, 'data'), join(stale, 'data')]);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).toContain(` ${join(stale, 'data')} `);
    const live = join(root, 'fleetlab-build-engine-live');
    mkdirSync(live);
    writeFileSync(join(live, 'owner.json'), JSON.stringify({ owner: process.pid, pid: process.pid }));
    expect(await reapStaleBuildEngines(root)).toEqual([stale]);
    expect(existsSync(stale)).toBe(false);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(` ${join(stale, 'data')} `);
    expect(existsSync(live)).toBe(true);
    rmSync(root, { recursive: true, force: true });
  });

  it('killed with -9 mid-build: the next reap kills its container and shim, undoes its mounts and bridge, removes its directory', async () => {
    const left = await startBuildEngine();
    const dir = join(left.socketPath, '..');
    const builder = new Docker({ socketPath: left.socketPath });
    // A RUN step in progress is such a container: started by the engine, run by a shim of its own.
    const step = await builder.createContainer({ Image: 'fleetlab/busybox:latest', Cmd: ['sleep', '600'], HostConfig: { NetworkMode: 'none' } });
    await step.start();
    const owner = JSON.parse(readFileSync(join(dir, 'owner.json'), 'utf8')) as { owner: number; pid: number; bridge: string };
    // Running ones: a process killed once its shim is gone waits on whatever init the host has to reap it.
    const inContainer = () => readdirSync('/proc').map(Number).filter((pid) => pid > 0 && alive(pid) && (() => {
      try {
        return readFileSync(`/proc/${pid}/cgroup`, 'utf8').includes(`/${step.id}`);
      } catch {
        return false;
      }
    })());
    expect(inContainer().length).toBeGreaterThan(0);
    // dockerd killed with -9 (its containerd goes with it); its owner gone, as after a kill -9 of the worker.
    process.kill(owner.pid, 'SIGKILL');
    writeFileSync(join(dir, 'owner.json'), JSON.stringify({ ...owner, owner: 4_194_305 }));
    await pollUntil('the killed dockerd gone', async () => alive(owner.pid), (running) => !running, { timeoutMs: 10_000, intervalMs: 100 });
    expect(inContainer().length, 'the container outlives its dockerd').toBeGreaterThan(0);

    expect(await reapStaleBuildEngines()).toContain(dir);
    expect(inContainer(), 'processes of its container left').toEqual([]);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(dir);
    expect(readdirSync('/sys/class/net')).not.toContain(owner.bridge);
    expect(existsSync(dir)).toBe(false);
  }, 120_000);

  it("stops with close: no dockerd answers, its directory and bridge are gone, the host engine's docker0 stays", async () => {
    const links = () => readdirSync('/sys/class/net');
    const second = await startBuildEngine();
    const socket = second.socketPath;
    const bridge = `flbe-${join(socket, '..').slice(-6)}`;
    expect(links()).toContain(bridge);
    expect(await new Docker({ socketPath: socket }).ping().then(() => true)).toBe(true);
    await second.close();
    expect(existsSync(socket)).toBe(false);
    expect(existsSync(join(socket, '..'))).toBe(false);
    expect(links()).not.toContain(bridge);
    // dockerd with --bridge=none deletes the host's docker0: the engine must never do that.
    expect(links()).toContain('docker0');
    const run = await hostDocker.createContainer({ Image: 'fleetlab/test-app:1', Cmd: ['true'] });
    await run.start();
    expect((await run.wait()).StatusCode).toBe(0);
    await run.remove();
  }, 120_000);
});
