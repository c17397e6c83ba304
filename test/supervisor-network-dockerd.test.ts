/**
 * A labelled service reaches the supervisor at PLATFORM_SUPERVISOR_ADDRESS from whatever
 * network it is on, as on a board: the real supervisor process (listening on loopback, as a
 * simulated device does) on the real dockerd, with services on a user-defined network, on
 * dockerd's default bridge and in the host's network, each calling the API with busybox wget.
 * A service without the label, on the same network and told the address, is not answered.
 */
import type Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LABEL } from '../src/protocol/engine-labels.js';
import type { WireService } from '../src/protocol/target-state.js';
import { deviceHttp } from './helpers/device-http.js';
import { eventually } from './helpers/engine-targets.js';
import { startSupervisorProcess, type SupervisorProcess } from './helpers/supervisor-process.js';

let sup: SupervisorProcess;
beforeAll(async () => {
  sup = await startSupervisorProcess({ engine: 'dockerd' });
});
afterAll(async () => {
  await sup?.close();
});

const api = deviceHttp(() => sup);

/** Calls the API as an app would, prints what it got, and exits (restart: no). */
const probe = (address: string) => [
  'sh', '-c',
  `wget -qO- "${address}/ping"; echo " ping=$?"; wget -qO- "${address}/v1/device?apikey=$PLATFORM_SUPERVISOR_API_KEY" | grep -o '"status":"[A-Za-z]*"'; echo "device=$?"`,
];
const service = (id: number, serviceName: string, extra: Partial<WireService>): WireService => ({
  serviceName, serviceId: id, imageId: id, image: 'fleetlab/test-app:1', restart: 'no', labels: { 'io.platform.features.supervisor-api': '1' }, command: probe('$PLATFORM_SUPERVISOR_ADDRESS'), ...extra,
});
const state = (services: Record<string, WireService>) => ({
  local: { name: 'supnet', config: { SUPERVISOR_LOCAL_MODE: '1' }, apps: { '1': { name: 'supnet', commit: 'c1', releaseId: 1, networks: { backend: {} }, services } } },
});

async function containerOf(serviceName: string): Promise<Docker.ContainerInspectInfo> {
  const [c] = await sup.docker.listContainers({ all: true, filters: { label: [`${LABEL.device}=${sup.uuid()}`, `${LABEL.serviceName}=${serviceName}`] } });
  if (!c) throw new Error(`no container for ${serviceName}`);
  return sup.docker.getContainer(c.Id).inspect();
}

/** The container's output once it has exited. */
async function outputOf(serviceName: string): Promise<string> {
  return eventually(async () => {
    const c = await containerOf(serviceName).catch(() => undefined);
    if (c?.State.Status !== 'exited') return undefined;
    const raw = await sup.docker.getContainer(c.Id).logs({ stdout: true, stderr: true });
    // Multiplexed frames: 8-byte headers before each payload.
    let out = '';
    for (let at = 0; at + 8 <= raw.length; at += 8 + raw.readUInt32BE(at + 4)) out += raw.subarray(at + 8, at + 8 + raw.readUInt32BE(at + 4)).toString();
    return out;
  }, 60_000, `${serviceName} exited`);
}

describe('the supervisor network on dockerd', () => {
  const services = {
    '1': service(1, 'onbackend', { networks: ['backend'] }),
    '2': service(2, 'onbridge', { network_mode: 'bridge' }),
    '3': service(3, 'onhost', { network_mode: 'host' }),
  };

  it('a labelled service on a user-defined network, on the default bridge or in the host network gets OK from the API', async () => {
    expect((await api('POST', '/v2/local/target-state', state(services))).status).toBe(200);
    // The status is the device's while it applies this very release: any of the statuses of docs/decisions.md item 14.
    for (const name of ['onbackend', 'onbridge', 'onhost']) expect(await outputOf(name), name).toMatch(/^OK ping=0\n"status":"[A-Za-z]+"\ndevice=0\n$/);
  });

  it("the bridged ones joined the device's supervisor network, whose gateway is their address; the host one is told loopback", async () => {
    const [net] = await sup.docker.listNetworks({ filters: { label: [`${LABEL.device}=${sup.uuid()}`, `${LABEL.supervisorNetwork}=true`] } });
    // A device on a shared dockerd: a name of its own, a subnet dockerd picked.
    expect(net?.Name).toMatch(/^fleetlab-supervisor-[0-9a-f]{8}$/);
    const gateway = net!.IPAM!.Config![0]!.Gateway!;
    const port = new URL(sup.url).port;
    const env = async (name: string) => (await containerOf(name)).Config.Env.find((e) => e.startsWith('PLATFORM_SUPERVISOR_ADDRESS='));
    expect(await env('onbackend')).toBe(`PLATFORM_SUPERVISOR_ADDRESS=http://${gateway}:${port}`);
    expect(await env('onbridge')).toBe(`PLATFORM_SUPERVISOR_ADDRESS=http://${gateway}:${port}`);
    expect(await env('onhost')).toBe(`PLATFORM_SUPERVISOR_ADDRESS=http://127.0.0.1:${port}`);
    const networksOf = async (name: string) => Object.keys((await containerOf(name)).NetworkSettings.Networks).sort();
    expect(await networksOf('onbackend')).toEqual([`${sup.uuid().slice(0, 7)}_1_backend`, net!.Name].sort());
    expect(await networksOf('onbridge')).toEqual(['bridge', net!.Name].sort());
    expect(await networksOf('onhost')).toEqual(['host']);
  });

  it('a service without the label, on the same network and given the address, is not answered', async () => {
    const [net] = await sup.docker.listNetworks({ filters: { label: [`${LABEL.device}=${sup.uuid()}`, `${LABEL.supervisorNetwork}=true`] } });
    const address = `http://${net!.IPAM!.Config![0]!.Gateway!}:${new URL(sup.url).port}`;
    const outsider = service(4, 'outsider', { networks: ['backend'], labels: {}, command: probe(address) });
    expect((await api('POST', '/v2/local/target-state', state({ ...services, '4': outsider }))).status).toBe(200);
    const out = await outputOf('outsider');
    expect(out).toMatch(/ping=[1-9]/);
    expect(out).not.toMatch(/OK/);
  });
});
