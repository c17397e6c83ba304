/**
 * What a simulated device's own host network costs on dockerd (sim/host-network.ts): the
 * device's start (SimDevice.start until the API answers /ping) with its host-network container
 * and without it (sharedHostNetwork: host-network services in the machine's network, where two
 * devices collide), interleaved so a change of load hits both alike; then what the container
 * itself holds while it sleeps. The first start of a machine also imports its image (busybox,
 * once); that import is timed apart. Prints the figures; asserts nothing.
 *
 *   npx tsx bench/host-network.bench.ts [--starts N]
 */
import { cpus, loadavg } from 'node:os';
import Docker from 'dockerode';
import { SimDevice } from '../sim/device.js';
import { HOST_NETWORK_IMAGE, ensureHostNetworkImage } from '../sim/images/test-images.js';
import { hostNetworkContainerName } from '../sim/host-network.js';
import { percentile } from './percentile.js';

const socket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
const i = process.argv.indexOf('--starts');
const starts = i >= 0 ? Number(process.argv[i + 1]) : 5;
if (!Number.isInteger(starts) || starts < 1) throw new Error(`--starts must be a whole number of at least 1, got ${process.argv[i + 1]}`);

const docker = new Docker({ socketPath: socket });
const ms = (n: number) => `${n.toFixed(0)} ms`;

async function timedStart(shared: boolean): Promise<{ ms: number; memory?: number }> {
  const t0 = performance.now();
  const device = await SimDevice.start({ port: 0, engine: 'docker', dockerSocket: socket, localMode: true, ...(shared ? { sharedHostNetwork: true } : {}) });
  const took = performance.now() - t0;
  try {
    if (shared) return { ms: took };
    // What the sleeping container holds: its cgroup's memory, as the engine reports it.
    const stats = (await docker.getContainer(hostNetworkContainerName(device.info().uuid)).stats({ stream: false })) as { memory_stats?: { usage?: number } };
    return { ms: took, ...(stats.memory_stats?.usage ? { memory: stats.memory_stats.usage } : {}) };
  } finally {
    await device.stop();
  }
}

async function main(): Promise<void> {
  console.log(`host-network bench: ${starts} starts each, ${cpus().length} cores (${cpus()[0]?.model ?? '?'}), load ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  const hadImage = await docker.getImage(HOST_NETWORK_IMAGE).inspect().then(() => true, () => false);
  if (hadImage) await docker.getImage(HOST_NETWORK_IMAGE).remove();
  const t0 = performance.now();
  await ensureHostNetworkImage(socket);
  console.log(`  image ${HOST_NETWORK_IMAGE} import (once per engine): ${ms(performance.now() - t0)}`);
  // One of each first, not counted: node's and dockerd's caches warm.
  await timedStart(false);
  await timedStart(true);
  const own: number[] = [];
  const shared: number[] = [];
  const memory: number[] = [];
  for (let n = 0; n < starts; n++) {
    const a = await timedStart(false);
    own.push(a.ms);
    if (a.memory) memory.push(a.memory);
    shared.push((await timedStart(true)).ms);
  }
  own.sort((a, b) => a - b);
  shared.sort((a, b) => a - b);
  const row = (label: string, xs: number[]) => `  ${label.padEnd(44)} median ${ms(percentile(xs, 50))}, min ${ms(xs[0]!)}, max ${ms(xs.at(-1)!)}`;
  console.log(row('device start, own host-network container', own));
  console.log(row('device start, the machine\'s network (shared)', shared));
  console.log(`  cost of the container: ${ms(percentile(own, 50) - percentile(shared, 50))} on the median start`);
  if (memory.length) console.log(`  the sleeping container's memory (cgroup usage): ${(percentile(memory.sort((a, b) => a - b), 50) / 1e6).toFixed(1)} MB`);
}

await main();
