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
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCompose, parseCompose } from '../hil/release/compose.js';
import { buildRelease } from '../hil/release/release.js';
import { pushRelease, registryRef, repositoryComponent } from '../hil/release/push.js';
import { ARM64_IMAGE_FIX, reapStaleBuildEngines, startBuildEngine, type BuildEngine } from '../hil/release/build-engine.js';
import { registryConfig, startRegistry, type Registry } from '../hil/release/registry.js';
import { reapStale } from '../src/owned-dirs.js';

const hostDocker = new Docker({ socketPath: process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock' });
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

  it("an image: the build engine lacks is refused with what to do instead", async () => {
    const project = parseCompose('services:\n  db:\n    image: postgres:16\n', join(dir, 'compose.yaml'));
    await expect(buildRelease(project, { docker: new Docker({ socketPath: engine.socketPath }), missingImageFix: ARM64_IMAGE_FIX })).rejects.toThrow(
      `${join(dir, 'compose.yaml')}: services.db.image: "postgres:16" is not in the engine the release is built in, and fleetlab reaches no outside registry: ${ARM64_IMAGE_FIX}`,
    );
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
  it('is reaped by the next start: its dockerd stopped and its directory removed', async () => {
    const root = mkdtempSync(join(tmpdir(), 'fleetlab-reap-'));
    const stale = join(root, 'fleetlab-build-engine-stale');
    mkdirSync(stale);
    // An owner that has exited (pid 2^22 + 1 is above Linux's pid_max) and no dockerd.
    writeFileSync(join(stale, 'owner.json'), JSON.stringify({ owner: 4_194_305, pid: 4_194_305 }));
    const live = join(root, 'fleetlab-build-engine-live');
    mkdirSync(live);
    writeFileSync(join(live, 'owner.json'), JSON.stringify({ owner: process.pid, pid: process.pid }));
    expect(await reapStaleBuildEngines(root)).toEqual([stale]);
    expect(existsSync(stale)).toBe(false);
    expect(existsSync(live)).toBe(true);
    rmSync(root, { recursive: true, force: true });
  });

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
