/**
 * `fleetlab replay`: starts a simulated device in the state a bundle captured, then lets its
 * supervisor run, so the bug the field device had happens again here. The plan is
 * replay-plan.ts; this carries it out, in the order a device would have had things: images,
 * networks and volumes, then containers (started, or started and stopped, as captured), the
 * lock files, and last the supervisor's store, which its first start reads.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { arch as osArch, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { FleetlabError, errorText } from '../../src/errors.js';
import { writeFileAtomicSync } from '../../src/atomic-file.js';
import { freePort } from '../../src/free-port.js';
import { engineArch } from '../../src/supervisor/adapters/engine.js';
import { newKey } from '../../src/supervisor/state/keys.js';
import type { DeviceRecord } from '../../src/supervisor/state/store.js';
import { SimDevice, type SimDeviceOptions } from '../../sim/device.js';
import { engineAt } from '../../sim/engine-at.js';
import { importStandInImages } from '../../sim/images/test-images.js';
import { readBundle, type Bundle } from './bundle.js';
import type { CapturedLocks } from './capture.js';
import { planReplay, type CapturedDevice, type ReplayPlan } from './replay-plan.js';

export interface ReplayOptions {
  bundle: string;
  /** Device API port; 0 or absent picks a free one. */
  port?: number;
  /** Where the replayed device keeps its data; default a new temporary directory. */
  dataDir?: string;
  log?: (line: string) => void;
}

export interface Replayed {
  device: SimDevice;
  plan: ReplayPlan;
}

export interface Replayable {
  plan: ReplayPlan;
  sim: SimDeviceOptions;
}

const replayError = (message: string) => new FleetlabError('HIL_ERR_CAPTURE', message);

/** The parts of a bundle a replay needs; a bundle without them says how to capture one that has them. */
export function capturedDevice(bundle: Bundle, path: string): CapturedDevice {
  const need = (file: string, step: string) => {
    if (bundle.names().includes(file)) return bundle.json<unknown>(file);
    const why = bundle.manifest.steps.find((s) => s.name === step)?.error;
    throw replayError(`${path} has no ${file}, which a replay starts from: the capture's "${step}" step ${why ? `failed: ${why}` : 'did not run'}. Capture with a shell on the device (--sim-dir for a simulated device)`);
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
  };
}

/**
 * How to start a simulated device (its own simulated engine) in the bundle's state: the
 * SimDevice options, whose `prepare` carries the plan out before the supervisor first starts.
 */
export async function replaySimOptions(options: ReplayOptions): Promise<Replayable> {
  const log = options.log ?? (() => undefined);
  const captured = capturedDevice(await readBundle(options.bundle), options.bundle);
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'fleetlab-replay-')));
  const port = options.port || (await freePort());
  const plan = planReplay(captured, {
    lockRoot: join(dataDir, 'locks'),
    supervisorAddress: `http://127.0.0.1:${port}`,
    supervisorPort: port,
    arch: engineArch(osArch()),
    newKey,
  });
  log(`replaying device ${plan.store.uuid} from ${options.bundle}`);
  return {
    plan,
    sim: {
      port,
      dataDir,
      engine: 'sim',
      dockerSocket: '',
      localMode: plan.store.localMode,
      vendor: plan.vendor,
      deviceType: plan.deviceType,
      prepare: (d) => carryOut(plan, d, log),
    },
  };
}

/** Starts a simulated device in the bundle's state; its supervisor runs from there. */
export async function replayOnSim(options: ReplayOptions): Promise<Replayed> {
  const { plan, sim } = await replaySimOptions(options);
  return { device: await SimDevice.start(sim), plan };
}

async function carryOut(plan: ReplayPlan, device: SimDevice, log: (line: string) => void): Promise<void> {
  const socket = device.options.dockerSocket;
  const docker = await engineAt(socket);
  const step = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      throw replayError(`replay: ${what}: ${errorText(err)}`);
    }
  };
  if (plan.images.length) log(`images: ${plan.images.length} stand-ins`);
  await step('importing stand-in images', () => importStandInImages(socket, plan.images));
  for (const n of plan.networks) {
    await step(`creating network ${n.Name}`, async () => {
      await docker.createNetwork({ Name: n.Name, CheckDuplicate: true, ...(n.Driver ? { Driver: n.Driver } : {}), ...(n.Internal ? { Internal: true } : {}), Labels: n.Labels ?? {} });
    });
  }
  for (const v of plan.volumes) {
    await step(`creating volume ${v.Name}`, async () => {
      await docker.createVolume({ Name: v.Name, Labels: v.Labels ?? {}, ...(v.Driver ? { Driver: v.Driver } : {}) });
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
  for (const lock of plan.locks) {
    mkdirSync(dirname(lock.file), { recursive: true });
    writeFileSync(lock.file, lock.content);
  }
  if (plan.locks.length) log(`lock files: ${plan.locks.map((l) => l.file).join(', ')}`);
  writeFileAtomicSync(join(device.paths.dataDir, 'device.json'), JSON.stringify(plan.store, null, 2));
  for (const note of plan.notes) log(`note: ${note}`);
}
