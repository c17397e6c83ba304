/**
 * Engine benchmark: the same simulated device (the real supervisor process) once over the
 * real dockerd and once over the simulated engine (sim/engine), in one run. Prints figures,
 * never assertions:
 *
 *   - time from POST /v2/local/target-state to `applied` with 3 services Running: the first
 *     deploy (images present on both engines) and the median of 3 release changes (each
 *     recreates the containers);
 *   - on the simulated engine, the time to pull both test images at the registry bandwidth;
 *   - the ratio dockerd / sim for each.
 *
 * Output: a table, then one JSON line (`{"bench":"engine",...}`). Traffic stays on 127.0.0.1
 * and unix sockets; every loop is bounded.
 *
 *   npx tsx bench/engine.bench.ts     (or compiled: node dist/bench/engine.bench.js)
 *   FLEETLAB_DOCKER_SOCKET=/path/to/docker.sock  FLEETLAB_SIM_BANDWIDTH=bytes/s
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import Docker from 'dockerode';
import { SimDevice } from '../sim/device.js';
import { errorText } from '../src/errors.js';
import type { WireLocalState } from '../src/protocol/target-state.js';

const DOCKER_SOCKET = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
const BANDWIDTH = Number(process.env.FLEETLAB_SIM_BANDWIDTH ?? 10_000_000);
const RELEASE_CHANGES = 3;
const APPLY_BOUND_MS = 120_000;
const POLL_MS = 50;
const IMAGES = ['fleetlab/test-app:1', 'fleetlab/test-app:2'];

function threeServiceState(releaseId: number): { local: WireLocalState } {
  // Alternate the images so every release change recreates every container.
  const [a, b] = releaseId % 2 === 1 ? IMAGES : [IMAGES[1]!, IMAGES[0]!];
  const service = (name: string, id: number, image: string) => ({ serviceName: name, serviceId: id, imageId: 100 + id, image, environment: { RELEASE: String(releaseId) }, labels: {} });
  return {
    local: {
      name: 'bench-engine',
      config: { SUPERVISOR_LOCAL_MODE: '1' },
      apps: {
        '1': {
          name: 'benchapp', commit: `c${releaseId}`, releaseId: String(releaseId),
          services: { '11': service('main', 11, a!), '12': service('worker', 12, b!), '13': service('extra', 13, a!) },
          volumes: {}, networks: {},
        },
      },
    },
  };
}

async function applyAndWait(device: SimDevice, releaseId: number): Promise<number> {
  const { url, apiKey } = device.info();
  const started = performance.now();
  const res = await fetch(`${url}/v2/local/target-state?apikey=${apiKey}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(threeServiceState(releaseId)) });
  if (res.status !== 200) throw new Error(`target-state POST answered ${res.status}: ${await res.text()}`);
  const deadline = Date.now() + APPLY_BOUND_MS;
  let last = '';
  while (Date.now() < deadline) {
    const status = (await (await fetch(`${url}/v2/state/status?apikey=${apiKey}`)).json()) as { appState: string; release: string; containers: Array<{ status: string }> };
    last = JSON.stringify(status);
    if (status.appState === 'applied' && status.release === String(releaseId) && status.containers.length === 3 && status.containers.every((c) => c.status === 'Running')) {
      return performance.now() - started;
    }
    await sleep(POLL_MS);
  }
  throw new Error(`release ${releaseId} not applied within ${APPLY_BOUND_MS} ms: ${last}`);
}

async function pullAll(socketPath: string): Promise<number> {
  const docker = new Docker({ socketPath });
  const started = performance.now();
  await Promise.all(
    IMAGES.map(async (ref) => {
      const stream = await docker.pull(ref);
      await new Promise<void>((resolve, reject) => docker.modem.followProgress(stream, (err: Error | null) => (err ? reject(err) : resolve())));
    }),
  );
  return performance.now() - started;
}

interface Figures {
  pullMs: number | null;
  firstDeployMs: number;
  releaseChangeMedianMs: number;
  releaseChangesMs: number[];
}

async function measure(engine: 'docker' | 'sim'): Promise<Figures> {
  const device = await SimDevice.start({ port: 0, engine, dockerSocket: DOCKER_SOCKET, localMode: true, bandwidth: BANDWIDTH });
  try {
    // dockerd has the test images built locally; the simulated engine pulls them first.
    const pullMs = device.simEngine ? await pullAll(device.simEngine.socketPath) : null;
    const firstDeployMs = await applyAndWait(device, 1);
    const changes: number[] = [];
    for (let r = 2; r < 2 + RELEASE_CHANGES; r++) changes.push(await applyAndWait(device, r));
    const sorted = [...changes].sort((a, b) => a - b);
    return { pullMs, firstDeployMs, releaseChangeMedianMs: sorted[Math.floor(sorted.length / 2)]!, releaseChangesMs: changes };
  } finally {
    await device.stop();
  }
}

const ms = (n: number | null) => (n === null ? '-' : `${n.toFixed(0)} ms`);
const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;

try {
  const dockerd = await measure('docker');
  const sim = await measure('sim');
  const out = {
    bench: 'engine',
    bandwidthBytesPerSecond: BANDWIDTH,
    dockerd,
    sim,
    ratio: { firstDeploy: ratio(dockerd.firstDeployMs, sim.firstDeployMs), releaseChange: ratio(dockerd.releaseChangeMedianMs, sim.releaseChangeMedianMs) },
  };
  console.log('3-service release, POST /v2/local/target-state -> applied, all Running');
  console.log(`                        dockerd      sim engine   dockerd/sim`);
  console.log(`first deploy            ${ms(dockerd.firstDeployMs).padEnd(12)} ${ms(sim.firstDeployMs).padEnd(12)} ${out.ratio.firstDeploy}`);
  console.log(`release change (median) ${ms(dockerd.releaseChangeMedianMs).padEnd(12)} ${ms(sim.releaseChangeMedianMs).padEnd(12)} ${out.ratio.releaseChange}`);
  console.log(`pull 2 test images      -            ${ms(sim.pullMs)} (at ${BANDWIDTH} B/s)`);
  console.log(JSON.stringify(out));
} catch (err) {
  console.error(`engine bench failed: ${errorText(err)}`);
  process.exitCode = 1;
}
