/**
 * What container a target service should be: engine create options plus a hash of everything
 * that, when changed, means the container must be replaced. Pure.
 */
import { createHash } from 'node:crypto';
import { pickContainerSettings } from '../../protocol/container-settings.js';
import type { TargetApp, TargetService } from '../../protocol/target-state.js';
import { LABEL } from '../../protocol/engine-labels.js';
import { normaliseImageRef, type ContainerSpec } from '../adapters/engine.js';

export interface SpecContext {
  vendor: string;
  /**
   * The word of the variables only a labelled service gets (`<WORD>_SUPERVISOR_ADDRESS`, ...),
   * when not the vendor's: an emulated supervisor before 7.22.0 (the `legacyVendor` setting).
   */
  apiVendor?: string;
  uuid: string;
  deviceName: string;
  deviceType: string;
  arch: string;
  /** PLATFORM_SUPERVISOR_ADDRESS of labelled services on the supervisor network; empty: its gateway's. */
  supervisorAddress: string;
  supervisorPort: number;
  /** Host address the device's published ports bind to (the `publishAddress` setting); empty or absent: as each service's `ports` say. */
  publishAddress?: string;
  /** The supervisor network as the engine has it, when it fits the settings; absent until then. `apiHost`: where the API answers on it. */
  supervisorNetwork?: { name: string; subnet: string; gateway: string; apiHost: string };
  /**
   * The device's host network when it is not the engine host's (the `hostNetworkContainer`
   * setting): services with `network_mode: host` share this container's namespace;
   * `supervisorInside`: it is the supervisor's own, whose loopback the API answers on.
   */
  hostNetwork?: { container: string; supervisorInside: boolean };
  /** Key handed to services of this app that carry the supervisor-api label. */
  appKey(appId: number): string;
  lockDir(appId: number, serviceName: string): string;
  networkName(appId: number, network: string): string;
  volumeName(appId: number, volume: string): string;
}

export interface DesiredContainer {
  appId: number;
  service: TargetService;
  /** The variables the container gets: the release's own plus the platform's. */
  environment: Record<string, string>;
  spec: ContainerSpec;
  configHash: string;
  /** The app networks it joins, the one it is created on first; empty for host, none and bridge modes. */
  appNetworks: string[];
  /** Its API address is on the supervisor network (it joins it, or its host network did), so it waits for that network. */
  needsSupervisorNetwork: boolean;
  /** The supervisor network its address and attachment were made for, when it needs one and it was known. */
  madeForSupervisorNetwork?: string;
}

export const supervisorApiLabel = (vendor: string) => `io.${vendor}.features.supervisor-api`;

function hasApiLabel(service: TargetService, vendor: string): boolean {
  const value = service.labels[supervisorApiLabel(vendor)];
  return value === '1' || value === 'true';
}

/** The word of a labelled service's API variables. */
const apiWord = (ctx: Pick<SpecContext, 'vendor' | 'apiVendor'>) => (ctx.apiVendor ?? ctx.vendor).toUpperCase();

/** Variables that identify the device to the service but must not force a recreate. */
const nameAtInit = (ctx: Pick<SpecContext, 'vendor' | 'apiVendor'>) => `${apiWord(ctx)}_DEVICE_NAME_AT_INIT`;

/**
 * A labelled service joins the supervisor network unless it has the host's network (where the
 * API is on loopback) or none at all (nothing to join with).
 */
export function joinsSupervisorNetwork(service: TargetService, vendor: string): boolean {
  return hasApiLabel(service, vendor) && service.networkMode !== 'host' && service.networkMode !== 'none';
}

/**
 * A labelled service reaches the API over the supervisor network when it joins it, and when it
 * has the host network but that is a container other than the supervisor's (a simulated
 * device's on a shared engine), which joined it: there loopback is not the supervisor's.
 */
export function needsSupervisorNetwork(service: TargetService, ctx: Pick<SpecContext, 'vendor' | 'hostNetwork'>): boolean {
  if (joinsSupervisorNetwork(service, ctx.vendor)) return true;
  return hasApiLabel(service, ctx.vendor) && service.networkMode === 'host' && ctx.hostNetwork !== undefined && !ctx.hostNetwork.supervisorInside;
}

/** Where a labelled service reaches the API; empty while the supervisor network it needs does not exist. */
export function supervisorAddressFor(service: TargetService, ctx: SpecContext): string {
  if (!needsSupervisorNetwork(service, ctx)) return `http://127.0.0.1:${ctx.supervisorPort}`;
  if (ctx.supervisorAddress) return ctx.supervisorAddress;
  return ctx.supervisorNetwork ? `http://${ctx.supervisorNetwork.apiHost}:${ctx.supervisorPort}` : '';
}

export function platformEnvironment(app: TargetApp, service: TargetService, ctx: SpecContext): Record<string, string> {
  const V = ctx.vendor.toUpperCase();
  const withApi = hasApiLabel(service, ctx.vendor);
  return {
    [V]: '1',
    [`${V}_APP_NAME`]: app.name,
    [`${V}_SERVICE_NAME`]: service.serviceName,
    ...deviceEnvironment(app.appId, ctx, withApi ? supervisorAddressFor(service, ctx) : undefined),
    ...(withApi ? { [nameAtInit(ctx)]: ctx.deviceName } : {}),
  };
}

/**
 * The platform variables that come from the device and its supervisor rather than from the
 * release: the same for every service of an app but the API address (the API ones only with
 * the supervisor-api label: `apiAddress`). A replayed device has its own values for these
 * (replay-plan.ts).
 */
export function deviceEnvironment(appId: number, ctx: SpecContext, apiAddress: string | undefined): Record<string, string> {
  const V = ctx.vendor.toUpperCase();
  const A = apiWord(ctx);
  return {
    [`${V}_DEVICE_UUID`]: ctx.uuid,
    [`${V}_DEVICE_TYPE`]: ctx.deviceType,
    [`${V}_DEVICE_ARCH`]: ctx.arch,
    [`${V}_APP_LOCK_PATH`]: `/tmp/${ctx.vendor}/updates.lock`,
    ...(apiAddress !== undefined
      ? {
          [`${A}_SUPERVISOR_ADDRESS`]: apiAddress,
          [`${A}_SUPERVISOR_HOST`]: apiAddress && new URL(apiAddress).hostname,
          [`${A}_SUPERVISOR_PORT`]: String(ctx.supervisorPort),
          [`${A}_SUPERVISOR_API_KEY`]: ctx.appKey(appId),
          [`${A}_APP_ID`]: String(appId),
        }
      : {}),
  };
}

/** The app networks a service joins, its network mode first; none for the engine's own modes. */
export function appNetworksFor(app: TargetApp, service: TargetService): string[] {
  if (service.networks?.length) return service.networks;
  const mode = service.networkMode;
  if (mode === 'host' || mode === 'none' || mode === 'bridge') return [];
  return [mode && app.networks.includes(mode) ? mode : 'default'];
}

/**
 * What a target's desired containers take from the context, as one string: equal strings,
 * equal containers for the same target. Network, volume and lock names follow from the
 * device's uuid and the fixed configuration, so the uuid stands for them.
 */
export function specInputs(ctx: SpecContext, target: { apps: readonly TargetApp[] }): string {
  const net = ctx.supervisorNetwork;
  const host = ctx.hostNetwork;
  const scalars = [ctx.vendor, ctx.apiVendor ?? '', ctx.uuid, ctx.deviceName, ctx.deviceType, ctx.arch, ctx.supervisorAddress, String(ctx.supervisorPort), net ? `${net.name} ${net.subnet} ${net.gateway} ${net.apiHost}` : '', ctx.publishAddress ?? '', host ? `${host.container} ${host.supervisorInside}` : ''];
  return [...scalars, ...target.apps.map((a) => `${a.appId}=${ctx.appKey(a.appId)}`)].join('\u0000');
}

export function desiredContainer(app: TargetApp, service: TargetService, ctx: SpecContext): DesiredContainer {
  // Platform variables win over the release's own, as a service must not spoof its identity.
  const environment = { ...service.environment, ...platformEnvironment(app, service, ctx) };
  const binds = [
    `${ctx.lockDir(app.appId, service.serviceName)}:/tmp/${ctx.vendor}`,
    ...service.volumes.map((v) => `${ctx.volumeName(app.appId, v.volume)}:${v.path}${v.readOnly ? ':ro' : ''}`),
  ];
  const appNetworks = appNetworksFor(app, service);
  const appNetwork = appNetworks[0];
  // The device's host network, where it is a container's: the engine host's is every device's.
  const inHostContainer = service.networkMode === 'host' && ctx.hostNetwork !== undefined;
  const networkMode = appNetwork ? ctx.networkName(app.appId, appNetwork) : inHostContainer ? `container:${ctx.hostNetwork!.container}` : service.networkMode!;
  const extraNetworks = appNetworks.slice(1).map((n) => ctx.networkName(app.appId, n));
  const joinsSupervisor = joinsSupervisorNetwork(service, ctx.vendor);
  const needsSupervisor = needsSupervisorNetwork(service, ctx);
  const supervisorNetwork = joinsSupervisor ? ctx.supervisorNetwork : undefined;
  const settings = inHostContainer ? hostNetworkSettings(pickContainerSettings(service)) : pickContainerSettings(service);
  // Only for a service that publishes ports: the address changes nothing else.
  const publishAddress = !inHostContainer && service.ports?.length && ctx.publishAddress ? ctx.publishAddress : undefined;
  const hashed = {
    image: normaliseImageRef(service.image),
    imageId: service.imageId,
    releaseId: app.releaseId,
    command: service.command ?? null,
    env: Object.entries(environment).filter(([k]) => k !== nameAtInit(ctx)).sort(),
    labels: Object.entries(service.labels).sort(),
    binds,
    networkMode,
    restart: service.restart,
    // Only when set, so a container made before these settings existed keeps its hash.
    ...settings,
    ...(extraNetworks.length ? { extraNetworks } : {}),
    // Its subnet too: a network replaced on another subnet must be joined again.
    ...(supervisorNetwork ? { supervisorNetwork: `${supervisorNetwork.name} ${supervisorNetwork.subnet}` } : {}),
    // Its ports are bound elsewhere: the container must be made again to move them.
    ...(publishAddress ? { publishAddress } : {}),
  };
  const configHash = createHash('sha256').update(JSON.stringify(hashed)).digest('hex').slice(0, 32);
  return {
    appId: app.appId,
    service,
    environment,
    configHash,
    appNetworks,
    needsSupervisorNetwork: needsSupervisor,
    ...(needsSupervisor && ctx.supervisorNetwork ? { madeForSupervisorNetwork: ctx.supervisorNetwork.name } : {}),
    spec: {
      name: `${ctx.uuid.slice(0, 7)}_${service.serviceName}_${app.releaseId}`,
      image: service.image,
      command: service.command,
      env: Object.entries(environment).map(([k, v]) => `${k}=${v}`),
      labels: {
        ...service.labels,
        [LABEL.appId]: String(app.appId),
        [LABEL.serviceId]: String(service.serviceId),
        [LABEL.serviceName]: service.serviceName,
        [LABEL.imageId]: String(service.imageId),
        [LABEL.releaseId]: String(app.releaseId),
        [LABEL.commit]: app.commit,
        [LABEL.configHash]: configHash,
      },
      binds,
      networkMode,
      ...(extraNetworks.length ? { extraNetworks } : {}),
      aliases: [service.serviceName],
      ...(supervisorNetwork ? { supervisorNetwork: supervisorNetwork.name } : {}),
      ...(publishAddress ? { publishAddress } : {}),
      restart: service.restart,
      ...settings,
    },
  };
}

/**
 * A host-network service's settings in another container's namespace: the engine refuses ports,
 * a hostname and extra hosts there (they are the namespace's), and in the host network it
 * discards published ports anyway.
 */
function hostNetworkSettings<T extends { ports?: unknown; hostname?: unknown; extraHosts?: unknown }>(settings: T): Omit<T, 'ports' | 'hostname' | 'extraHosts'> {
  const { ports: _ports, hostname: _hostname, extraHosts: _extraHosts, ...rest } = settings;
  return rest;
}
