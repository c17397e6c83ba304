/**
 * `fleetlab replay`: starts a simulated device in the state a bundle captured, then lets its
 * supervisor run, so the bug the field device had happens again here. The plan is
 * replay-plan.ts; this carries it out, in the order a device would have had things: images,
 * networks and volumes, then containers (started, or started and stopped, as captured), the
 * lock files, and last the supervisor's store, which its first start reads.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { arch as osArch, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { FleetlabError, errorText } from '../../src/errors.js';
import { writeFileAtomicSync } from '../../src/atomic-file.js';
import { freePort } from '../../src/free-port.js';
import { LABEL } from '../../src/protocol/engine-labels.js';
import { engineArch } from '../../src/supervisor/adapters/engine.js';
import { newKey } from '../../src/supervisor/state/keys.js';
import type { DeviceRecord } from '../../src/supervisor/state/store.js';
import { SimDevice, simDeviceFiles, type SimDeviceOptions } from '../../sim/device.js';
import { engineAt } from '../../src/engine-client/engine-at.js';
import { importStandInImages, splitRef } from '../../sim/images/test-images.js';
import { removeDeviceLeftovers } from '../../sim/device-leftovers.js';
import type Docker from 'dockerode';
import type { RawCommandResult } from '../../device-access/files-over-commands.js';
import type { FilesProtocol } from '../../device-access/protocols.js';
import { readBundle, type Bundle } from './bundle.js';
import { capturedCloudRows, openReplayCloud, type ReplayCloud } from './replay-cloud.js';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar';
import type { CapturedLocks, CapturedVolume, ClockReading } from './capture.js';
import { planReplay, type CapturedDevice, type CapturedHostConfig, type ReplayPlan } from './replay-plan.js';

export interface ReplayOptions {
  bundle: string;
  /** Device API port; 0 or absent picks a free one. */
  port?: number;
  /**
   * Where the replayed device keeps its data; default a new temporary directory. One that
   * holds a replayed device already (its store) resumes it: a power cycle of a replay.
   */
  dataDir?: string;
  /**
   * `sim` (default): an engine of its own. `docker`: the dockerd at `dockerSocket`, shared,
   * which must not run the captured device already; images it has are used as they are.
   */
  engine?: 'sim' | 'docker';
  dockerSocket?: string;
  /** Address the device API listens on; default 127.0.0.1 (0.0.0.0 inside a container). */
  listenAddress?: string;
  /** Start the supervisor stopped for a debugger on this loopback port (`--paused`). */
  inspectBrk?: number;
  /**
   * Start a local cloud seeded with the bundle's cloud rows (`--cloud`), on this port (0: any),
   * and have the replayed device follow it; its poll and report intervals as given.
   */
  cloud?: { port?: number; pollIntervalMs?: number; reportIntervalMs?: number };
  log?: (line: string) => void;
}

export interface Replayed {
  device: SimDevice;
  plan: ReplayPlan;
  /** The local cloud the device follows (`cloud`); the caller closes it after the device. */
  cloud?: ReplayCloud;
}

export interface Replayable {
  plan: ReplayPlan;
  sim: SimDeviceOptions;
  cloud?: ReplayCloud;
}

const replayError = (message: string) => new FleetlabError('HIL_ERR_CAPTURE', message);

/** The parts of a bundle a replay needs; a bundle without them says how to capture one that has them. */
export function capturedDevice(bundle: Bundle, path: string): CapturedDevice {
  const need = (file: string, step: string) => {
    if (bundle.names().includes(file)) return bundle.json<unknown>(file);
    const why = bundle.manifest.steps.find((s) => s.name === step)?.error;
    throw replayError(`${path} has no ${file}, which a replay starts from: the capture's "${step}" step ${why ? `failed: ${why}` : 'did not run'}. Capture with a shell on the device (--sim-dir for a simulated device on this host, --board for a lab board)`);
  };
  const store = need('supervisor/store.json', 'store') as DeviceRecord;
  const locks = need('supervisor/locks.json', 'locks') as CapturedLocks;
  const containers = need('engine/containers.json', 'engine') as CapturedDevice['containers'];
  return {
    store,
    locks,
    containers,
    images: need('engine/images.json', 'engine') as CapturedDevice['images'],
    volumes: need('engine/volumes.json', 'engine') as CapturedDevice['volumes'],
    networks: need('engine/networks.json', 'engine') as CapturedDevice['networks'],
    ...(bundle.has('volumes/index.json') ? { volumeData: volumeDataOf(bundle) } : {}),
    ...(bundle.has('host/config.json') ? { hostConfig: bundle.json<CapturedHostConfig>('host/config.json') } : {}),
    ...(bundle.has('host/clock.json') ? { clock: bundle.json<ClockReading>('host/clock.json') } : {}),
  };
}

function volumeDataOf(bundle: Bundle): NonNullable<CapturedDevice['volumeData']> {
  const index = bundle.json<CapturedVolume[]>('volumes/index.json');
  return {
    archives: new Map(index.filter((v) => v.file).map((v) => [v.name, bundle.read(v.file!)])),
    skipped: index.filter((v) => !v.file).map((v) => ({ name: v.name, why: v.skipped ?? 'not captured' })),
  };
}

/** The plan for a device replayed in `dataDir`, its API on `port`. */
async function planFor(options: ReplayOptions, dataDir: string, port: number): Promise<ReplayPlan & { bundle: Bundle; captured: CapturedDevice }> {
  const bundle = await readBundle(options.bundle);
  const captured = capturedDevice(bundle, options.bundle);
  const plan = planReplay(captured, {
    lockRoot: join(dataDir, 'locks'),
    supervisorAddress: `http://127.0.0.1:${port}`,
    supervisorPort: port,
    arch: engineArch(osArch()),
    newKey,
  });
  return { ...plan, bundle, captured };
}

/**
 * The local cloud of a replay with `cloud`, seeded from the bundle (or resumed from `dataDir`),
 * and the plan with the device following it under the key that cloud knows it by.
 */
async function withCloud(plan: ReplayPlan & { bundle: Bundle; captured: CapturedDevice }, options: ReplayOptions, dataDir: string, log: (line: string) => void): Promise<{ plan: ReplayPlan; cloud: ReplayCloud }> {
  if (plan.store.localMode) throw replayError(`${options.bundle}: the device was in local mode and followed no cloud; replay it without --cloud`);
  const rows = capturedCloudRows(plan.bundle, options.bundle);
  const cloud = await openReplayCloud({ dataDir: join(dataDir, 'cloud'), port: options.cloud?.port ?? 0, rows, store: plan.store, containers: plan.captured.containers, deviceType: plan.deviceType, newKey });
  log(`local cloud ${cloud.url} (admin key ${cloud.adminKey}): fleet ${cloud.fleet.name} (id ${cloud.fleet.id}) as captured, device ${plan.store.uuid} registered in it`);
  for (const note of cloud.notes) log(`note: ${note}`);
  return { plan: { ...plan, store: { ...plan.store, registered: true, cloudKey: cloud.deviceKey } }, cloud };
}

/** What a simulated device is started with to run as the captured one (vendor, device type, mode). */
const deviceOptions = (plan: ReplayPlan) => ({ localMode: plan.store.localMode, vendor: plan.vendor, deviceType: plan.deviceType, ...(plan.clockOffsetMs ? { clockOffsetMs: plan.clockOffsetMs } : {}) });

/**
 * How to start a simulated device in the bundle's state: the SimDevice options, whose
 * `prepare` carries the plan out before the supervisor first starts.
 */
export async function replaySimOptions(options: ReplayOptions): Promise<Replayable> {
  const log = options.log ?? (() => undefined);
  // A directory the replay makes is no later start's (one resumes only from a named --data-dir).
  const ownsDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'fleetlab-replay-')));
  try {
    const port = options.port || (await freePort());
    const engine = options.engine ?? 'sim';
    const planned = await planFor(options, dataDir, port);
    const resume = existsSync(join(dataDir, 'supervisor', 'device.json'));
    log(resume ? `resuming the device replayed in ${dataDir}` : `replaying device ${planned.store.uuid} from ${options.bundle}`);
    const { plan, cloud } = options.cloud ? await withCloud(planned, options, dataDir, log) : { plan: planned, cloud: undefined };
    const c = options.cloud;
    return {
      plan,
      ...(cloud ? { cloud } : {}),
      sim: {
        port,
        dataDir,
        ownsDataDir,
        engine,
        dockerSocket: options.dockerSocket ?? '',
        ...deviceOptions(plan),
        ...(options.listenAddress ? { listenAddress: options.listenAddress } : {}),
        ...(options.inspectBrk ? { inspectBrk: options.inspectBrk } : {}),
        ...(cloud ? { cloud: { url: cloud.url, provisioningKey: cloud.provisioningKey, ...(c?.pollIntervalMs ? { pollIntervalMs: c.pollIntervalMs } : {}), ...(c?.reportIntervalMs ? { reportIntervalMs: c.reportIntervalMs } : {}) } } : {}),
        ...(resume ? {} : { prepare: (d: SimDevice) => carryOut(plan, hostPlace(d.options.dockerSocket, d.options.dataDir, (name) => d.host.setStaticHostname(name)), engine, log) }),
      },
    };
  } catch (err) {
    // The bundle could not be planned: a directory made for it would be left to no one.
    if (ownsDataDir) await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
}

/** Starts a simulated device in the bundle's state; its supervisor runs from there. */
export async function replayOnSim(options: ReplayOptions): Promise<Replayed> {
  const { plan, sim, cloud } = await replaySimOptions(options);
  try {
    return { device: await SimDevice.start(sim), plan, ...(cloud ? { cloud } : {}) };
  } catch (err) {
    await cloud?.close();
    throw err;
  }
}

/**
 * Puts the bundle's device into a shared dockerd and a simulated device's data dir (the
 * layout SimDevice keeps) before any process of it runs: what a device started elsewhere
 * on that data dir (the container target's) then boots from. Returns what to start it with.
 */
export async function prepareReplayedDevice(options: ReplayOptions & { dataDir: string; port: number; dockerSocket: string }): Promise<ReturnType<typeof deviceOptions>> {
  const log = options.log ?? (() => undefined);
  const plan = await planFor(options, options.dataDir, options.port);
  log(`replaying device ${plan.store.uuid} from ${options.bundle}`);
  await carryOut(plan, hostPlace(options.dockerSocket, options.dataDir), 'docker', log);
  return deviceOptions(plan);
}

/** What a board's replay needs of the board: its engine (forwarded here), its files, its paths. */
export interface BoardAccess {
  /** A unix socket on this host that reaches the board's Engine API. */
  engineSocket: string;
  files: Pick<FilesProtocol, 'write'>;
  /** A command on the board with bytes on its stdin. */
  runRaw(argv: readonly string[], options: { input?: Buffer; timeoutMs?: number }): Promise<RawCommandResult>;
  dataDir: string;
  lockRoot: string;
  /** Where the board keeps redsocks.conf and no_proxy. */
  proxyConfigDir: string;
  /** Names the board's host as its OS does (hostnamectl on a board). */
  setHostname(name: string): Promise<void>;
  /** The supervisor's API port on the board. */
  port: number;
  /** The board's architecture as the platform names it (aarch64). */
  arch: string;
}

/**
 * Puts the bundle's device onto a board whose supervisor is stopped and wiped (the qemu and
 * board targets): its engine objects through the forwarded Engine API, its lock files and
 * store through SSH. Images the board lacks are stood in by commits of one it has (its own
 * architecture), with the captured config. Returns what its supervisor must run with.
 */
export async function prepareReplayOnBoard(options: Pick<ReplayOptions, 'bundle' | 'log'> & { board: BoardAccess }): Promise<ReturnType<typeof deviceOptions>> {
  const log = options.log ?? (() => undefined);
  const { board } = options;
  const captured = capturedDevice(await readBundle(options.bundle), options.bundle);
  const plan = planReplay(captured, { lockRoot: board.lockRoot, supervisorAddress: `http://127.0.0.1:${board.port}`, supervisorPort: board.port, arch: board.arch, newKey });
  log(`replaying device ${plan.store.uuid} from ${options.bundle} on the board`);
  await carryOut(plan, boardPlace(board), 'docker', log);
  return deviceOptions(plan);
}

/** Where a plan is carried out: the device's engine, its files, and how it gets images it lacks. */
interface ReplayPlace {
  dockerSocket: string;
  storeDir: string;
  writeFile(path: string, content: string): Promise<void>;
  /** Unpacks a tar.gz into a directory where the device keeps it. */
  unpack(archive: Buffer, dir: string): Promise<void>;
  standIn(images: ReplayPlan['images'], log: (line: string) => void): Promise<void>;
  /** The host's name and proxy, as the device's OS keeps them. */
  writeHost(host: ReplayPlan['host']): Promise<void>;
}

/** Writes the proxy files into the directory the supervisor reads them from. */
async function writeProxy(host: ReplayPlan['host'], dir: string, write: (path: string, content: string) => Promise<void>): Promise<void> {
  if (host.redsocksConf) await write(join(dir, 'redsocks.conf'), host.redsocksConf);
  if (host.noProxy) await write(join(dir, 'no_proxy'), host.noProxy);
}

/**
 * A simulated device's data dir on this host (the sim target's, or the container target's bind
 * mount): the files are here, and stand-ins are imported busybox (the host's architecture).
 */
function hostPlace(dockerSocket: string, deviceDir: string, setHostname?: (name: string) => Promise<void>): ReplayPlace {
  const files = simDeviceFiles(deviceDir);
  const storeDir = files.dataDir;
  const place: ReplayPlace = {
    dockerSocket,
    storeDir,
    writeFile: async (path, content) => {
      mkdirSync(dirname(path), { recursive: true });
      if (path === join(storeDir, 'device.json')) writeFileAtomicSync(path, content);
      else writeFileSync(path, content);
    },
    unpack: (archive, dir) => pipeline(Readable.from([archive]), tar.x({ cwd: dir, strict: true })),
    standIn: (images) => importStandInImages(dockerSocket, images),
    writeHost: async (host) => {
      // A device whose host OS already runs is renamed through it; one not yet booted, in its file.
      if (host.hostname) await (setHostname ? setHostname(host.hostname) : place.writeFile(files.hostnameFile, `${host.hostname}\n`));
      await writeProxy(host, files.proxyConfigDir, place.writeFile);
    },
  };
  return place;
}

/** Stand-ins on a board are made from an image it has, so they run on its architecture. */
const BOARD_BASES = ['fleetlab/busybox:latest', 'fleetlab/test-app:1'];

function boardPlace(board: BoardAccess): ReplayPlace {
  return {
    writeHost: async (host) => {
      if (host.hostname) await board.setHostname(host.hostname);
      await writeProxy(host, board.proxyConfigDir, (path, content) => board.files.write(path, content));
      // redsocks reads its files when it starts, as after the supervisor's own proxy change.
      if (host.redsocksConf) await board.runRaw(['sh', '-c', 'systemctl try-restart redsocks.service 2>/dev/null || true'], { timeoutMs: 60_000 });
    },
    dockerSocket: board.engineSocket,
    storeDir: board.dataDir,
    writeFile: (path, content) => board.files.write(path, content),
    unpack: async (archive, dir) => {
      const r = await board.runRaw(['tar', '-x', '-z', '-C', dir], { input: archive, timeoutMs: 120_000 });
      if (r.exitCode !== 0) throw new Error(`tar -x into ${dir} on the board exited ${r.exitCode}: ${r.stderr.toString().trim()}`);
    },
    standIn: async (images, log) => {
      const docker = await engineAt(board.engineSocket);
      const base = await firstPresent(docker, BOARD_BASES);
      if (!base) throw new Error(`the board has none of ${BOARD_BASES.join(', ')} to make stand-in images from`);
      for (const image of images) {
        // A container is what a commit takes: created from the base, never started.
        const made = await docker.createContainer({ Image: base, Cmd: ['true'] });
        try {
          await made.commit({ ...splitRef(image.tags[0]!), changes: image.changes });
        } finally {
          await made.remove({ force: true });
        }
        for (const extra of image.tags.slice(1)) await docker.getImage(image.tags[0]!).tag(splitRef(extra));
      }
      log(`stand-ins made from the board's ${base}`);
    },
  };
}

async function firstPresent(docker: Docker, refs: readonly string[]): Promise<string | undefined> {
  for (const ref of refs) if (await docker.getImage(ref).inspect().then(() => true, () => false)) return ref;
  return undefined;
}

async function carryOut(plan: ReplayPlan, place: ReplayPlace, engine: 'sim' | 'docker', log: (line: string) => void): Promise<void> {
  const socket = place.dockerSocket;
  const docker = await engineAt(socket);
  const uuid = plan.store.uuid;
  const ofDevice = { label: [`${LABEL.device}=${uuid}`] };
  const running = await docker.listContainers({ all: true, filters: ofDevice });
  if (running.length) {
    throw replayError(
      `the engine at ${socket} already has containers of device ${uuid} (${running.map((c) => c.Names[0]).join(', ')}): stop that device (the original, or an earlier replay) first; ` +
        `if none runs, they are left from one that was killed: docker -H unix://${socket} rm -f $(docker -H unix://${socket} ps -aq --filter label=${LABEL.device}=${uuid})`,
    );
  }
  // A shared engine keeps what the device left (its volumes) and what other devices use (images).
  const has = {
    image: async (ref: string) => docker.getImage(ref).inspect().then(() => true, () => false),
    volumes: new Set((await docker.listVolumes({ filters: ofDevice })).Volumes?.map((v) => v.Name) ?? []),
    networks: new Set((await docker.listNetworks({ filters: ofDevice })).map((n) => n.Name)),
  };
  // Made half way (a failed step, a stop), the device's objects go again: none is left to be
  // taken for the device's next time. Its volumes stay: they may be what the original left.
  try {
    const step = async (what: string, fn: () => Promise<void>) => {
      try {
        await fn();
      } catch (err) {
        throw replayError(`replay: ${what}: ${errorText(err)}`);
      }
    };
    const standIns: ReplayPlan['images'] = [];
    for (const image of plan.images) {
      if (engine !== 'docker') {
        standIns.push(image);
        continue;
      }
      // A tag the engine has is its own, and is never re-pointed at a stand-in.
      const missing: string[] = [];
      for (const tag of image.tags) if (!(await has.image(tag))) missing.push(tag);
      if (missing.length < image.tags.length) log(`image ${image.tags.filter((t) => !missing.includes(t)).join(' ')}: the engine's own`);
      // In a shared engine a stand-in carries the device's label, so the device's stop removes it with its containers.
      if (missing.length) standIns.push({ ...image, tags: missing, changes: [...image.changes, `LABEL "${LABEL.device}"="${uuid}"`] });
    }
    if (standIns.length) log(`images stood in (same tags, config and labels): ${standIns.map((i) => i.tags.join(' ')).join(', ')}`);
    if (standIns.length) await step('making stand-in images', () => place.standIn(standIns, log));
    for (const n of plan.networks.filter((n) => !has.networks.has(n.Name))) {
      await step(`creating network ${n.Name}`, async () => {
        await docker.createNetwork({ Name: n.Name, CheckDuplicate: true, ...(n.Driver ? { Driver: n.Driver } : {}), ...(n.Internal ? { Internal: true } : {}), Labels: n.Labels ?? {} });
      });
    }
    for (const v of plan.volumes) {
      if (has.volumes.has(v.Name)) {
        // What the device left there is its own latest data: kept, not overwritten with the bundle's.
        if (plan.volumeArchives.has(v.Name)) log(`volume ${v.Name}: the engine has it already, kept as it is`);
        continue;
      }
      await step(`creating volume ${v.Name}`, async () => {
        await docker.createVolume({ Name: v.Name, Labels: v.Labels ?? {}, ...(v.Driver ? { Driver: v.Driver } : {}) });
        const archive = plan.volumeArchives.get(v.Name);
        if (!archive) return;
        const { Mountpoint } = await docker.getVolume(v.Name).inspect();
        await place.unpack(archive, Mountpoint);
        log(`volume ${v.Name}: ${archive.length} bytes of captured contents`);
      });
    }
    for (const c of plan.containers) {
      await step(`creating container ${c.create.name}`, async () => {
        const container = await docker.createContainer(c.create);
        for (const join of c.alsoJoins) await docker.getNetwork(join.network).connect({ Container: container.id, EndpointConfig: join.aliases ? { Aliases: join.aliases } : {} });
        if (c.state !== 'created') await container.start();
        if (c.state === 'exited') await container.stop({ t: 0 }).catch(() => undefined);
      });
    }
    log(`containers: ${plan.containers.map((c) => `${c.create.name} ${c.state}`).join(', ') || 'none'}`);
    for (const lock of plan.locks) await step(`writing lock file ${lock.file}`, () => place.writeFile(lock.file, lock.content));
    if (plan.locks.length) log(`lock files: ${plan.locks.map((l) => l.file).join(', ')}`);
    await step('writing the host config', () => place.writeHost(plan.host));
    if (plan.host.hostname || plan.host.redsocksConf) log(`host config: ${[plan.host.hostname && `hostname ${plan.host.hostname}`, plan.host.redsocksConf && 'proxy'].filter(Boolean).join(', ')}`);
    await step("writing the supervisor's store", () => place.writeFile(join(place.storeDir, 'device.json'), JSON.stringify(plan.store, null, 2)));
  } catch (err) {
    await removeDeviceLeftovers(docker, uuid, { keepVolumes: true }).catch(() => undefined);
    throw err;
  }
  for (const note of plan.notes) log(`note: ${note}`);
}
