/**
 * `ports` for targets whose device runs its apps on an engine the harness reaches (the sim
 * target on dockerd, the container target on the host's dockerd): the published port read
 * from the engine, as `docker port` reads it, so a spec reaches what the engine really bound.
 * The qemu target reads the board's engine the same way and forwards to it (./qemu-ports.ts).
 */
import Docker from 'dockerode';
import { FleetlabError } from '../../src/errors.js';
import { LABEL } from '../../src/supervisor/adapters/engine.js';
import type { PortsProtocol, PublishedPort } from './protocols.js';

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
 * How the engine behind `docker` bound `containerPort` of the running container of `service`
 * of device `uuid`. Rejects when no container of the service runs or it publishes no such port,
 * naming the ports it does publish.
 */
export async function engineBinding(docker: Docker, uuid: string, service: string, containerPort: number, options: PortOptions = {}): Promise<EngineBinding> {
  const appId = options.appId ?? 1;
  const key = `${containerPort}/${options.protocol ?? 'tcp'}`;
  const what = portDescription(service, containerPort, options);
  const listed = await docker.listContainers({ filters: { label: [`${LABEL.device}=${uuid}`, `${LABEL.appId}=${appId}`, `${LABEL.serviceName}=${service}`], status: ['running'] } });
  if (!listed.length) throw new FleetlabError('HIL_ERR_DEPLOY', `${what}: no container of that service runs on the device; deploy a release with it and wait until it runs`);
  // During an update the old and the new container may both run for a moment: the newest is the release's.
  const newest = listed.sort((a, b) => b.Created - a.Created)[0]!;
  const { NetworkSettings } = await docker.getContainer(newest.Id).inspect();
  const found = bindingFrom(NetworkSettings.Ports as PortMap, key);
  if (found) return found;
  const others = Object.entries((NetworkSettings.Ports ?? {}) as Record<string, unknown[] | null>).filter(([, b]) => b?.length).map(([k]) => k);
  throw new FleetlabError('HIL_ERR_DEPLOY', `${what}: the container publishes ${others.length ? others.join(', ') : 'no port'}; publish it with ports: in the compose file`);
}

/** The ports of device `uuid`, whose apps run on the engine at `dockerSocket`. */
export function enginePorts(dockerSocket: string, uuid: string): PortsProtocol {
  const docker = new Docker({ socketPath: dockerSocket });
  return {
    async published(service, containerPort, options = {}) {
      const binding = await engineBinding(docker, uuid, service, containerPort, options);
      return { host: reachable(binding.hostIp), port: binding.port };
    },
  };
}
