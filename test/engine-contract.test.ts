/**
 * The engine contract: one suite, run against the real dockerd and the simulated engine
 * (sim/engine), both through dockerode. It pins what fleetlab relies on: list/inspect
 * fields, status codes and messages, log framing, events, label filters, volume and network
 * lifecycles, and the pull progress stream. Where the two cannot match, the test says why
 * (`it.skipIf` with the reason in its name), never silently.
 *
 * On dockerd only the locally built test images are used (test/global-setup.ts builds them);
 * everything a run creates carries a unique label and is removed afterwards.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { execa } from 'execa';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRegistry, type Registry } from '../hil/release/registry.js';
import { streamDone } from '../src/engine-client/engine-stream.js';
import { freePort } from '../src/free-port.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { Engine } from '../src/supervisor/adapters/engine.js';
import { devicePublishAddress } from '../sim/publish-address.js';
import {
  CONTRACT_LABEL, demux, dockerdSocket, engineError, eventually, pullMessages, rawRequest, startEngineUnderTest,
  type EngineKind, type EngineUnderTest,
} from './helpers/engine-targets.js';

const APP1 = 'fleetlab/test-app:1';
const APP2 = 'fleetlab/test-app:2';
const ZERO = '0001-01-01T00:00:00Z';
const RFC3339NANO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{1,9}Z /;

describe.each<EngineKind>(['dockerd', 'sim'])('engine contract on %s', (kind) => {
  let e: EngineUnderTest;
  let docker: Docker;
  let n = 0;
  /** A name unique to this run. */
  const name = (what: string) => `contract-${e.runId}-${what}-${++n}`;

  beforeAll(async () => {
    e = await startEngineUnderTest(kind);
    docker = e.docker;
    // The simulated registry holds the test images; dockerd has them built locally.
    if (kind === 'sim') for (const ref of [APP1, APP2]) await pullMessages(docker, ref);
  });
  afterAll(async () => {
    await e?.close();
  });

  const create = (opts: Partial<Docker.ContainerCreateOptions> = {}) =>
    docker.createContainer({ Image: APP1, name: name('c'), ...opts, Labels: { ...e.labels, ...(opts.Labels ?? {}) } });

  describe('system', () => {
    it('answers GET and HEAD /_ping with OK and the API version header', async () => {
      const get = await rawRequest(e.socketPath, 'GET', '/_ping');
      expect(get.status).toBe(200);
      expect(get.body).toBe('OK');
      expect(get.headers['api-version']).toMatch(/^1\.\d+$/);
      expect(get.headers.ostype).toBe('linux');
      const head = await rawRequest(e.socketPath, 'HEAD', '/_ping');
      expect(head.status).toBe(200);
      expect(head.body).toBe('');
      const versioned = await rawRequest(e.socketPath, 'GET', '/v1.41/_ping');
      expect(versioned.body).toBe('OK');
    });

    it('refuses an API version newer than its own (400)', async () => {
      const res = await rawRequest(e.socketPath, 'GET', '/v1.99/version');
      expect(res.status).toBe(400);
      expect(JSON.parse(res.body)).toEqual({ message: 'client version 1.99 is too new. Maximum supported API version is 1.41' });
    });

    it('reports version and info', async () => {
      const v = await docker.version();
      expect(v.ApiVersion).toBe('1.41');
      expect(v.Os).toBe('linux');
      expect(typeof v.Version).toBe('string');
      const info = await docker.info();
      expect(typeof info.Containers).toBe('number');
      expect(typeof info.ContainersRunning).toBe('number');
      expect(typeof info.Images).toBe('number');
      expect(typeof info.ServerVersion).toBe('string');
      expect(info.OSType).toBe('linux');
    });
  });

  describe('images', () => {
    it('lists the test images with the fields fleetlab reads', async () => {
      const images = await docker.listImages();
      const app1 = images.find((i) => i.RepoTags?.includes(APP1));
      expect(app1).toBeDefined();
      expect(app1!.Id).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect(app1!.Size).toBeGreaterThan(0);
      expect(typeof app1!.Created).toBe('number');
      // null for an image that came from no registry (imported), as dockerd answers
      expect(app1!.RepoDigests === null || Array.isArray(app1!.RepoDigests)).toBe(true);
    });

    it('inspects an image: config Cmd and layers; an unknown one is a 404', async () => {
      const image = await docker.getImage(APP1).inspect();
      expect(image.Id).toMatch(/^sha256:/);
      expect(image.RepoTags).toContain(APP1);
      expect(image.Config.Cmd?.join(' ')).toMatch(/test-app v1: tick/);
      expect(image.RootFS.Type).toBe('layers');
      expect(image.RootFS.Layers!.length).toBeGreaterThan(0);
      const err = await engineError(docker.getImage(`fleetlab/nope-${e.runId}:1`).inspect());
      expect(err.statusCode).toBe(404);
      expect(err.message).toMatch(new RegExp(`no such image: fleetlab/nope-${e.runId}:1`, 'i'));
    });

    it('tags an image and removes only the extra tag', async () => {
      const repo = `fleetlab/contract-${e.runId}`;
      const id = (await docker.getImage(APP1).inspect()).Id;
      await docker.getImage(id).tag({ repo, tag: 'x' });
      const tagged = await docker.getImage(`${repo}:x`).inspect();
      expect(tagged.Id).toBe(id);
      const removed = await docker.getImage(`${repo}:x`).remove();
      expect(removed).toEqual([{ Untagged: `${repo}:x` }]);
      expect((await docker.getImage(APP1).inspect()).RepoTags).toContain(APP1);
      expect((await engineError(docker.getImage(`${repo}:x`).inspect())).statusCode).toBe(404);
    });

    it('imports an image from a tar; refuses to remove its only tag while a container uses it (409)', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'fleetlab-contract-tar-'));
      try {
        writeFileSync(join(dir, 'hello.txt'), `contract ${e.runId}\n`);
        const tar = (await execa('tar', ['-C', dir, '-cf', '-', 'hello.txt'], { encoding: 'buffer' })).stdout;
        const repo = `fleetlab/contract-${e.runId}`;
        const progress = (await docker.importImage(Readable.from([Buffer.from(tar)]), {
          repo, tag: 'imported',
          // The quoting `fleetlab replay` relies on to give a stand-in image the captured config.
          changes: ['CMD ["sleep","5"]', 'ENV A="one two" B=3 C="\\$HOME"', 'LABEL "io.example.k"="v \\"q\\" \\\\" plain=x', 'WORKDIR /w'],
        } as never)) as unknown as NodeJS.ReadableStream;
        await new Promise<void>((r, j) => docker.modem.followProgress(progress, (err: Error | null) => (err ? j(err) : r())));
        const image = await docker.getImage(`${repo}:imported`).inspect();
        expect(image.Config.Cmd).toEqual(['sleep', '5']);
        expect(image.Config.Env).toEqual(expect.arrayContaining(['A=one two', 'B=3', 'C=$HOME']));
        expect(image.Config.Labels).toEqual({ 'io.example.k': 'v "q" \\', plain: 'x' });
        expect(image.Config.WorkingDir).toBe('/w');
        const c = await docker.createContainer({ Image: `${repo}:imported`, name: name('img'), Labels: e.labels });
        const err = await engineError(docker.getImage(`${repo}:imported`).remove());
        expect(err.statusCode).toBe(409);
        expect(err.message).toBe(`conflict: unable to remove repository reference "${repo}:imported" (must force) - container ${c.id.slice(0, 12)} is using its referenced image ${image.Id.slice(7, 19)}`);
        await c.remove({ force: true });
        const removed = await docker.getImage(`${repo}:imported`).remove();
        expect(removed).toEqual(expect.arrayContaining([{ Untagged: `${repo}:imported` }, { Deleted: image.Id }]));
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });

    it('fails a pull from a loopback registry nothing answers before any progress, with dockerd\'s message', async () => {
      // Port 9 (discard): no registry listens; both engines dial it and refuse before the stream starts.
      const err = await engineError(docker.pull(`127.0.0.1:9/fleetlab/nope-${e.runId}:1`));
      expect(err).toEqual({ statusCode: 500, message: 'Get "http://127.0.0.1:9/v2/": dial tcp 127.0.0.1:9: connect: connection refused' });
    });

    it.skipIf(kind === 'dockerd')('fails a pull of a repository the catalogue lacks with 404 (sim only: dockerd would ask Docker Hub)', async () => {
      const err = await engineError(docker.pull(`fleetlab/nope-${e.runId}:1`));
      expect(err).toEqual({ statusCode: 404, message: `pull access denied for fleetlab/nope-${e.runId}, repository does not exist or may require 'docker login': denied: requested access to the resource is denied` });
    });

    it.skipIf(kind === 'dockerd')('streams pull progress in dockerd\'s shape (sim only: dockerd here reaches no registry)', async () => {
      await docker.getImage('busybox:latest').remove().catch(() => undefined);
      const messages = await pullMessages(docker, 'busybox:latest');
      expect(messages[0]).toEqual({ status: 'Pulling from busybox', id: 'latest' });
      const layerIds = messages.filter((m) => m.status === 'Pulling fs layer').map((m) => m.id);
      expect(layerIds.length).toBeGreaterThan(0);
      for (const id of layerIds) {
        expect(id).toMatch(/^[0-9a-f]{12}$/);
        const own = messages.filter((m) => m.id === id).map((m) => m.status);
        expect(own.indexOf('Pulling fs layer')).toBeLessThan(own.indexOf('Downloading'));
        expect(own.indexOf('Downloading')).toBeLessThan(own.indexOf('Download complete'));
        expect(own.indexOf('Download complete')).toBeLessThan(own.indexOf('Extracting'));
        expect(own.at(-1)).toBe('Pull complete');
      }
      const downloading = messages.filter((m) => m.status === 'Downloading') as Array<{ progressDetail: { current: number; total: number }; progress: string }>;
      expect(downloading.length).toBeGreaterThan(0);
      for (const d of downloading) {
        expect(d.progressDetail.current).toBeGreaterThan(0);
        expect(d.progressDetail.current).toBeLessThanOrEqual(d.progressDetail.total);
        expect(d.progress).toMatch(/^\[[=> ]+\]/);
      }
      expect(messages.at(-2)!.status).toMatch(/^Digest: sha256:[0-9a-f]{64}$/);
      expect(messages.at(-1)).toEqual({ status: 'Status: Downloaded newer image for busybox:latest' });
      const again = await pullMessages(docker, 'busybox');
      expect(again.at(-1)).toEqual({ status: 'Status: Image is up to date for busybox:latest' });
    });

    it.skipIf(kind === 'dockerd')('reports a pull that fails midway in the stream (sim only: needs fault injection)', async () => {
      await docker.getImage('busybox:latest').remove().catch(() => undefined);
      e.sim!.addPullFault({ image: 'busybox:latest', failAfterBytes: 300_000, message: 'unexpected EOF', times: 1 });
      const stream = (await docker.pull('busybox:latest')) as Readable;
      const out = await new Promise<Array<Record<string, unknown>>>((r) => docker.modem.followProgress(stream, (_e: Error | null, o: Array<Record<string, unknown>>) => r(o)));
      // The stream itself ends normally (HTTP 200 was sent); the failure is its last message.
      expect(out.at(-1)).toEqual({ errorDetail: { message: 'unexpected EOF' }, error: 'unexpected EOF' });
      expect(out.some((m) => m.status === 'Downloading')).toBe(true);
      expect(out.some((m) => String(m.status).startsWith('Status:'))).toBe(false);
      await expect(docker.getImage('busybox:latest').inspect()).rejects.toMatchObject({ statusCode: 404 });
      // the next pull is not affected (times: 1)
      const messages = await pullMessages(docker, 'busybox:latest');
      expect(messages.at(-1)!.status).toBe('Status: Downloaded newer image for busybox:latest');
    });
  });

  describe('pull from a registry on loopback', () => {
    // A release's path to a device: an image pushed from dockerd to Debian's Distribution
    // registry on loopback (hil/release/registry.ts), then pulled by the engine under test.
    // The simulated engine reads the manifest and config from the registry (layers are not
    // downloaded), so the image id and digest are the registry's on both engines.
    const host = new Docker({ socketPath: dockerdSocket });
    let dir: string;
    let registry: Registry;
    let ref: string;
    let pushed: { id: string; digest: string };

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'fleetlab-contract-registry-'));
      registry = await startRegistry({ dir });
      const tag = e.runId;
      ref = `${registry.host}/contract/app:${tag}`;
      const id = (await host.getImage(APP1).inspect()).Id;
      await host.getImage(APP1).tag({ repo: `${registry.host}/contract/app`, tag });
      await streamDone(host, await host.getImage(ref).push({ authconfig: { serveraddress: registry.host } }));
      const digest = (await host.getImage(ref).inspect()).RepoDigests.find((d) => d.startsWith(`${registry.host}/contract/app@`))!.split('@')[1]!;
      pushed = { id, digest };
      // Only the tag goes (APP1 keeps the image): dockerd's pull below then comes from the registry.
      await host.getImage(ref).remove();
    });
    afterAll(async () => {
      await host.getImage(ref).remove().catch(() => undefined);
      await registry?.close();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it('pulls a tag: the image id is the config digest, RepoDigests carries the manifest digest', async () => {
      const messages = await pullMessages(docker, ref);
      expect(messages[0]).toEqual({ status: 'Pulling from contract/app', id: e.runId });
      expect(messages.at(-2)).toEqual({ status: `Digest: ${pushed.digest}` });
      expect(messages.at(-1)).toEqual({ status: `Status: Downloaded newer image for ${ref}` });
      const image = await docker.getImage(ref).inspect();
      expect(image.Id).toBe(pushed.id);
      expect(image.RepoTags).toContain(ref);
      expect(image.RepoDigests).toContain(`${registry.host}/contract/app@${pushed.digest}`);
      expect(image.Config.Cmd?.join(' ')).toMatch(/test-app v1: tick/);
      expect(registry.pulls().length).toBeGreaterThan(0);
      const again = await pullMessages(docker, ref);
      expect(again.at(-1)).toEqual({ status: `Status: Image is up to date for ${ref}` });
    });

    it('a tag the registry lacks is a 404 manifest unknown; so is a repository it lacks', async () => {
      const missingTag = await engineError(docker.pull(`${registry.host}/contract/app:missing`));
      expect(missingTag).toEqual({ statusCode: 404, message: `manifest for ${registry.host}/contract/app:missing not found: manifest unknown: manifest unknown` });
      // Debian's registry answers MANIFEST_UNKNOWN (not NAME_UNKNOWN) for a repository it never saw.
      const missingRepo = await engineError(docker.pull(`${registry.host}/contract/nope-${e.runId}:1`));
      expect(missingRepo).toEqual({ statusCode: 404, message: `manifest for ${registry.host}/contract/nope-${e.runId}:1 not found: manifest unknown: manifest unknown` });
    });

    it('a registry that is down is a 500 naming the dial that failed', async () => {
      const port = await freePort();
      for (const domain of [`127.0.0.1:${port}`, `localhost:${port}`]) {
        const err = await engineError(docker.pull(`${domain}/contract/app:1`));
        expect(err).toEqual({ statusCode: 500, message: `Get "http://${domain}/v2/": dial tcp 127.0.0.1:${port}: connect: connection refused` });
      }
    });
  });

  describe('containers', () => {
    it('creates with name, labels, env, cmd, binds, restart policy, network and aliases; inspect shows them', async () => {
      const net = await docker.createNetwork({ Name: name('net'), Driver: 'bridge', Labels: e.labels, CheckDuplicate: true });
      const vol = name('vol');
      const c = await create({
        name: name('full'),
        Env: ['A=1', 'B=two'],
        Cmd: ['sleep', '30'],
        Labels: { 'io.fleetlab.test': 'yes' },
        HostConfig: { Binds: [`${vol}:/data`], NetworkMode: (await net.inspect()).Name, RestartPolicy: { Name: 'unless-stopped', MaximumRetryCount: 0 } },
        NetworkingConfig: { EndpointsConfig: { [(await net.inspect()).Name]: { Aliases: ['svc'] } } },
      });
      const info = await c.inspect();
      expect(info.Id).toMatch(/^[0-9a-f]{64}$/);
      expect(info.Name).toMatch(/^\/contract-.*-full-/);
      expect(info.Config.Labels).toMatchObject({ 'io.fleetlab.test': 'yes', [CONTRACT_LABEL]: e.runId });
      expect(info.Config.Env).toEqual(expect.arrayContaining(['A=1', 'B=two']));
      expect(info.Config.Cmd).toEqual(['sleep', '30']);
      expect(info.Config.Image).toBe(APP1);
      // The id of the image the ref named at create time (another run's global setup may
      // re-import the test images, moving the tag, so compare by content, not by current id).
      expect(info.Image).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect((await docker.getImage(info.Image).inspect()).Config.Cmd?.join(' ')).toMatch(/test-app v1: tick/);
      expect(info.HostConfig.RestartPolicy).toEqual({ Name: 'unless-stopped', MaximumRetryCount: 0 });
      expect(info.HostConfig.NetworkMode).toBe((await net.inspect()).Name);
      expect(info.HostConfig.Binds).toEqual([`${vol}:/data`]);
      expect(info.Mounts).toEqual([expect.objectContaining({ Type: 'volume', Name: vol, Destination: '/data', RW: true })]);
      expect(info.State).toMatchObject({ Status: 'created', Running: false, Restarting: false, ExitCode: 0, Pid: 0, StartedAt: ZERO, FinishedAt: ZERO });
      expect(info.RestartCount).toBe(0);
      // The endpoint is only joined at start: before, the network is named but not bound.
      const endpoint = info.NetworkSettings.Networks[(await net.inspect()).Name]!;
      expect(endpoint.NetworkID).toBe('');
      expect(endpoint.IPAddress).toBe('');
      expect(endpoint.Aliases).toContain('svc');
      await c.start();
      const started = (await c.inspect()).NetworkSettings.Networks[(await net.inspect()).Name]!;
      expect(started.NetworkID).toBe(net.id);
      expect(started.IPAddress).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      expect(started.Aliases).toContain('svc');
      // Binds of a named volume create it, unlabelled, as dockerd does.
      expect((await docker.getVolume(vol).inspect()).Name).toBe(vol);
      await c.remove({ force: true });
      await docker.getVolume(vol).remove();
    });

    it('creates with HostConfig.Mounts (volume and read-only bind); a missing bind source is a 400', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'fleetlab-contract-bind-'));
      try {
        const vol = name('mvol');
        const c = await create({ HostConfig: { Mounts: [{ Type: 'volume', Source: vol, Target: '/m' }, { Type: 'bind', Source: dir, Target: '/b', ReadOnly: true }] } });
        const mounts = (await c.inspect()).Mounts;
        expect(mounts).toEqual(expect.arrayContaining([
          expect.objectContaining({ Type: 'volume', Name: vol, Destination: '/m', RW: true }),
          expect.objectContaining({ Type: 'bind', Source: dir, Destination: '/b', RW: false }),
        ]));
        await c.remove({ force: true });
        await docker.getVolume(vol).remove();
        const missing = await engineError(create({ HostConfig: { Mounts: [{ Type: 'bind', Source: join(dir, 'absent'), Target: '/x' }] } }));
        expect(missing.statusCode).toBe(400);
        expect(missing.message).toBe(`invalid mount config for type "bind": bind source path does not exist: ${join(dir, 'absent')}`);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });

    it('refuses a taken name (409) and a missing image (404), with dockerd\'s messages', async () => {
      const taken = name('taken');
      const c = await create({ name: taken });
      const clash = await engineError(create({ name: taken }));
      expect(clash.statusCode).toBe(409);
      expect(clash.message).toBe(`Conflict. The container name "/${taken}" is already in use by container "${c.id}". You have to remove (or rename) that container to be able to reuse that name.`);
      const missing = await engineError(create({ Image: `fleetlab/nope-${e.runId}:1` }));
      expect(missing.statusCode).toBe(404);
      expect(missing.message).toBe(`No such image: fleetlab/nope-${e.runId}:1`);
    });

    it('start, stop, start again: 304 for a started start and a stopped stop; SIGTERM honoured with exit 0', async () => {
      const c = await create();
      await c.start();
      let s = (await c.inspect()).State;
      expect(s).toMatchObject({ Status: 'running', Running: true, Restarting: false });
      expect(s.Pid).toBeGreaterThan(0);
      expect(s.StartedAt).not.toBe(ZERO);
      expect((await engineError(c.start())).statusCode).toBe(304);
      await c.stop({ t: 5 });
      s = (await c.inspect()).State;
      expect(s).toMatchObject({ Status: 'exited', Running: false, ExitCode: 0, Pid: 0 });
      expect(s.FinishedAt).not.toBe(ZERO);
      expect((await engineError(c.stop())).statusCode).toBe(304);
      await c.start();
      expect((await c.inspect()).State.Running).toBe(true);
      await c.remove({ force: true });
    });

    it('stop waits the timeout and kills a process that ignores SIGTERM (137)', async () => {
      const c = await create({ Cmd: ['sleep', '60'] });
      await c.start();
      await c.stop({ t: 1 });
      expect((await c.inspect()).State).toMatchObject({ Status: 'exited', ExitCode: 137 });
    });

    it('kill ends a running container with 137 and refuses a stopped one (409)', async () => {
      const c = await create();
      await c.start();
      await c.kill();
      const s = await eventually(async () => {
        const st = (await c.inspect()).State;
        return st.Running ? undefined : st;
      }, 10_000, 'container exits after kill');
      expect(s.ExitCode).toBe(137);
      const err = await engineError(c.kill());
      expect(err.statusCode).toBe(409);
      expect(err.message).toMatch(new RegExp(`^Cannot kill container: ${c.id}: Container ${c.id} is not running$`));
    });

    it('restart gives a new StartedAt and keeps it running', async () => {
      const c = await create();
      await c.start();
      const before = (await c.inspect()).State.StartedAt;
      await new Promise((r) => setTimeout(r, 20));
      await c.restart({ t: 5 });
      const s = (await c.inspect()).State;
      expect(s.Running).toBe(true);
      expect(s.StartedAt).not.toBe(before);
    });

    it('remove: 409 for a running container without force, force removes it, then 404', async () => {
      const c = await create();
      await c.start();
      const err = await engineError(c.remove());
      expect(err.statusCode).toBe(409);
      expect(err.message).toBe(`You cannot remove a running container ${c.id}. Stop the container before attempting removal or force remove`);
      await c.remove({ force: true, v: true });
      const gone = await engineError(c.inspect());
      expect(gone.statusCode).toBe(404);
      expect(gone.message).toBe(`No such container: ${c.id}`);
      expect((await engineError(docker.getContainer(`nope-${e.runId}`).inspect())).message).toBe(`No such container: nope-${e.runId}`);
    });

    it('wait returns the exit code', async () => {
      const c = await create({ Cmd: ['sh', '-c', 'sleep 1; exit 3'] });
      await c.start();
      expect(await c.wait()).toEqual({ Error: null, StatusCode: 3 });
      expect((await c.inspect()).State).toMatchObject({ Status: 'exited', ExitCode: 3 });
      expect(await c.wait()).toEqual({ Error: null, StatusCode: 3 });
    });

    it('lists with all and filters (label, name, id, status) and the summary fields fleetlab reads', async () => {
      const running = await create({ Labels: { 'io.fleetlab.role': 'a' } });
      await running.start();
      const stopped = await create({ Cmd: ['true'], Labels: { 'io.fleetlab.role': 'b' } });
      const own = { label: [`${CONTRACT_LABEL}=${e.runId}`] };
      const runningOnly = await docker.listContainers({ filters: own });
      expect(runningOnly.map((c) => c.Id)).toContain(running.id);
      expect(runningOnly.map((c) => c.Id)).not.toContain(stopped.id);
      const all = await docker.listContainers({ all: true, filters: own });
      expect(all.map((c) => c.Id)).toEqual(expect.arrayContaining([running.id, stopped.id]));
      const byLabel = await docker.listContainers({ all: true, filters: { label: [`${CONTRACT_LABEL}=${e.runId}`, 'io.fleetlab.role=b'] } });
      expect(byLabel.map((c) => c.Id)).toEqual([stopped.id]);
      const stoppedName = (await stopped.inspect()).Name.slice(1);
      expect((await docker.listContainers({ all: true, filters: { name: [stoppedName] } })).map((c) => c.Id)).toEqual([stopped.id]);
      expect((await docker.listContainers({ all: true, filters: { id: [stopped.id.slice(0, 16)] } })).map((c) => c.Id)).toEqual([stopped.id]);
      const created = await docker.listContainers({ all: true, filters: { ...own, status: ['created'] } });
      expect(created.map((c) => c.Id)).toContain(stopped.id);
      expect(created.map((c) => c.Id)).not.toContain(running.id);
      const summary = runningOnly.find((c) => c.Id === running.id)!;
      expect(summary.Names).toEqual([(await running.inspect()).Name]);
      expect(summary.State).toBe('running');
      expect(summary.Status).toMatch(/^Up /);
      expect(summary.ImageID).toBe((await running.inspect()).Image);
      // dockerd shows the ref while it still names the container's image, else the image id
      // (the test images may be rebuilt meanwhile by another run's global setup).
      const app1Now = (await docker.getImage(APP1).inspect()).Id;
      expect(summary.Image).toBe(app1Now === summary.ImageID ? APP1 : summary.ImageID);
      expect(summary.Labels['io.fleetlab.role']).toBe('a');
      expect(typeof summary.Created).toBe('number');
      expect(summary.HostConfig.NetworkMode).toBe('default');
      expect(Object.keys(summary.NetworkSettings.Networks)).toEqual(['bridge']);
      const bad = await engineError(docker.listContainers({ all: true, filters: { status: ['sleeping'] } }));
      expect(bad.statusCode).toBe(400);
    });

    it('shows published ports in inspect and the list only while the container runs; an exposed port without a binding is null', async () => {
      // An address of a device's own, as the sim and container targets give (sim/publish-address.ts).
      const hostIp = devicePublishAddress();
      const hostPort = String(await freePort());
      const c = await create({ ExposedPorts: { '80/tcp': {}, '81/tcp': {} }, HostConfig: { PortBindings: { '80/tcp': [{ HostIp: hostIp, HostPort: hostPort }] } } });
      const listed = async () => (await docker.listContainers({ all: true, filters: { id: [c.id] } }))[0]!.Ports;
      const created = await c.inspect();
      expect(created.NetworkSettings.Ports).toEqual({});
      expect(created.HostConfig.PortBindings).toEqual({ '80/tcp': [{ HostIp: hostIp, HostPort: hostPort }] });
      expect(created.Config.ExposedPorts).toEqual({ '80/tcp': {}, '81/tcp': {} });
      expect(await listed()).toEqual([]);
      await c.start();
      expect((await c.inspect()).NetworkSettings.Ports).toEqual({ '80/tcp': [{ HostIp: hostIp, HostPort: hostPort }], '81/tcp': null });
      const byPort = (a: { PrivatePort: number }, b: { PrivatePort: number }) => a.PrivatePort - b.PrivatePort;
      expect((await listed()).sort(byPort)).toEqual([{ IP: hostIp, PrivatePort: 80, PublicPort: Number(hostPort), Type: 'tcp' }, { PrivatePort: 81, Type: 'tcp' }]);
      await c.stop({ t: 0 });
      expect((await c.inspect()).NetworkSettings.Ports).toEqual({});
    });

    it('refuses to start a container whose published port another running one holds, on its address or the wildcard; another address is free', async () => {
      const hostIp = devicePublishAddress();
      const hostPort = String(await freePort());
      const publishing = (ip: string) => create({ ExposedPorts: { '80/tcp': {} }, HostConfig: { PortBindings: { '80/tcp': [{ HostIp: ip, HostPort: hostPort }] } } });
      const holder = await publishing(hostIp);
      await holder.start();
      const same = await publishing(hostIp);
      const sameName = (await same.inspect()).Name.slice(1);
      const refused = await engineError(same.start());
      expect(refused.statusCode).toBe(500);
      expect(refused.message).toMatch(new RegExp(`^driver failed programming external connectivity on endpoint ${sameName} \\([0-9a-f]{64}\\): Bind for ${hostIp.replace(/\./g, '\\.')}:${hostPort} failed: port is already allocated$`));
      expect((await same.inspect()).State).toMatchObject({ Status: 'created', Error: refused.message });
      const wildcard = await publishing('');
      expect((await engineError(wildcard.start())).message).toMatch(new RegExp(`: Error starting userland proxy: listen tcp4 0\\.0\\.0\\.0:${hostPort}: bind: address already in use$`));
      // Another device's address: the same port number is free there.
      const other = await publishing(devicePublishAddress());
      await other.start();
      expect((await other.inspect()).State.Running).toBe(true);
      await holder.stop({ t: 0 });
      await same.start();
      expect((await same.inspect()).State).toMatchObject({ Running: true, Error: '' });
    });

    it('restart policy on-failure:2 restarts a failing container twice, then leaves it exited', async () => {
      const c = await create({ Cmd: ['sh', '-c', 'exit 1'], HostConfig: { RestartPolicy: { Name: 'on-failure', MaximumRetryCount: 2 } } });
      await c.start();
      const info = await eventually(async () => {
        const i = await c.inspect();
        return i.RestartCount === 2 && i.State.Status === 'exited' ? i : undefined;
      }, 20_000, 'two restarts then exited');
      expect(info.State.ExitCode).toBe(1);
    });

    it('restart policy always keeps a crashing container coming back (RestartCount grows)', async () => {
      const c = await create({ Cmd: ['sh', '-c', 'exit 2'], HostConfig: { RestartPolicy: { Name: 'always', MaximumRetryCount: 0 } } });
      await c.start();
      const info = await eventually(async () => {
        const i = await c.inspect();
        return i.RestartCount >= 3 ? i : undefined;
      }, 20_000, 'RestartCount >= 3');
      expect(info.State.ExitCode === 2 || info.State.Running).toBe(true);
      await c.stop({ t: 1 });
      const after = (await c.inspect()).RestartCount;
      await new Promise((r) => setTimeout(r, 1000));
      expect((await c.inspect()).RestartCount).toBe(after);
      // A client's start begins a new run: the count starts again, and the stop no longer holds
      // the restarts back (a power cycle's stop, then the engine's start at boot, is the same).
      await c.start();
      // Counted from 0 again (it may have crashed once already as it is read).
      expect((await c.inspect()).RestartCount).toBeLessThan(after);
      await eventually(async () => ((await c.inspect()).RestartCount >= 1 ? true : undefined), 20_000, 'restarting again after a start');
      await c.remove({ force: true });
    });
  });

  describe('healthchecks and the settings compose keys give a container', () => {
    /** The events since `since` up to a second from now, when the engine ends the stream. */
    const pastEvents = async (since: number, filters: Record<string, string[]>) => {
      const stream = (await docker.getEvents({ since, until: Math.floor(Date.now() / 1000) + 1, filters })) as unknown as Readable;
      let text = '';
      for await (const chunk of stream) text += (chunk as Buffer).toString('utf8');
      return text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { id: string; Action: string; Actor: { Attributes: Record<string, string> } });
    };

    it('keeps Config and HostConfig settings as given, and refuses what dockerd refuses', async () => {
      const c = await create({
        User: '1000:1000', WorkingDir: '/tmp', StopSignal: 'SIGINT', StopTimeout: 3, Hostname: 'web-1', Entrypoint: [],
        Healthcheck: { Test: ['CMD-SHELL', 'exit 0'], Interval: 1e9, Retries: 2 },
        HostConfig: { Init: true, ReadonlyRootfs: true, Sysctls: { 'net.core.somaxconn': '1024' }, Ulimits: [{ Name: 'nofile', Soft: 512, Hard: 1024 }], ExtraHosts: ['db.local:10.0.0.5'], ShmSize: 32 * 1024 * 1024 },
      } as Partial<Docker.ContainerCreateOptions>);
      const info = await c.inspect();
      expect(info.Config).toMatchObject({ User: '1000:1000', WorkingDir: '/tmp', StopSignal: 'SIGINT', StopTimeout: 3, Hostname: 'web-1', Healthcheck: { Test: ['CMD-SHELL', 'exit 0'], Interval: 1e9, Retries: 2 } });
      // An empty Entrypoint drops the image's; the image's Cmd stays, as neither was given one.
      expect(info.Config.Entrypoint).toEqual([]);
      expect(info.Config.Cmd?.join(' ')).toMatch(/test-app v1/);
      expect(info.HostConfig).toMatchObject({ Init: true, ReadonlyRootfs: true, Sysctls: { 'net.core.somaxconn': '1024' }, Ulimits: [{ Name: 'nofile', Soft: 512, Hard: 1024 }], ExtraHosts: ['db.local:10.0.0.5'], ShmSize: 32 * 1024 * 1024 });
      const plain = await (await create()).inspect();
      expect(plain.HostConfig).toMatchObject({ ReadonlyRootfs: false, ExtraHosts: null, Ulimits: null, ShmSize: 67108864 });
      expect(plain.Config.User).toBe('');
      expect(plain.Config).not.toHaveProperty('StopSignal');
      expect(plain.Config).not.toHaveProperty('Healthcheck');
      for (const [body, message] of [
        [{ WorkingDir: 'rel' }, "the working directory 'rel' is invalid, it needs to be an absolute path"],
        [{ Healthcheck: { Test: ['CMD', 'true'], Interval: 10 } }, 'Interval in Healthcheck cannot be less than 1ms'],
        [{ Healthcheck: { Test: ['CMD', 'true'], Retries: -1 } }, 'Retries in Healthcheck cannot be negative'],
        [{ StopSignal: 'BOGUS' }, 'Invalid signal: BOGUS'],
      ] as const) {
        expect(await engineError(create(body as Partial<Docker.ContainerCreateOptions>))).toEqual({ statusCode: 400, message });
      }
    });

    it('runs the check: starting, then healthy or unhealthy in inspect, list Status, the health filter and events; a stop leaves it unhealthy', async () => {
      const since = Math.floor(Date.now() / 1000) - 1;
      const good = await create({ Healthcheck: { Test: ['CMD-SHELL', 'exit 0'], Interval: 300e6 } } as Partial<Docker.ContainerCreateOptions>);
      const bad = await create({ Healthcheck: { Test: ['CMD-SHELL', 'exit 1'], Interval: 300e6, Retries: 2 } } as Partial<Docker.ContainerCreateOptions>);
      const off = await create({ Healthcheck: { Test: ['NONE'] } } as Partial<Docker.ContainerCreateOptions>);
      for (const c of [good, bad, off]) await c.start();
      const status = async (c: Docker.Container) => (await c.inspect()).State.Health?.Status;
      await eventually(async () => ((await status(good)) === 'healthy' && (await status(bad)) === 'unhealthy' ? true : undefined), 20_000, 'good healthy, bad unhealthy');
      const badHealth = (await bad.inspect()).State.Health!;
      expect(badHealth.FailingStreak).toBeGreaterThanOrEqual(2);
      expect(badHealth.Log.at(-1)).toMatchObject({ ExitCode: 1 });
      expect((await off.inspect()).State.Health).toBeUndefined();
      const own = { label: [`${CONTRACT_LABEL}=${e.runId}`] };
      const listed = await docker.listContainers({ all: true, filters: own });
      const statusOf = (c: Docker.Container) => listed.find((l) => l.Id === c.id)!.Status;
      expect(statusOf(good)).toMatch(/^Up .* \(healthy\)$/);
      expect(statusOf(bad)).toMatch(/^Up .* \(unhealthy\)$/);
      expect(statusOf(off)).not.toMatch(/\(/);
      const ids = async (health: string) => (await docker.listContainers({ all: true, filters: { ...own, health: [health] } })).map((l) => l.Id);
      expect(await ids('healthy')).toEqual([good.id]);
      expect(await ids('unhealthy')).toEqual([bad.id]);
      expect(await ids('none')).toContain(off.id);
      expect(await engineError(docker.listContainers({ filters: { health: ['bogus'] } }))).toEqual({ statusCode: 400, message: 'Unrecognised filter value for health: bogus' });
      const actions = await pastEvents(since, { container: [good.id, bad.id] });
      expect(actions).toContainEqual(expect.objectContaining({ Action: 'health_status: healthy', id: good.id }));
      expect(actions).toContainEqual(expect.objectContaining({ Action: 'health_status: unhealthy', id: bad.id }));
      expect(actions).toContainEqual(expect.objectContaining({ Action: 'exec_start: /bin/sh -c exit 0', id: good.id }));
      await good.stop({ t: 1 });
      expect(await status(good)).toBe('unhealthy');
      // A probe that was running when the stop came fails and counts (dockerd, seen under load):
      // the streak is 0, or 1 for that probe, never the Retries a failing check needs.
      expect((await good.inspect()).State.Health!.FailingStreak).toBeLessThanOrEqual(1);
    });

    it('stops with the container\'s StopSignal and StopTimeout when the stop names no timeout', async () => {
      const since = Math.floor(Date.now() / 1000) - 1;
      // test-app traps TERM and INT: SIGINT ends it at once; SIGQUIT it ignores, so the kill follows after StopTimeout.
      const byInt = await create({ StopSignal: 'SIGINT', StopTimeout: 30 } as Partial<Docker.ContainerCreateOptions>);
      const byQuit = await create({ StopSignal: 'SIGQUIT', StopTimeout: 1 } as Partial<Docker.ContainerCreateOptions>);
      for (const c of [byInt, byQuit]) await c.start();
      await Promise.all([byInt.stop(), byQuit.stop()]);
      expect((await byInt.inspect()).State.ExitCode).toBe(0);
      expect((await byQuit.inspect()).State.ExitCode).toBe(137);
      const kills = await pastEvents(since, { event: ['kill'], container: [byInt.id, byQuit.id] });
      expect(kills.filter((k) => k.id === byInt.id).map((k) => k.Actor.Attributes.signal)).toEqual(['2']);
      expect(kills.filter((k) => k.id === byQuit.id).map((k) => k.Actor.Attributes.signal)).toEqual(['3', '9']);
    });
  });

  describe('logs', () => {
    it('frames stdout and stderr (multiplexed), with timestamps, tail and since', async () => {
      const c = await create({ Cmd: ['sh', '-c', 'echo out1; echo err1 >&2; echo out2'] });
      await c.start();
      await c.wait();
      const raw = (await c.logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer;
      const frames = demux(raw);
      expect(frames.filter((f) => f.stream === 1).map((f) => f.text)).toEqual(['out1\n', 'out2\n']);
      expect(frames.filter((f) => f.stream === 2).map((f) => f.text)).toEqual(['err1\n']);
      const onlyErr = demux((await c.logs({ stdout: false, stderr: true, follow: false })) as unknown as Buffer);
      expect(onlyErr).toEqual([{ stream: 2, text: 'err1\n' }]);
      const stamped = demux((await c.logs({ stdout: true, follow: false, timestamps: true })) as unknown as Buffer);
      for (const f of stamped) expect(f.text).toMatch(RFC3339NANO);
      // tail counts lines of both streams, whose order in the log is not defined: use one stream
      const abc = await create({ Cmd: ['sh', '-c', 'echo a; echo b; echo c'] });
      await abc.start();
      await abc.wait();
      const tail = demux((await abc.logs({ stdout: true, stderr: true, follow: false, tail: 2 })) as unknown as Buffer);
      expect(tail).toEqual([{ stream: 1, text: 'b\n' }, { stream: 1, text: 'c\n' }]);
      const future = demux((await c.logs({ stdout: true, stderr: true, follow: false, since: Math.floor(Date.now() / 1000) + 60 })) as unknown as Buffer);
      expect(future).toEqual([]);
      const none = await engineError(c.logs({ stdout: false, stderr: false, follow: false }) as unknown as Promise<unknown>);
      expect(none.statusCode).toBe(400);
    });

    it('follows a running container and ends when it stops', async () => {
      const c = await create();
      await c.start();
      const stream = (await c.logs({ stdout: true, stderr: true, follow: true })) as unknown as Readable;
      let text = '';
      const ended = new Promise<void>((r) => stream.on('end', () => r()));
      stream.on('data', (b: Buffer) => (text += b.toString('utf8')));
      await eventually(async () => (/test-app v1: tick 1/.test(text) ? true : undefined), 10_000, 'first tick followed');
      await c.stop({ t: 5 });
      await Promise.race([ended, new Promise((_, rej) => setTimeout(() => rej(new Error('follow did not end after stop')), 10_000))]);
      expect(text).toMatch(/test-app v1: stopping/);
    });
  });

  describe('events', () => {
    it('streams create, start, kill, die, stop, destroy with dockerd\'s shape, filtered by label', async () => {
      const events: Array<{ Type: string; Action: string; Actor: { ID: string; Attributes: Record<string, string> }; time: number; timeNano: number; scope: string }> = [];
      const stream = (await docker.getEvents({ filters: { type: ['container'], label: [`${CONTRACT_LABEL}=${e.runId}`, 'io.fleetlab.events=1'] } })) as unknown as Readable;
      let buffered = '';
      stream.on('data', (b: Buffer) => {
        buffered += b.toString('utf8');
        const lines = buffered.split('\n');
        buffered = lines.pop()!;
        for (const l of lines) if (l.trim()) events.push(JSON.parse(l));
      });
      try {
        const c = await create({ Labels: { 'io.fleetlab.events': '1' } });
        await c.start();
        // The default command sets its TERM trap before it says "started"; a stop before that
        // meets a PID 1 with no handler, which ignores SIGTERM, and dies by SIGKILL (137).
        await eventually(async () => (demux((await c.logs({ stdout: true, follow: false })) as unknown as Buffer).some((f) => f.text.includes(': started')) ? true : undefined), 10_000, 'the command started');
        await c.stop({ t: 5 });
        await c.remove();
        await eventually(async () => (events.some((ev) => ev.Action === 'destroy') ? true : undefined), 10_000, 'destroy event');
        const actions = events.filter((ev) => ev.Actor.ID === c.id).map((ev) => ev.Action);
        const order = ['create', 'start', 'kill', 'die', 'stop', 'destroy'];
        for (const a of order) expect(actions).toContain(a);
        const idx = order.map((a) => actions.indexOf(a));
        expect([...idx].sort((a, b) => a - b)).toEqual(idx);
        const die = events.find((ev) => ev.Action === 'die')!;
        expect(die.Type).toBe('container');
        expect(die.scope).toBe('local');
        expect(die.Actor.Attributes).toMatchObject({ exitCode: '0', image: APP1, 'io.fleetlab.events': '1' });
        expect(die.Actor.Attributes.name).toMatch(/^contract-/);
        expect(typeof die.time).toBe('number');
        expect(Math.floor(die.timeNano / 1e9)).toBe(die.time);
        expect(events.find((ev) => ev.Action === 'kill')!.Actor.Attributes.signal).toBe('15');
      } finally {
        stream.destroy();
      }
    });

    it("keep the supervisor's snapshot current: kept while nothing happens, dropped when another client stops a container", async () => {
      // The supervisor reads its engine view from a snapshot kept until the stream reports a change.
      const device = `contract${e.runId}`;
      const engine = new Engine({ socketPath: e.socketPath, device, snapshotFromEvents: true });
      try {
        const c = await create({ Cmd: ['sleep', '1000'], Labels: { [LABEL.device]: device, [LABEL.appId]: '1', [LABEL.serviceName]: 'main' } });
        await c.start();
        // Kept once the stream is open; other tests' events on a shared dockerd may drop one now and then.
        const kept = await eventually(async () => {
          const a = await engine.snapshot();
          return (await engine.snapshot()) === a ? a : undefined;
        }, 20_000, 'a kept snapshot');
        expect(kept.containers.map((x) => [x.id, x.state])).toEqual([[c.id, 'running']]);
        await c.stop({ t: 0 });
        await eventually(async () => ((await engine.snapshot()).containers[0]?.state === 'exited' ? true : undefined), 10_000, 'the stop seen through the event stream');
      } finally {
        engine.close();
      }
    });
  });

  describe('events replay', () => {
    it('since/until replays past events and ends the stream', async () => {
      const since = Math.floor(Date.now() / 1000) - 1;
      const volName = name('ev');
      await docker.createVolume({ Name: volName, Labels: e.labels });
      await docker.getVolume(volName).remove();
      await new Promise((r) => setTimeout(r, 1100));
      const until = Math.floor(Date.now() / 1000);
      const stream = (await docker.getEvents({ since, until, filters: { type: ['volume'], volume: [volName] } })) as unknown as Readable;
      let text = '';
      for await (const chunk of stream) text += (chunk as Buffer).toString('utf8');
      const events = text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { Type: string; Action: string; Actor: { ID: string; Attributes: Record<string, string> } });
      expect(events.map((ev) => ev.Action)).toEqual(['create', 'destroy']);
      expect(events[0]).toMatchObject({ Type: 'volume', Actor: { ID: volName, Attributes: { driver: 'local' } } });
    });
  });

  describe('volumes', () => {
    it('create, list by label, inspect (Mountpoint on disk), in-use 409, remove, 404', async () => {
      const volName = name('v');
      await docker.createVolume({ Name: volName, Labels: { ...e.labels, 'io.fleetlab.vol': 'x' } });
      const listed = await docker.listVolumes({ filters: { label: [`${CONTRACT_LABEL}=${e.runId}`, 'io.fleetlab.vol=x'] } });
      expect(listed.Volumes.map((x) => x.Name)).toEqual([volName]);
      const info = await docker.getVolume(volName).inspect();
      expect(info).toMatchObject({ Name: volName, Driver: 'local', Scope: 'local', Labels: { 'io.fleetlab.vol': 'x' } });
      expect(existsSync(info.Mountpoint)).toBe(true);
      writeFileSync(join(info.Mountpoint, 'marker'), 'data');
      const c = await create({ HostConfig: { Binds: [`${volName}:/data`] } });
      const inUse = await engineError(docker.getVolume(volName).remove());
      expect(inUse.statusCode).toBe(409);
      expect(inUse.message).toBe(`remove ${volName}: volume is in use - [${c.id}]`);
      await c.remove({ force: true });
      await docker.getVolume(volName).remove();
      expect(existsSync(info.Mountpoint)).toBe(false);
      const gone = await engineError(docker.getVolume(volName).inspect());
      expect(gone.statusCode).toBe(404);
      expect(gone.message).toBe(`get ${volName}: no such volume`);
    });
  });

  describe('networks', () => {
    it('create with labels and driver, duplicate 409, list by label, inspect, connect/disconnect, remove, 404', async () => {
      const netName = name('n');
      const net = await docker.createNetwork({ Name: netName, Driver: 'bridge', CheckDuplicate: true, Labels: { ...e.labels, 'io.fleetlab.net': 'y' } });
      expect(net.id).toMatch(/^[0-9a-f]{64}$/);
      const dup = await engineError(docker.createNetwork({ Name: netName, CheckDuplicate: true, Labels: e.labels }));
      expect(dup.statusCode).toBe(409);
      expect(dup.message).toBe(`network with name ${netName} already exists`);
      const listed = await docker.listNetworks({ filters: { label: [`${CONTRACT_LABEL}=${e.runId}`, 'io.fleetlab.net=y'] } });
      expect(listed.map((x) => x.Name)).toEqual([netName]);
      const info = await net.inspect();
      expect(info).toMatchObject({ Name: netName, Id: net.id, Driver: 'bridge', Scope: 'local', Labels: { 'io.fleetlab.net': 'y' } });
      expect(info.IPAM?.Config?.[0]?.Subnet).toMatch(/^\d+\.\d+\.\d+\.\d+\/\d+$/);
      const c = await create();
      await c.start();
      await net.connect({ Container: c.id, EndpointConfig: { Aliases: ['extra'] } });
      const connected = (await c.inspect()).NetworkSettings.Networks[netName];
      expect(connected?.NetworkID).toBe(net.id);
      expect(connected?.IPAddress).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      expect(Object.keys((await net.inspect()).Containers ?? {})).toEqual([c.id]);
      await net.disconnect({ Container: c.id });
      expect((await c.inspect()).NetworkSettings.Networks[netName]).toBeUndefined();
      await net.remove();
      const gone = await engineError(docker.getNetwork(net.id).inspect());
      expect(gone.statusCode).toBe(404);
      expect(gone.message).toBe(`network ${net.id} not found`);
      const builtin = (await docker.listNetworks()).map((x) => x.Name);
      expect(builtin).toEqual(expect.arrayContaining(['bridge', 'host', 'none']));
    });

    it('IPAM: the subnet and gateway asked for, shown as asked; overlaps 403, a gateway outside 500; a container on two networks has an address in each', async () => {
      // A /24 of 10.251/16 this run alone is likely to use on a shared dockerd.
      const third = Number.parseInt(e.runId.slice(0, 2), 16);
      const subnet = `10.251.${third}.0/25`;
      const withGateway = await docker.createNetwork({ Name: name('ipam'), CheckDuplicate: true, Labels: e.labels, IPAM: { Driver: 'default', Config: [{ Subnet: subnet, Gateway: `10.251.${third}.1` }] } });
      expect((await withGateway.inspect()).IPAM).toEqual({ Driver: 'default', Options: null, Config: [{ Subnet: subnet, Gateway: `10.251.${third}.1` }] });
      const overlap = await engineError(docker.createNetwork({ Name: name('ipam'), Labels: e.labels, IPAM: { Config: [{ Subnet: `10.251.${third}.64/26` }] } }));
      expect([overlap.statusCode, overlap.message]).toEqual([403, 'Pool overlaps with other one on this address space']);
      const outside = await engineError(docker.createNetwork({ Name: name('ipam'), Labels: e.labels, IPAM: { Config: [{ Subnet: `10.251.${third}.128/25`, Gateway: '10.252.0.1' }] } }));
      expect([outside.statusCode, outside.message]).toEqual([500, 'failed to allocate gateway (10.252.0.1): Requested address is out of range']);
      // Without a gateway dockerd shows none, and gives the bridge the first address all the same.
      const noGateway = await docker.createNetwork({ Name: name('ipam'), Labels: e.labels, IPAM: { Config: [{ Subnet: `10.251.${third}.128/25` }] } });
      expect((await noGateway.inspect()).IPAM?.Config).toEqual([{ Subnet: `10.251.${third}.128/25` }]);
      const picked = await docker.createNetwork({ Name: name('ipam'), Labels: e.labels });
      const pickedConfig = (await picked.inspect()).IPAM?.Config?.[0];
      expect(pickedConfig?.Gateway).toMatch(/^\d+\.\d+\.\d+\.1$/);

      const c = await create({ HostConfig: { NetworkMode: picked.id } });
      await withGateway.connect({ Container: c.id, EndpointConfig: {} });
      await c.start();
      const endpoints = (await c.inspect()).NetworkSettings.Networks;
      expect(Object.keys(endpoints).sort()).toEqual([(await picked.inspect()).Name, (await withGateway.inspect()).Name].sort());
      const onSubnet = Object.values(endpoints).find((ep) => ep.Gateway === `10.251.${third}.1`)!;
      expect([onSubnet.IPAddress, onSubnet.IPPrefixLen]).toEqual([`10.251.${third}.2`, 25]);
      // Joined without aliases, it has the short id only, as on any user network.
      expect(onSubnet.Aliases).toEqual([c.id.slice(0, 12)]);
      expect(Object.values((await withGateway.inspect()).Containers ?? {}).map((x) => x.IPv4Address)).toEqual([`10.251.${third}.2/25`]);
      await c.remove({ force: true });
      for (const n of [withGateway, noGateway, picked]) await n.remove();
    });
  });
});

/**
 * Shape parity: the same objects made on both engines carry the same field names, so code
 * that reads a field on one finds it on the other.
 */
describe('shape parity between dockerd and the simulated engine', () => {
  let real: EngineUnderTest;
  let sim: EngineUnderTest;

  beforeAll(async () => {
    real = await startEngineUnderTest('dockerd');
    sim = await startEngineUnderTest('sim');
    await pullMessages(sim.docker, APP1);
  });
  afterAll(async () => {
    await real?.close();
    await sim?.close();
  });

  /** Field names, recursively for the nested objects listed in `deep`. */
  function keys(o: Record<string, unknown>, deep: string[] = []): string[] {
    const out = Object.keys(o).sort();
    for (const d of deep) {
      const inner = o[d];
      if (inner && typeof inner === 'object' && !Array.isArray(inner)) out.push(...Object.keys(inner as object).sort().map((k) => `${d}.${k}`));
    }
    return out;
  }

  async function make(eut: EngineUnderTest) {
    const vol = `contract-${eut.runId}-parity`;
    const net = await eut.docker.createNetwork({ Name: `contract-${eut.runId}-pnet`, Labels: eut.labels });
    const c = await eut.docker.createContainer({ Image: APP1, name: `contract-${eut.runId}-parity`, Labels: eut.labels, HostConfig: { Binds: [`${vol}:/data`], RestartPolicy: { Name: 'always' } } });
    await c.start();
    const [summary] = await eut.docker.listContainers({ filters: { id: [c.id] } });
    const [image] = (await eut.docker.listImages()).filter((i) => i.RepoTags?.includes(APP1));
    const result = {
      inspect: (await c.inspect()) as unknown as Record<string, unknown>,
      summary: summary as unknown as Record<string, unknown>,
      image: image as unknown as Record<string, unknown>,
      imageInspect: (await eut.docker.getImage(APP1).inspect()) as unknown as Record<string, unknown>,
      volume: (await eut.docker.getVolume(vol).inspect()) as unknown as Record<string, unknown>,
      network: (await net.inspect()) as unknown as Record<string, unknown>,
    };
    await c.remove({ force: true });
    await eut.docker.getVolume(vol).remove();
    await net.remove();
    return result;
  }

  it('container inspect and list, image list and inspect, volume and network inspect have the same field names', async () => {
    const [a, b] = [await make(real), await make(sim)];
    expect(keys(b.inspect, ['State', 'Config', 'NetworkSettings'])).toEqual(keys(a.inspect, ['State', 'Config', 'NetworkSettings']));
    // HostConfig: dockerd lists every resource knob; the fields fleetlab reads must be there.
    expect(Object.keys(b.inspect.HostConfig as object)).toEqual(expect.arrayContaining(['Binds', 'NetworkMode', 'RestartPolicy', 'LogConfig', 'AutoRemove', 'Privileged']));
    expect(keys(b.summary, ['HostConfig', 'NetworkSettings'])).toEqual(keys(a.summary, ['HostConfig', 'NetworkSettings']));
    expect(keys(b.image)).toEqual(keys(a.image));
    expect(keys(b.imageInspect, ['Config', 'RootFS'])).toEqual(keys(a.imageInspect, ['Config', 'RootFS']));
    expect(keys(b.volume)).toEqual(keys(a.volume));
    expect(keys(b.network, ['IPAM'])).toEqual(keys(a.network, ['IPAM']));
    const mountA = (a.inspect.Mounts as Array<Record<string, unknown>>)[0]!;
    const mountB = (b.inspect.Mounts as Array<Record<string, unknown>>)[0]!;
    expect(keys(mountB)).toEqual(keys(mountA));
    const netA = Object.values((a.inspect.NetworkSettings as { Networks: Record<string, Record<string, unknown>> }).Networks)[0]!;
    const netB = Object.values((b.inspect.NetworkSettings as { Networks: Record<string, Record<string, unknown>> }).Networks)[0]!;
    expect(keys(netB)).toEqual(keys(netA));
  });
});
