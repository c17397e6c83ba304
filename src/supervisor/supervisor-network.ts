/**
 * The supervisor network: an engine bridge network that every service with the
 * supervisor-api label joins besides its own networks, and whose gateway address the
 * supervisor listens on, so such a service reaches the API from whatever network it is on
 * (balena's `supervisor0`, 10.114.104.0/25). Pure: settings, matching, addresses.
 */
import { firstHost, formatIpv4, inIpv4Subnet, parseIpv4, parseIpv4Subnet } from '../ipv4.js';

export const supervisorNetworkDefaults = { name: 'supervisor0', subnet: '10.114.104.0/25' } as const;

export interface SupervisorNetworkSettings {
  name: string;
  /** IPv4 CIDR; empty: the engine picks a free one (devices sharing one engine each get their own). */
  subnet: string;
  /**
   * The engine container the supervisor runs in, when it runs in one on the engine it drives
   * (a device simulated in a container): it joins the network, and the API answers at its
   * address there; absent: the supervisor runs on the engine's host and answers on the gateway.
   */
  supervisorContainer?: string;
  /**
   * The container whose network namespace is the device's host network (`hostNetworkContainer`),
   * when it is not the supervisor's own: it joins the network too, so a host-network service
   * reaches the API at the gateway from there.
   */
  hostNetworkContainer?: string;
}

/** The containers the supervisor connects to the network besides the services: its own, and the host-network one. */
export function networkMembers(settings: SupervisorNetworkSettings): string[] {
  return [...new Set([settings.supervisorContainer, settings.hostNetworkContainer].filter((c): c is string => !!c))];
}

/** dockerd's rule for network names. */
const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
/** Linux interface names: at most 15 characters (IFNAMSIZ less the terminating zero). */
const INTERFACE_NAME = /^[a-zA-Z0-9_.-]{1,15}$/;
/** Below /30 a bridge has no room for the gateway and a service. */
const LONGEST_PREFIX = 30;

/** dockerd's rule for container names (an id is one too). */
const CONTAINER_REF = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

export function supervisorNetworkProblems(settings: SupervisorNetworkSettings): string[] {
  const problems: string[] = [];
  for (const key of ['supervisorContainer', 'hostNetworkContainer'] as const) {
    const ref = settings[key];
    if (ref && !CONTAINER_REF.test(ref)) problems.push(`${key} must be an engine container name or id ([a-zA-Z0-9][a-zA-Z0-9_.-]*) or empty, got "${ref}"`);
  }
  if (!NETWORK_NAME.test(settings.name)) problems.push(`supervisorNetwork must be an engine network name ([a-zA-Z0-9][a-zA-Z0-9_.-]*), got "${settings.name}"`);
  if (settings.subnet) {
    const subnet = parseIpv4Subnet(settings.subnet, { strict: true });
    if (!subnet || subnet.prefix > LONGEST_PREFIX) problems.push(`supervisorSubnet must be an IPv4 network such as 10.114.104.0/25 (prefix at most /${LONGEST_PREFIX}) or empty, got "${settings.subnet}"`);
  }
  return problems;
}

/** The gateway the settings ask for: the subnet's first address, as balena's 10.114.104.1; none when the engine picks. */
export function configuredGateway(settings: SupervisorNetworkSettings): string | undefined {
  const subnet = settings.subnet ? parseIpv4Subnet(settings.subnet) : undefined;
  return subnet ? formatIpv4(firstHost(subnet)) : undefined;
}

/**
 * The gateway of a network as the engine shows it. dockerd leaves `Gateway` out of the
 * IPAM config of a network created with a subnet but no gateway, and gives the bridge the
 * subnet's first address all the same.
 */
export function gatewayOf(config: { Subnet?: string; Gateway?: string } | undefined): string | undefined {
  if (config?.Gateway) return config.Gateway;
  const subnet = config?.Subnet ? parseIpv4Subnet(config.Subnet) : undefined;
  return subnet ? formatIpv4(firstHost(subnet)) : undefined;
}

/** Whether a network the engine has is the one the settings ask for (any subnet will do when the engine picks). */
export function matchesSettings(settings: SupervisorNetworkSettings, found: { subnet: string; gateway: string }): boolean {
  if (!found.gateway) return false;
  if (!settings.subnet) return true;
  return found.subnet === settings.subnet && found.gateway === configuredGateway(settings);
}

/**
 * The create options for the network. Its bridge takes the network's name when that fits an
 * interface name, as balena's does (`ip addr show supervisor0`). Services of different apps
 * all join it, so traffic between them over it is dropped (ICC off): it is for reaching the
 * supervisor, which the host answers, not for services reaching one another. Only where the
 * supervisor itself is a container on it (`supervisorContainer`) is ICC on: ICC off drops all
 * traffic between the bridge's members, the supervisor's included. Services of the device's
 * apps can then reach one another over it, which a board's does not allow; the network is the
 * device's alone (its own name on a shared engine), so no other device's services are there.
 */
export function supervisorNetworkCreateOptions(settings: SupervisorNetworkSettings): {
  Options: Record<string, string>;
  IPAM?: { Driver: string; Config: Array<{ Subnet: string; Gateway: string }> };
} {
  const gateway = configuredGateway(settings);
  return {
    Options: {
      'com.docker.network.bridge.enable_icc': settings.supervisorContainer ? 'true' : 'false',
      ...(INTERFACE_NAME.test(settings.name) ? { 'com.docker.network.bridge.name': settings.name } : {}),
    },
    ...(gateway ? { IPAM: { Driver: 'default', Config: [{ Subnet: settings.subnet, Gateway: gateway }] } } : {}),
  };
}

/** Whether an API already listening on `listenAddress` answers at `gateway` too (a wildcard, or the gateway itself). */
export function listenCovers(listenAddress: string, gateway: string): boolean {
  return listenAddress === '' || listenAddress === '0.0.0.0' || listenAddress === '::' || listenAddress === gateway;
}

/** Whether a peer's address (IPv4, or IPv4-mapped IPv6 as node reports it) lies in `subnet`. */
export function peerInSubnet(peer: string | undefined, subnet: string): boolean {
  const address = peer ? parseIpv4(peer.replace(/^::ffff:/, '')) : undefined;
  const net = parseIpv4Subnet(subnet);
  return address !== undefined && net !== undefined && inIpv4Subnet(address, net);
}
