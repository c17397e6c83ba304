/**
 * The JSON bodies of list and inspect calls, shaped field by field like dockerd 20.10's
 * (API 1.41), from the engine's records.
 */
import type { SimEngine } from './engine.js';
import { statusText, ZERO_TIME, type ContainerRecord, type ImageRecord, type NetworkRecord, type VolumeRecord } from './model.js';

const unix = (iso: string) => Math.floor(Date.parse(iso) / 1000);

function shellJoin(args: string[]): string {
  return args.map((a) => (/[\s'"$;&|]/.test(a) ? `'${a}'` : a)).join(' ');
}

function networkEntries(c: ContainerRecord) {
  return Object.fromEntries(
    Object.entries(c.networks).map(([name, ep]) => [
      name,
      {
        // dockerd binds the endpoint (and shows the network id) only while the container runs
        IPAMConfig: null, Links: null, Aliases: ep.aliases, NetworkID: ep.endpointId ? ep.networkId : '', EndpointID: ep.endpointId, Gateway: ep.gateway,
        IPAddress: ep.ip, IPPrefixLen: ep.ip ? (ep.prefixLen ?? 16) : 0, IPv6Gateway: '', GlobalIPv6Address: '', GlobalIPv6PrefixLen: 0, MacAddress: ep.mac, DriverOpts: null,
      },
    ]),
  );
}

type Binding = { HostIp: string; HostPort: string };

/**
 * NetworkSettings.Ports as dockerd 20.10 shows them: only while the container runs (its
 * sandbox exists), a binding to no host IP as one on each wildcard (0.0.0.0 and ::), an
 * exposed port without one as null. Nothing is bound here: the simulated engine runs no app
 * code, so a port only says what dockerd would have published. A binding without a host port
 * (dockerd would pick a free one) is shown as given.
 */
function publishedPorts(c: ContainerRecord): Record<string, Binding[] | null> {
  if (c.state.status !== 'running') return {};
  const bindings = (c.hostConfig.PortBindings ?? {}) as Record<string, Array<Partial<Binding>> | null>;
  const keys = new Set([...Object.keys(c.config.ExposedPorts ?? {}), ...Object.keys(bindings)]);
  return Object.fromEntries([...keys].map((key) => {
    const given = bindings[key] ?? [];
    if (!given.length) return [key, null];
    return [key, given.flatMap((b) => (b.HostIp ? [{ HostIp: b.HostIp, HostPort: b.HostPort ?? '' }] : [{ HostIp: '0.0.0.0', HostPort: b.HostPort ?? '' }, { HostIp: '::', HostPort: b.HostPort ?? '' }]))];
  }));
}

/** The list view of the same ports (`docker ps`): one entry per binding, an exposed port alone without a public one. */
function listedPorts(c: ContainerRecord) {
  return Object.entries(publishedPorts(c)).flatMap(([key, bindings]) => {
    const [port, type] = key.split('/') as [string, string];
    if (!bindings) return [{ PrivatePort: Number(port), Type: type }];
    return bindings.map((b) => ({ IP: b.HostIp, PrivatePort: Number(port), PublicPort: Number(b.HostPort), Type: type }));
  });
}

export function containerSummary(engine: SimEngine, c: ContainerRecord) {
  return {
    Id: c.id,
    Names: [`/${c.name}`],
    // dockerd shows the ref only while it still names this container's image.
    Image: engine.findImage(c.imageRef)?.id === c.imageId ? c.imageRef : c.imageId,
    ImageID: c.imageId,
    Command: shellJoin(engine.commandOf(c)),
    Created: unix(c.created),
    Ports: listedPorts(c),
    Labels: c.config.Labels,
    State: c.state.status,
    Status: statusText(c.state, engine.clock()),
    HostConfig: { NetworkMode: c.hostConfig.NetworkMode },
    NetworkSettings: { Networks: networkEntries(c) },
    Mounts: c.mounts,
  };
}

export function containerInspect(engine: SimEngine, c: ContainerRecord) {
  const cmd = engine.commandOf(c);
  const s = c.state;
  return {
    Id: c.id,
    Created: c.created,
    Path: cmd[0] ?? '',
    Args: cmd.slice(1),
    State: {
      Status: s.status,
      Running: s.status === 'running' || s.status === 'restarting',
      Paused: false,
      Restarting: s.status === 'restarting',
      OOMKilled: false,
      Dead: s.status === 'dead',
      Pid: s.pid,
      ExitCode: s.exitCode,
      Error: s.error,
      StartedAt: s.startedAt,
      FinishedAt: s.finishedAt,
      ...(s.health ? { Health: s.health } : {}),
    },
    Image: c.imageId,
    ResolvConfPath: `${engine.dataDir}/containers/${c.id}/resolv.conf`,
    HostnamePath: `${engine.dataDir}/containers/${c.id}/hostname`,
    HostsPath: `${engine.dataDir}/containers/${c.id}/hosts`,
    LogPath: `${engine.dataDir}/containers/${c.id}/log.jsonl`,
    Name: `/${c.name}`,
    RestartCount: c.restartCount,
    Driver: 'sim',
    Platform: 'linux',
    MountLabel: '',
    ProcessLabel: '',
    AppArmorProfile: '',
    ExecIDs: null,
    HostConfig: {
      LogConfig: { Type: 'json-file', Config: {} }, PortBindings: null, AutoRemove: false, Privileged: false, ReadonlyRootfs: false, Ulimits: null, ExtraHosts: null,
      ...c.hostConfig,
      // dockerd gives a container its 64 MiB /dev/shm unless told otherwise.
      ShmSize: (c.hostConfig.ShmSize as number | undefined) || 67108864,
    },
    GraphDriver: { Data: null, Name: 'sim' },
    Mounts: c.mounts,
    Config: {
      Hostname: c.config.Hostname, Domainname: '', User: c.config.User ?? '', AttachStdin: false, AttachStdout: false, AttachStderr: false, Tty: c.config.Tty,
      OpenStdin: false, StdinOnce: false, Env: c.config.Env, Cmd: c.config.Cmd, Image: c.config.Image, Volumes: null, WorkingDir: c.config.WorkingDir,
      Entrypoint: c.config.Entrypoint, OnBuild: null, Labels: c.config.Labels,
      ...(c.config.ExposedPorts ? { ExposedPorts: c.config.ExposedPorts } : {}),
      ...(c.config.StopSignal !== undefined ? { StopSignal: c.config.StopSignal } : {}),
      ...(c.config.StopTimeout !== undefined ? { StopTimeout: c.config.StopTimeout } : {}),
      ...(c.config.Healthcheck ? { Healthcheck: c.config.Healthcheck } : {}),
    },
    NetworkSettings: {
      Bridge: '', SandboxID: '', HairpinMode: false, LinkLocalIPv6Address: '', LinkLocalIPv6PrefixLen: 0, Ports: publishedPorts(c), SandboxKey: '',
      SecondaryIPAddresses: null, SecondaryIPv6Addresses: null,
      EndpointID: c.networks.bridge?.endpointId ?? '', Gateway: c.networks.bridge?.gateway ?? '', GlobalIPv6Address: '', GlobalIPv6PrefixLen: 0,
      IPAddress: c.networks.bridge?.ip ?? '', IPPrefixLen: c.networks.bridge?.ip ? 16 : 0, IPv6Gateway: '', MacAddress: c.networks.bridge?.mac ?? '',
      Networks: networkEntries(c),
    },
  };
}

export function imageSummary(i: ImageRecord) {
  return {
    Containers: -1,
    Created: unix(i.created),
    Id: i.id,
    Labels: i.config.Labels,
    ParentId: '',
    RepoDigests: i.repoDigests.length ? i.repoDigests : i.repoTags.length ? null : ['<none>@<none>'],
    RepoTags: i.repoTags.length ? i.repoTags : ['<none>:<none>'],
    SharedSize: -1,
    Size: i.size,
    VirtualSize: i.size,
  };
}

export function imageInspect(i: ImageRecord) {
  const config = {
    Hostname: '', Domainname: '', User: '', AttachStdin: false, AttachStdout: false, AttachStderr: false, Tty: false, OpenStdin: false, StdinOnce: false,
    Env: i.config.Env, Cmd: i.config.Cmd, Image: '', Volumes: null, WorkingDir: i.config.WorkingDir, Entrypoint: i.config.Entrypoint, OnBuild: null, Labels: i.config.Labels,
    ...(i.config.Healthcheck ? { Healthcheck: i.config.Healthcheck } : {}),
  };
  return {
    Id: i.id, RepoTags: i.repoTags, RepoDigests: i.repoDigests, Parent: '', Comment: '', Created: i.created, Container: '', ContainerConfig: config,
    DockerVersion: '', Author: '', Config: config, Architecture: 'amd64', Os: 'linux', Size: i.size, VirtualSize: i.size,
    GraphDriver: { Data: null, Name: 'sim' }, RootFS: { Type: 'layers', Layers: i.layers }, Metadata: { LastTagTime: ZERO_TIME },
  };
}

export function volumeView(v: VolumeRecord) {
  return { CreatedAt: v.createdAt, Driver: v.driver, Labels: v.labels, Mountpoint: v.mountpoint, Name: v.name, Options: v.options, Scope: 'local' };
}

export function networkView(engine: SimEngine, n: NetworkRecord) {
  const containers = Object.fromEntries(
    engine.networkContainers(n).map((c) => {
      const ep = c.networks[n.name]!;
      return [c.id, { Name: c.name, EndpointID: ep.endpointId, MacAddress: ep.mac, IPv4Address: ep.ip ? `${ep.ip}/${ep.prefixLen ?? 16}` : '', IPv6Address: '' }];
    }),
  );
  return {
    Name: n.name, Id: n.id, Created: n.created, Scope: 'local', Driver: n.driver, EnableIPv6: false,
    IPAM: { Driver: 'default', Options: n.ipam?.options ?? null, Config: n.ipam?.config ?? (n.subnet ? [{ Subnet: n.subnet, Gateway: n.gateway }] : []) },
    Internal: n.internal, Attachable: n.attachable, Ingress: false, ConfigFrom: { Network: '' }, ConfigOnly: false,
    Containers: containers, Options: n.options, Labels: n.labels,
  };
}
