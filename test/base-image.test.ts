/**
 * The base image a team's Dockerfiles build FROM, on the real dockerd, used as an app uses it:
 * a web server from the image on a user-defined network under a compose-style service name
 * (a network alias), and a client from the same image that calls it with `wget -T`, which
 * Debian's busybox-static 1.35 answered with a segfault (exit 139). Name lookups go through
 * what dockerd gives the container: its resolver in /etc/resolv.conf and its /etc/hosts.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cacheRoot } from '../device-image/tools.js';
import { startSimEngine } from '../sim/engine/index.js';
import { BASE_IMAGE, BASE_RECIPE, BASE_RECIPE_LABEL, ensureBaseImage } from '../sim/images/base-image.js';
import { eventually } from './helpers/engine-targets.js';
import { cannotMakeUsers, makeDockerUser, type TempUser } from './helpers/temp-user.js';

const SOCKET = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
const docker = new Docker({ socketPath: SOCKET });
const suffix = randomBytes(4).toString('hex');
const network = `fleetlab-test-base-${suffix}`;
const PAGE = 'hello from web';
let webAddress: string;

/** Multiplexed log frames (8-byte headers) as one string. */
function demux(raw: Buffer): string {
  let out = '';
  for (let at = 0; at + 8 <= raw.length; at += 8 + raw.readUInt32BE(at + 4)) out += raw.subarray(at + 8, at + 8 + raw.readUInt32BE(at + 4)).toString();
  return out;
}

/** Runs `sh -c script` in a container of the base on the test network; its exit code and output. */
async function run(script: string, hostConfig: Docker.HostConfig = {}): Promise<{ code: number; out: string }> {
  const c = await docker.createContainer({ name: `fleetlab-test-base-client-${suffix}-${randomBytes(2).toString('hex')}`, Image: BASE_IMAGE, Cmd: ['sh', '-c', script], HostConfig: { NetworkMode: network, ...hostConfig } });
  try {
    await c.start();
    const { StatusCode } = (await c.wait()) as { StatusCode: number };
    return { code: StatusCode, out: demux(await c.logs({ stdout: true, stderr: true })) };
  } finally {
    await c.remove({ force: true });
  }
}

beforeAll(async () => {
  await ensureBaseImage(SOCKET, undefined, { cacheDir: cacheRoot() });
  await docker.createNetwork({ Name: network, Driver: 'bridge' });
  // busybox httpd binds its port before it goes to the background, so "listening" means listening.
  const web = await docker.createContainer({
    name: `fleetlab-test-base-web-${suffix}`,
    Image: BASE_IMAGE,
    Cmd: ['sh', '-c', `mkdir -p /www && echo "${PAGE}" > /www/index.html && httpd -p 8080 -h /www && echo listening && trap 'exit 0' TERM && while :; do sleep 1; done`],
    HostConfig: { NetworkMode: network },
    NetworkingConfig: { EndpointsConfig: { [network]: { Aliases: ['web'] } } },
  });
  await web.start();
  await eventually(async () => (demux(await web.logs({ stdout: true, stderr: true })).includes('listening') ? true : undefined), 30_000, 'the web container listens');
  webAddress = (await web.inspect()).NetworkSettings.Networks[network]!.IPAddress;
});

afterAll(async () => {
  for (const c of await docker.listContainers({ all: true, filters: { name: [`fleetlab-test-base-`] } })) {
    if (c.Names.some((n) => n.includes(suffix))) await docker.getContainer(c.Id).remove({ force: true });
  }
  await docker.getNetwork(network).remove().catch(() => undefined);
});

describe(`${BASE_IMAGE} on dockerd`, () => {
  it('is the current recipe, for this machine, with a shell as its command', async () => {
    const image = await docker.getImage(BASE_IMAGE).inspect();
    expect(image.Config.Labels?.[BASE_RECIPE_LABEL]).toBe(BASE_RECIPE);
    expect(image.Architecture).toBe(process.arch === 'x64' ? 'amd64' : process.arch);
    expect(image.Config.Cmd).toEqual(['/bin/sh']);
    expect(await ensureBaseImage(SOCKET)).toBe(false);
  });

  it('wget -T 5 reaches another container by its service name on a user network and exits 0', async () => {
    expect(await run('wget -T 5 -qO- http://web:8080/')).toEqual({ code: 0, out: `${PAGE}\n` });
  });

  it("resolves through dockerd's resolver and /etc/hosts as dockerd writes them", async () => {
    const r = await run('grep "^nameserver" /etc/resolv.conf; wget -T 5 -qO- http://from-hosts:8080/', { ExtraHosts: [`from-hosts:${webAddress}`] });
    // On a user network dockerd's embedded resolver answers for the service names.
    expect(r).toEqual({ code: 0, out: `nameserver 127.0.0.11\n${PAGE}\n` });
  });

  it('wget -T fails on a name nothing resolves with a message and exit 1, not a crash', async () => {
    const r = await run('wget -T 2 -qO- http://no-such-service:8080/');
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/bad address 'no-such-service/);
  });
});

describe(`${BASE_IMAGE} on the simulated engine`, () => {
  it('is imported with the same config, so a device there runs what it runs on dockerd', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-base-sim-'));
    const engine = await startSimEngine({ socketPath: join(dir, 'engine.sock'), dataDir: join(dir, 'data') });
    try {
      expect(await ensureBaseImage(engine.socketPath, undefined, { cacheDir: cacheRoot() })).toBe(true);
      const image = await new Docker({ socketPath: engine.socketPath }).getImage(BASE_IMAGE).inspect();
      expect(image.Config.Labels?.[BASE_RECIPE_LABEL]).toBe(BASE_RECIPE);
      expect(image.Config.Cmd).toEqual(['/bin/sh']);
      expect(image.Config.Env).toContain('PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
      expect(await ensureBaseImage(engine.socketPath)).toBe(false);
    } finally {
      await engine.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

const noUser = cannotMakeUsers();
if (noUser) console.log(`base image as a user other than root: skipped: ${noUser}`);

describe.skipIf(noUser !== undefined)(`${BASE_IMAGE} made by a user who is not root`, () => {
  let user: TempUser | undefined;
  afterAll(() => user?.remove());

  it("fetches and unpacks trixie's busybox and lists its applets without root, as a CI runner's user would", async () => {
    user = makeDockerUser('flbase');
    const tar = join(user.home, 'rootfs.tar');
    const script = `import { writeBaseRootfsTar } from ${JSON.stringify(join(import.meta.dirname, '..', 'sim/images/base-image.ts'))};\nawait writeBaseRootfsTar(${JSON.stringify(process.arch === 'arm64' ? 'arm64' : 'amd64')}, ${JSON.stringify(tar)}, (e) => console.log(e.step), 'http://deb.debian.org/debian');`;
    const made = await user.run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], join(import.meta.dirname, '..'), { timeoutMs: 300_000 });
    expect(made.code, made.out).toBe(0);
    const listed = await execa('tar', ['-tvf', tar]);
    expect(listed.stdout).toMatch(/\.\/usr\/bin\/busybox$/m);
    expect(listed.stdout).toMatch(/-> \/bin\/busybox$/m); // the applets' links
    expect(listed.stdout).toMatch(/\.\/usr\/bin\/wget -> \/bin\/busybox$/m);
    // Owned by root in the image, whoever made it.
    expect(listed.stdout.split('\n').filter(Boolean).every((l) => l.includes(' 0/0 '))).toBe(true);
  }, 360_000);
});
