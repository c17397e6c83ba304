/**
 * The supervisor network's pure parts: which services join it, what they are told
 * (PLATFORM_SUPERVISOR_ADDRESS, _HOST, _PORT), what makes their containers change, the
 * settings and their checks, and the addresses the gateway listener answers.
 */
import { describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { formatIpv4, ipv4SubnetsOverlap, parseIpv4, parseIpv4Subnet } from '../src/ipv4.js';
import { normaliseService, type TargetApp, type TargetService } from '../src/protocol/target-state.js';
import { loadConfig } from '../src/supervisor/config.js';
import { desiredContainer, type SpecContext } from '../src/supervisor/state/container-spec.js';
import { configuredGateway, gatewayOf, listenCovers, matchesSettings, networkMembers, peerInSubnet, supervisorNetworkCreateOptions, supervisorNetworkProblems } from '../src/supervisor/supervisor-network.js';
import { sharedEngineNetwork } from '../sim/supervisor-network.js';

const network = { name: 'supervisor0', subnet: '10.114.104.0/25', gateway: '10.114.104.1', apiHost: '10.114.104.1' };
const ctx: SpecContext = {
  vendor: 'balena', uuid: 'abcdef0123456789abcdef0123456789', deviceName: 'd', deviceType: 'raspberrypi4-64', arch: 'aarch64',
  supervisorAddress: '', supervisorPort: 48484, supervisorNetwork: network,
  appKey: () => 'app-key', lockDir: () => '/tmp/locks', networkName: (a, n) => `abcdef0_${a}_${n}`, volumeName: (a, v) => `abcdef0_${a}_${v}`,
};
const LABEL = { 'io.balena.features.supervisor-api': '1' };

function service(over: { labels?: Record<string, string>; network_mode?: string; networks?: string[]; ports?: string[]; hostname?: string; extra_hosts?: string[] } = {}): TargetService {
  const { labels, ...rest } = over;
  return normaliseService({ serviceName: 'app', serviceId: 1, imageId: 1, image: 'fleetlab/test-app:1', environment: {}, labels: labels ?? LABEL, ...rest });
}
const app = (s: TargetService): TargetApp => ({ appId: 1, name: 'a', commit: 'c', releaseId: 1, services: [s], volumes: [], networks: ['backend', 'metrics'] });
const desired = (s: TargetService, context: SpecContext = ctx) => desiredContainer(app(s), s, context);
const apiEnv = (s: TargetService, context: SpecContext = ctx) => {
  const env = desired(s, context).environment;
  return [env.BALENA_SUPERVISOR_ADDRESS, env.BALENA_SUPERVISOR_HOST, env.BALENA_SUPERVISOR_PORT];
};

describe('container spec of a labelled service', () => {
  it('on the default app network: joins the supervisor network too, and is told its gateway', () => {
    const d = desired(service());
    expect(d.needsSupervisorNetwork).toBe(true);
    expect([d.spec.networkMode, d.spec.extraNetworks, d.spec.supervisorNetwork]).toEqual(['abcdef0_1_default', undefined, 'supervisor0']);
    expect(apiEnv(service())).toEqual(['http://10.114.104.1:48484', '10.114.104.1', '48484']);
  });

  it('on user-defined networks: joins them and the supervisor network, the same address', () => {
    const d = desired(service({ networks: ['backend', 'metrics'] }));
    expect([d.spec.networkMode, d.spec.extraNetworks, d.spec.supervisorNetwork]).toEqual(['abcdef0_1_backend', ['abcdef0_1_metrics'], 'supervisor0']);
    // The service name is an alias on its own networks; the supervisor network takes none (engine.ts).
    expect(d.spec.aliases).toEqual(['app']);
    expect(apiEnv(service({ networks: ['backend'] }))).toEqual(['http://10.114.104.1:48484', '10.114.104.1', '48484']);
  });

  it("on the engine's default bridge: joins the supervisor network beside it", () => {
    const d = desired(service({ network_mode: 'bridge' }));
    expect([d.spec.networkMode, d.spec.supervisorNetwork]).toEqual(['bridge', 'supervisor0']);
    expect(apiEnv(service({ network_mode: 'bridge' }))[0]).toBe('http://10.114.104.1:48484');
  });

  it("in the host's network: joins nothing, the API is on loopback; with no network at all, likewise", () => {
    for (const mode of ['host', 'none']) {
      const d = desired(service({ network_mode: mode }));
      expect([d.needsSupervisorNetwork, d.spec.networkMode, d.spec.supervisorNetwork], mode).toEqual([false, mode, undefined]);
      expect(apiEnv(service({ network_mode: mode })), mode).toEqual(['http://127.0.0.1:48484', '127.0.0.1', '48484']);
    }
  });

  it('before the network exists: waits for it, with no address to give yet', () => {
    const { supervisorNetwork: _, ...none } = ctx;
    const d = desired(service(), none);
    expect([d.needsSupervisorNetwork, d.spec.supervisorNetwork]).toEqual([true, undefined]);
    expect(apiEnv(service(), none)).toEqual(['', '', '48484']);
  });

  it('with supervisorAddress set: that address, on the supervisor network all the same', () => {
    const withAddress = { ...ctx, supervisorAddress: 'http://10.114.104.7:48484' };
    expect(apiEnv(service(), withAddress)).toEqual(['http://10.114.104.7:48484', '10.114.104.7', '48484']);
    expect(desired(service(), withAddress).spec.supervisorNetwork).toBe('supervisor0');
    expect(apiEnv(service({ network_mode: 'host' }), withAddress)[0]).toBe('http://127.0.0.1:48484');
  });

  it('is replaced when the network moves to another subnet, even on the same gateway', () => {
    const before = desired(service()).configHash;
    expect(desired(service(), { ...ctx, supervisorNetwork: { ...network, subnet: '10.114.104.0/24' } }).configHash).not.toBe(before);
    expect(desired(service(), { ...ctx, supervisorNetwork: { ...network, subnet: '10.9.0.0/24', gateway: '10.9.0.1' } }).configHash).not.toBe(before);
    expect(desired(service()).configHash).toBe(before);
  });
});

describe("a device whose host network is a container's (a simulated device on a shared engine)", () => {
  const holder = { ...ctx, hostNetwork: { container: 'fleetlab-host-abcdef0', supervisorInside: false } };
  const inDevice = { ...ctx, supervisorNetwork: { ...network, apiHost: '10.114.104.2' }, hostNetwork: { container: 'fleetlab-device-1', supervisorInside: true } };

  it("runs a host-network service in that container's namespace, without the ports, hostname and extra hosts the engine refuses there", () => {
    const s = service({ network_mode: 'host', ports: ['8081:8081'], hostname: 'h', extra_hosts: ['db:10.0.0.9'] });
    const d = desired(s, holder);
    expect([d.spec.networkMode, d.spec.ports, d.spec.hostname, d.spec.extraHosts, d.spec.publishAddress]).toEqual(['container:fleetlab-host-abcdef0', undefined, undefined, undefined, undefined]);
    // On the engine host's network, as on a board, all of it stays as it was.
    expect(desired(s).spec).toMatchObject({ networkMode: 'host', ports: ['8081:8081'], hostname: 'h' });
  });

  it("tells a labelled one there the supervisor network's address, which that container joined, and waits for it", () => {
    const d = desired(service({ network_mode: 'host' }), holder);
    expect([d.needsSupervisorNetwork, d.madeForSupervisorNetwork, d.spec.supervisorNetwork]).toEqual([true, 'supervisor0', undefined]);
    expect(apiEnv(service({ network_mode: 'host' }), holder)[0]).toBe('http://10.114.104.1:48484');
    const { supervisorNetwork: _, ...before } = holder;
    expect([desired(service({ network_mode: 'host' }), before).needsSupervisorNetwork, apiEnv(service({ network_mode: 'host' }), before)[0]]).toEqual([true, '']);
    // An unlabelled one needs nothing of it.
    expect(desired(service({ network_mode: 'host', labels: {} }), holder).needsSupervisorNetwork).toBe(false);
  });

  it("where that container is the supervisor's own: loopback for the host-network one, the supervisor's address on the network for the others", () => {
    expect(apiEnv(service({ network_mode: 'host' }), inDevice)[0]).toBe('http://127.0.0.1:48484');
    expect(desired(service({ network_mode: 'host' }), inDevice).needsSupervisorNetwork).toBe(false);
    expect(desired(service({ network_mode: 'host' }), inDevice).spec.networkMode).toBe('container:fleetlab-device-1');
    expect(apiEnv(service({ networks: ['backend'] }), inDevice)[0]).toBe('http://10.114.104.2:48484');
  });

  it('replaces the containers when the host network moves or the address on the network changes', () => {
    const s = service({ network_mode: 'host' });
    expect(desired(s, holder).configHash).not.toBe(desired(s, { ...holder, hostNetwork: { container: 'other', supervisorInside: false } }).configHash);
    expect(desired(service(), inDevice).configHash).not.toBe(desired(service(), { ...inDevice, supervisorNetwork: { ...network, apiHost: '10.114.104.3' } }).configHash);
  });
});

describe('an unlabelled service', () => {
  it('joins no supervisor network, gets no API variables, and keeps the hash it had before the network existed', () => {
    const plain = service({ labels: {} });
    const d = desired(plain);
    expect([d.needsSupervisorNetwork, d.spec.supervisorNetwork]).toEqual([false, undefined]);
    expect(Object.keys(d.environment).filter((k) => k.includes('SUPERVISOR'))).toEqual([]);
    const { supervisorNetwork: _, ...before } = ctx;
    expect(d.configHash).toBe(desired(plain, before).configHash);
  });
});

describe('settings', () => {
  it("default to balena's supervisor0 on 10.114.104.0/25, gateway 10.114.104.1", () => {
    const config = loadConfig({ env: {} });
    expect([config.supervisorNetwork, config.supervisorSubnet, config.supervisorAddress]).toEqual(['supervisor0', '10.114.104.0/25', '']);
    expect(configuredGateway({ name: config.supervisorNetwork, subnet: config.supervisorSubnet })).toBe('10.114.104.1');
  });

  it('refuse a name the engine would refuse, and a subnet that is no network or too small', () => {
    expect(supervisorNetworkProblems({ name: 'fleetlab-supervisor-1a2b', subnet: '' })).toEqual([]);
    expect(supervisorNetworkProblems({ name: '-bad', subnet: '10.0.0.5/24' })).toEqual([
      'supervisorNetwork must be an engine network name ([a-zA-Z0-9][a-zA-Z0-9_.-]*), got "-bad"',
      'supervisorSubnet must be an IPv4 network such as 10.114.104.0/25 (prefix at most /30) or empty, got "10.0.0.5/24"',
    ]);
    for (const subnet of ['10.0.0.0/31', '10.0.0.0', '300.0.0.0/8', 'fd00::/64']) expect(supervisorNetworkProblems({ name: 'supervisor0', subnet }), subnet).toHaveLength(1);
    expect(() => loadConfig({ env: { FLEETLAB_SUPERVISOR_SUBNET: '10.114.104.3/25' } })).toThrow(FleetlabError);
    expect(loadConfig({ flags: { supervisorSubnet: '' } }).supervisorSubnet).toBe('');
  });

  it('name containers the engine knows, and connect each once', () => {
    expect(supervisorNetworkProblems({ name: 'supervisor0', subnet: '', supervisorContainer: 'fleetlab-device-1', hostNetworkContainer: '3f2a' })).toEqual([]);
    expect(supervisorNetworkProblems({ name: 'supervisor0', subnet: '', hostNetworkContainer: 'container:x' })).toEqual(['hostNetworkContainer must be an engine container name or id ([a-zA-Z0-9][a-zA-Z0-9_.-]*) or empty, got "container:x"']);
    expect(() => loadConfig({ env: { FLEETLAB_SUPERVISOR_CONTAINER: '/x' } })).toThrow(/supervisorContainer must be/);
    expect(networkMembers({ name: 'n', subnet: '', supervisorContainer: 'dev', hostNetworkContainer: 'dev' })).toEqual(['dev']);
    expect(networkMembers({ name: 'n', subnet: '', hostNetworkContainer: 'holder' })).toEqual(['holder']);
    expect(networkMembers({ name: 'n', subnet: '' })).toEqual([]);
  });

  it('for a device on a shared engine: a name of its own, the subnet left to the engine', () => {
    const [a, b] = [sharedEngineNetwork(), sharedEngineNetwork()];
    expect(a.supervisorNetwork).not.toBe(b.supervisorNetwork);
    expect(a.supervisorSubnet).toBe('');
    expect(supervisorNetworkProblems({ name: a.supervisorNetwork, subnet: a.supervisorSubnet })).toEqual([]);
  });
});

describe('the network the engine has', () => {
  it('fits when subnet and gateway are the settings; any subnet fits when the engine picks', () => {
    const settings = { name: 'supervisor0', subnet: '10.114.104.0/25' };
    expect(matchesSettings(settings, { subnet: '10.114.104.0/25', gateway: '10.114.104.1' })).toBe(true);
    expect(matchesSettings(settings, { subnet: '10.114.104.0/25', gateway: '10.114.104.9' })).toBe(false);
    expect(matchesSettings(settings, { subnet: '192.168.16.0/20', gateway: '192.168.16.1' })).toBe(false);
    expect(matchesSettings({ ...settings, subnet: '' }, { subnet: '192.168.16.0/20', gateway: '192.168.16.1' })).toBe(true);
    expect(matchesSettings({ ...settings, subnet: '' }, { subnet: '', gateway: '' })).toBe(false);
  });

  it("has its gateway where dockerd puts it when inspect shows none: the subnet's first address", () => {
    expect(gatewayOf({ Subnet: '10.114.104.0/25', Gateway: '10.114.104.1' })).toBe('10.114.104.1');
    expect(gatewayOf({ Subnet: '10.114.104.0/25' })).toBe('10.114.104.1');
    expect(gatewayOf(undefined)).toBeUndefined();
  });

  it('is made with ICC off, the bridge named after it when that fits an interface name, and the IPAM config only when a subnet is set', () => {
    expect(supervisorNetworkCreateOptions({ name: 'supervisor0', subnet: '10.114.104.0/25' })).toEqual({
      Options: { 'com.docker.network.bridge.enable_icc': 'false', 'com.docker.network.bridge.name': 'supervisor0' },
      IPAM: { Driver: 'default', Config: [{ Subnet: '10.114.104.0/25', Gateway: '10.114.104.1' }] },
    });
    expect(supervisorNetworkCreateOptions({ name: 'fleetlab-supervisor-1a2b3c4d', subnet: '' })).toEqual({ Options: { 'com.docker.network.bridge.enable_icc': 'false' } });
    // A host-network container on it calls the gateway, which ICC does not cover.
    expect(supervisorNetworkCreateOptions({ name: 'fleetlab-supervisor-1a2b3c4d', subnet: '', hostNetworkContainer: 'holder' }).Options['com.docker.network.bridge.enable_icc']).toBe('false');
  });

  it('is made with ICC on where the supervisor is a container on it: ICC off would drop its traffic with the services', () => {
    expect(supervisorNetworkCreateOptions({ name: 'fleetlab-supervisor-1a2b3c4d', subnet: '', supervisorContainer: 'fleetlab-device-1' })).toEqual({ Options: { 'com.docker.network.bridge.enable_icc': 'true' } });
  });
});

describe('the gateway listener', () => {
  it('is not needed where the API listens on every address or on the gateway already', () => {
    expect(['0.0.0.0', '::', '', '10.114.104.1'].map((a) => listenCovers(a, '10.114.104.1'))).toEqual([true, true, true, true]);
    expect(listenCovers('127.0.0.1', '10.114.104.1')).toBe(false);
  });

  it("answers the network's own hosts only (IPv4 or IPv4-mapped), never another network's", () => {
    expect(['10.114.104.2', '::ffff:10.114.104.126', '10.114.104.1'].map((p) => peerInSubnet(p, '10.114.104.0/25'))).toEqual([true, true, true]);
    expect(['10.114.104.128', '172.18.0.2', '127.0.0.1', '::1', undefined].map((p) => peerInSubnet(p, '10.114.104.0/25'))).toEqual([false, false, false, false, false]);
  });
});

describe('ipv4', () => {
  it('parses, formats and compares addresses and subnets', () => {
    expect(parseIpv4('10.114.104.1')).toBe(0x0a726801);
    expect(formatIpv4(0x0a726801)).toBe('10.114.104.1');
    expect(['10.1.1', '1.2.3.256', '01.2.3.4', ''].map(parseIpv4)).toEqual([undefined, undefined, undefined, undefined]);
    expect(parseIpv4Subnet('10.0.0.5/24')).toEqual({ base: 0x0a000000, prefix: 24 });
    expect(parseIpv4Subnet('10.0.0.5/24', { strict: true })).toBeUndefined();
    expect(parseIpv4Subnet('0.0.0.0/0')).toEqual({ base: 0, prefix: 0 });
    const [a, b, c] = ['10.114.104.0/25', '10.114.104.64/26', '10.114.104.128/25'].map((s) => parseIpv4Subnet(s)!);
    expect([ipv4SubnetsOverlap(a!, b!), ipv4SubnetsOverlap(b!, a!), ipv4SubnetsOverlap(a!, c!)]).toEqual([true, true, false]);
  });
});
