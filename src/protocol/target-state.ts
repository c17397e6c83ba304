/**
 * The target state a device is driven to: the wire shape of `POST /v2/local/target-state`
 * (and, later, of the cloud's per-device target state), its JSON schema, and the normalised
 * form the planner works on.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';

const name = (description: string) =>
  Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]*$', maxLength: 63, description });
const idKey = '^[1-9][0-9]*$';
/** A map keyed by numeric ids; other keys are refused (typebox leaves them open). */
const idMap = <T extends TSchema>(value: T) => Type.Record(Type.String({ pattern: idKey }), value, { additionalProperties: false });
/** A map keyed by names (volumes, networks). */
const nameMap = () => Type.Record(Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]*$' }), Type.Object({}), { additionalProperties: false });
const stringMap = Type.Record(Type.String(), Type.String());

export const WireService = Type.Object({
  serviceName: name('service name, also the container-name stem'),
  serviceId: Type.Integer({ minimum: 1 }),
  imageId: Type.Integer({ minimum: 1 }),
  image: Type.String({ minLength: 1, maxLength: 512, pattern: '^[^\\s]+$' }),
  running: Type.Optional(Type.Boolean()),
  environment: Type.Optional(stringMap),
  labels: Type.Optional(stringMap),
  network_mode: Type.Optional(Type.String({ minLength: 1 })),
  /** Compose-style extras: without `command` the image's default command runs. */
  command: Type.Optional(Type.Array(Type.String(), { minItems: 1 })),
  /** `<volume>:<path>` with a volume declared by the app. */
  volumes: Type.Optional(Type.Array(Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]*:/[^:]*(:ro|:rw)?$' }))),
  restart: Type.Optional(Type.Union([Type.Literal('no'), Type.Literal('always'), Type.Literal('on-failure'), Type.Literal('unless-stopped')])),
  /** Compose-style host settings; absent means the engine's default. */
  privileged: Type.Optional(Type.Boolean()),
  cap_add: Type.Optional(Type.Array(Type.String({ pattern: '^[A-Z_]+$' }))),
  cap_drop: Type.Optional(Type.Array(Type.String({ pattern: '^[A-Z_]+$' }))),
  /** `/dev/host[:/dev/container[:rwm]]` */
  devices: Type.Optional(Type.Array(Type.String({ pattern: '^/dev/[^:\\s]*(:/dev/[^:\\s]*)?(:[rwm]{1,3})?$' }))),
  /** `/path[:options]`, a tmpfs mounted in the container */
  tmpfs: Type.Optional(Type.Array(Type.String({ pattern: '^/[^:\\s]*(:[^\\s]+)?$' }))),
  /** `[ip:]hostPort:containerPort[/tcp|/udp]` */
  ports: Type.Optional(Type.Array(Type.String({ pattern: '^(([0-9.]+|\\[[0-9a-fA-F:]+\\]):)?[0-9]{1,5}:[0-9]{1,5}(/(tcp|udp))?$' }))),
  /** App networks (declared in the app's `networks`) the service joins instead of `default`. */
  networks: Type.Optional(Type.Array(name('app network name'), { minItems: 1, uniqueItems: true })),
  /** Services of the same app that must have started before this one starts. */
  depends_on: Type.Optional(Type.Array(name('service name'), { uniqueItems: true })),
});

export const WireApp = Type.Object({
  name: Type.String({ minLength: 1 }),
  commit: Type.String(),
  releaseId: Type.Union([Type.Integer({ minimum: 1 }), Type.String({ pattern: '^[1-9][0-9]*$' })]),
  services: idMap(WireService),
  volumes: Type.Optional(nameMap()),
  networks: Type.Optional(nameMap()),
});

export const WireLocalState = Type.Object({
  name: Type.String(),
  config: stringMap,
  apps: idMap(WireApp),
});

export const LocalTargetStateBody = Type.Object({ local: WireLocalState });

export type WireService = Static<typeof WireService>;
export type WireApp = Static<typeof WireApp>;
export type WireLocalState = Static<typeof WireLocalState>;

export interface VolumeMount {
  volume: string;
  path: string;
  readOnly: boolean;
}

/** A service's host settings, compose's `privileged`, `cap_add`, ... ; each absent when not set. */
export interface HostSettings {
  privileged?: boolean;
  capAdd?: string[];
  capDrop?: string[];
  /** `/dev/host[:/dev/container[:rwm]]` */
  devices?: string[];
  /** `/path[:options]` */
  tmpfs?: string[];
  /** `[ip:]hostPort:containerPort[/tcp|/udp]` */
  ports?: string[];
}

type WireHostSettings = Pick<WireService, 'privileged' | 'cap_add' | 'cap_drop' | 'devices' | 'tmpfs' | 'ports'>;

/** The settings that are set, from the wire's names. */
export function hostSettingsFromWire(w: WireHostSettings): HostSettings {
  return {
    ...(w.privileged !== undefined ? { privileged: w.privileged } : {}),
    ...(w.cap_add?.length ? { capAdd: w.cap_add } : {}),
    ...(w.cap_drop?.length ? { capDrop: w.cap_drop } : {}),
    ...(w.devices?.length ? { devices: w.devices } : {}),
    ...(w.tmpfs?.length ? { tmpfs: w.tmpfs } : {}),
    ...(w.ports?.length ? { ports: w.ports } : {}),
  };
}

/** The settings that are set, under the wire's (compose's) names. */
export function hostSettingsToWire(h: HostSettings): WireHostSettings {
  return {
    ...(h.privileged !== undefined ? { privileged: h.privileged } : {}),
    ...(h.capAdd ? { cap_add: h.capAdd } : {}),
    ...(h.capDrop ? { cap_drop: h.capDrop } : {}),
    ...(h.devices ? { devices: h.devices } : {}),
    ...(h.tmpfs ? { tmpfs: h.tmpfs } : {}),
    ...(h.ports ? { ports: h.ports } : {}),
  };
}

/** How a service hangs together with the rest of its app: compose's `networks` and `depends_on`; each absent when not set. */
export interface ServiceLinks {
  /** App networks the service joins (the first as its network mode); absent: `default`. */
  networks?: string[];
  /** Services whose containers must have started first; ordering only, not part of the container. */
  dependsOn?: string[];
}

export function linksFromWire(w: Pick<WireService, 'networks' | 'depends_on'>): ServiceLinks {
  return {
    ...(w.networks?.length ? { networks: w.networks } : {}),
    ...(w.depends_on?.length ? { dependsOn: w.depends_on } : {}),
  };
}

export function linksToWire(l: ServiceLinks): Pick<WireService, 'networks' | 'depends_on'> {
  return {
    ...(l.networks?.length ? { networks: l.networks } : {}),
    ...(l.dependsOn?.length ? { depends_on: l.dependsOn } : {}),
  };
}

/** Only the host settings of a value that has them (and more). */
export function pickHostSettings(h: HostSettings): HostSettings {
  return hostSettingsFromWire(hostSettingsToWire(h));
}

export interface TargetService extends HostSettings, ServiceLinks {
  serviceId: number;
  serviceName: string;
  imageId: number;
  image: string;
  running: boolean;
  environment: Record<string, string>;
  labels: Record<string, string>;
  networkMode?: string;
  command?: string[];
  volumes: VolumeMount[];
  restart: 'no' | 'always' | 'on-failure' | 'unless-stopped';
}

export interface TargetApp {
  appId: number;
  name: string;
  commit: string;
  releaseId: number;
  services: TargetService[];
  volumes: string[];
  networks: string[];
}

export interface TargetState {
  name: string;
  config: Record<string, string>;
  apps: TargetApp[];
}

export const emptyTarget = (name: string): TargetState => ({ name, config: {}, apps: [] });

/** Problems a schema cannot express; each names the field. Empty when the state is sound. */
export function checkWireState(state: WireLocalState): string[] {
  const problems: string[] = [];
  for (const [appKey, app] of Object.entries(state.apps)) {
    const declared = new Set(Object.keys(app.volumes ?? {}));
    const networks = new Set(['default', ...Object.keys(app.networks ?? {})]);
    const names = new Set<string>();
    for (const [serviceKey, service] of Object.entries(app.services)) {
      const at = `local.apps.${appKey}.services.${serviceKey}`;
      if (String(service.serviceId) !== serviceKey) problems.push(`${at}.serviceId must equal its key ${serviceKey}`);
      if (names.has(service.serviceName)) problems.push(`${at}.serviceName "${service.serviceName}" is used twice`);
      names.add(service.serviceName);
      for (const mount of service.volumes ?? []) {
        const volume = mount.split(':')[0]!;
        if (!declared.has(volume)) problems.push(`${at}.volumes: volume "${volume}" is not declared in local.apps.${appKey}.volumes`);
      }
      for (const network of service.networks ?? []) {
        if (!networks.has(network)) problems.push(`${at}.networks: network "${network}" is not declared in local.apps.${appKey}.networks`);
      }
      if (service.networks && service.network_mode) problems.push(`${at}: networks and network_mode cannot both be set`);
    }
    const dependsOn = new Map(Object.entries(app.services).map(([k, s]) => [s.serviceName, { at: `local.apps.${appKey}.services.${k}`, deps: s.depends_on ?? [] }]));
    for (const [serviceName, { at, deps }] of dependsOn) {
      for (const dep of deps) {
        if (dep === serviceName) problems.push(`${at}.depends_on: a service cannot depend on itself`);
        else if (!dependsOn.has(dep)) problems.push(`${at}.depends_on: "${dep}" is not a service of this app`);
      }
    }
    const cycle = dependencyCycle(new Map([...dependsOn].map(([n, { deps }]) => [n, deps.filter((d) => d !== n)])));
    if (cycle) problems.push(`local.apps.${appKey}: depends_on has a cycle: ${cycle.join(' -> ')}`);
  }
  return problems;
}

/** One cycle in a service -> dependencies graph, as the names along it (first repeated last), or undefined. */
export function dependencyCycle(graph: ReadonlyMap<string, readonly string[]>): string[] | undefined {
  const done = new Set<string>();
  const path: string[] = [];
  const visit = (node: string): string[] | undefined => {
    const at = path.indexOf(node);
    if (at >= 0) return [...path.slice(at), node];
    if (done.has(node)) return undefined;
    path.push(node);
    for (const next of graph.get(node) ?? []) {
      const found = visit(next);
      if (found) return found;
    }
    path.pop();
    done.add(node);
    return undefined;
  };
  for (const node of [...graph.keys()].sort()) {
    const found = visit(node);
    if (found) return found;
  }
  return undefined;
}

function parseMount(spec: string): VolumeMount {
  const [volume, path, mode] = spec.split(':') as [string, string, string | undefined];
  return { volume, path, readOnly: mode === 'ro' };
}

export function normaliseService(service: WireService): TargetService {
  return {
    serviceId: service.serviceId,
    serviceName: service.serviceName,
    imageId: service.imageId,
    image: service.image,
    running: service.running ?? true,
    environment: service.environment ?? {},
    labels: service.labels ?? {},
    networkMode: service.network_mode,
    command: service.command,
    volumes: (service.volumes ?? []).map(parseMount),
    restart: service.restart ?? 'always',
    ...hostSettingsFromWire(service),
    ...linksFromWire(service),
  };
}

export function normaliseState(state: WireLocalState): TargetState {
  return {
    name: state.name,
    config: state.config,
    apps: Object.entries(state.apps)
      .map(([appId, app]) => ({
        appId: Number(appId),
        name: app.name,
        commit: app.commit,
        releaseId: Number(app.releaseId),
        services: Object.values(app.services).map(normaliseService).sort((a, b) => a.serviceId - b.serviceId),
        volumes: Object.keys(app.volumes ?? {}).sort(),
        networks: Object.keys(app.networks ?? {}).sort(),
      }))
      .sort((a, b) => a.appId - b.appId),
  };
}

/** Back to the wire shape, for `GET /v2/local/target-state`. */
export function toWireState(state: TargetState): WireLocalState {
  const apps: Record<string, WireApp> = {};
  for (const app of state.apps) {
    const services: Record<string, WireService> = {};
    for (const s of app.services) {
      services[String(s.serviceId)] = {
        serviceName: s.serviceName,
        serviceId: s.serviceId,
        imageId: s.imageId,
        image: s.image,
        running: s.running,
        environment: s.environment,
        labels: s.labels,
        ...(s.networkMode ? { network_mode: s.networkMode } : {}),
        ...(s.command ? { command: s.command } : {}),
        ...(s.volumes.length ? { volumes: s.volumes.map((v) => `${v.volume}:${v.path}${v.readOnly ? ':ro' : ''}`) } : {}),
        restart: s.restart,
        ...hostSettingsToWire(s),
        ...linksToWire(s),
      };
    }
    apps[String(app.appId)] = {
      name: app.name,
      commit: app.commit,
      releaseId: String(app.releaseId),
      services,
      volumes: Object.fromEntries(app.volumes.map((v) => [v, {}])),
      networks: Object.fromEntries(app.networks.map((n) => [n, {}])),
    };
  }
  return { name: state.name, config: state.config, apps };
}
