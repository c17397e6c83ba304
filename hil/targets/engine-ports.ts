/**
 * `ports` for targets whose device runs its apps on an engine the harness reaches (the sim
 * target on dockerd, the container target on the host's dockerd): the published port read
 * from the engine, as `docker port` reads it, so a spec reaches what the engine really bound;
 * for a service in the device's host network, the port it listens on at that network's address.
 * The qemu target reads the board's engine the same way and forwards to it (./qemu-ports.ts).
 */
import Docker from 'dockerode';
import { FleetlabError } from '../../src/errors.js';
import { LABEL } from '../../src/protocol/engine-labels.js';
import type { PortsProtocol, PublishedPort } from '../../device-access/protocols.js';

type PortMap = Record<string, Array<{ HostIp?: string; HostPort?: string }> | null> | null | undefined;

/** A port as the engine bound it, in the engine's own words: where that is reached from is the target's to say. */
export interface EngineBinding {
  /** The engine's HostIp: empty, `0.0.0.0` or `::` for all of its host's addresses. */
  readonly hostIp: string | undefined;
  readonly port: number;
}

type PortOptions = { readonly appId?: number; readonly protocol?: 'tcp' | 'udp' };

/** How messages name the port a spec asked for. */
export function portDescription(service: string, containerPort: number, options: PortOptions = {}): string {
  return `port ${containerPort}/${options.protocol ?? 'tcp'} of service ${service} (app ${options.appId ?? 1})`;
}

/**
 * Where a wildcard binding is reached from this machine: a device whose publish address is
 * unset binds as its compose file says, all interfaces included, and loopback is one of them.
 */
function reachable(hostIp: string | undefined): string {
  if (!hostIp || hostIp === '0.0.0.0') return '127.0.0.1';
  if (hostIp === '::') return '::1';
  return hostIp;
}

/** The binding of `key` (`80/tcp`) in an inspected container's NetworkSettings.Ports; IPv4 first, as a URL is more often read with it. */
export function bindingFrom(ports: PortMap, key: string): EngineBinding | undefined {
  const bindings = (ports?.[key] ?? []).filter((b) => b.HostPort);
  const chosen = bindings.find((b) => !b.HostIp?.includes(':')) ?? bindings[0];
  return chosen ? { hostIp: chosen.HostIp, port: Number(chosen.HostPort) } : undefined;
}

/** `bindingFrom`, as reached from the engine's own host. */
export function publishedFrom(ports: PortMap, key: string): PublishedPort | undefined {
  const binding = bindingFrom(ports, key);
  return binding ? { host: reachable(binding.hostIp), port: binding.port } : undefined;
}

/**
 * The running container of `service` of device `uuid` on the engine behind `docker`, inspected
 * (the newest, during an update). Rejects when none runs.
 */
async function serviceContainer(docker: Docker, uuid: string, service: string, what: string, options: PortOptions): Promise<Docker.ContainerInspectInfo> {
  const listed = await docker.listContainers({ filters: { label: [`${LABEL.device}=${uuid}`, `${LABEL.appId}=${options.appId ?? 1}`, `${LABEL.serviceName}=${service}`], status: ['running'] } });
  if (!listed.length) throw new FleetlabError('HIL_ERR_DEPLOY', `${what}: no container of that service runs on the device; deploy a release with it and wait until it runs`);
  // During an update the old and the new container may both run for a moment: the newest is the release's.
  const newest = listed.sort((a, b) => b.Created - a.Created)[0]!;
  return docker.getContainer(newest.Id).inspect();
}

/** How an inspected container publishes `containerPort`; rejects naming the ports it does publish. */
function bindingOf(info: Docker.ContainerInspectInfo, containerPort: number, what: string, options: PortOptions): EngineBinding {
  const ports = info.NetworkSettings.Ports as PortMap;
  const found = bindingFrom(ports, `${containerPort}/${options.protocol ?? 'tcp'}`);
  if (found) return found;
  const others = Object.entries((ports ?? {}) as Record<string, unknown[] | null>).filter(([, b]) => b?.length).map(([k]) => k);
  throw new FleetlabError('HIL_ERR_DEPLOY', `${what}: the container publishes ${others.length ? others.join(', ') : 'no port'}; publish it with ports: in the compose file`);
}

/**
 * How the engine behind `docker` bound `containerPort` of the running container of `service`
 * of device `uuid`; for a service in the engine host's own network (a board's host network),
 * the port itself on the host's addresses. Rejects when no container of the service runs or it
 * publishes no such port, naming the ports it does publish.
 */
export async function engineBinding(docker: Docker, uuid: string, service: string, containerPort: number, options: PortOptions = {}): Promise<EngineBinding> {
  const what = portDescription(service, containerPort, options);
  const info = await serviceContainer(docker, uuid, service, what, options);
  if (info.HostConfig.NetworkMode === 'host') return { hostIp: undefined, port: containerPort };
  return bindingOf(info, containerPort, what, options);
}

/**
 * Where this machine reaches a port of a service in the device's host network, by its network
 * mode: the machine's loopback for the engine host's own, and for a container's namespace
 * (`container:<id>`: the device's host-network container, or the container-target device
 * itself) that container's address on the engine's bridge, which the machine routes to.
 * Undefined for a service on networks of its own.
 */
export async function hostNetworkAddress(docker: Docker, networkMode: string): Promise<string | undefined> {
  if (networkMode === 'host') return '127.0.0.1';
  if (!networkMode.startsWith('container:')) return undefined;
  const holder = networkMode.slice('container:'.length);
  const { NetworkSettings, Name } = await docker.getContainer(holder).inspect();
  // The default bridge first: the other networks it may be on (the supervisor network) are the device's.
  const networks = NetworkSettings.Networks ?? {};
  const address = networks.bridge?.IPAddress || Object.values(networks).map((n) => n.IPAddress).find(Boolean);
  if (!address) throw new FleetlabError('HIL_ERR_DEPLOY', `the device's host network (container ${Name.replace(/^\//, '')}) has no address on an engine network this machine reaches: is it running?`);
  return address;
}

/** The ports of device `uuid`, whose apps run on the engine at `dockerSocket`. */
export function enginePorts(dockerSocket: string, uuid: string): PortsProtocol {
  const docker = new Docker({ socketPath: dockerSocket });
  return {
    async published(service, containerPort, options = {}) {
      const what = portDescription(service, containerPort, options);
      const info = await serviceContainer(docker, uuid, service, what, options);
      // In the device's host network nothing is published: the service listens on the namespace's own addresses.
      const onHost = await hostNetworkAddress(docker, info.HostConfig.NetworkMode ?? '');
      if (onHost) return { host: onHost, port: containerPort };
      const binding = bindingOf(info, containerPort, what, options);
      return { host: reachable(binding.hostIp), port: binding.port };
    },
  };
}
