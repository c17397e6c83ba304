/**
 * The target state a device is driven to: the wire shape of `POST /v2/local/target-state`
 * (and, later, of the cloud's per-device target state), its JSON schema, and the normalised
 * form the planner works on.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { checkContainerSettings, containerSettingsFromWire, containerSettingsSchema, containerSettingsToWire, type ContainerSettings } from './container-settings.js';

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
  /** Compose-style container settings (container-settings.ts); absent means the image's or the engine's default. */
  ...containerSettingsSchema,
  /** App networks (declared in the app's `networks`) the service joins instead of `default`. */
  networks: Type.Optional(Type.Array(name('app network name'), { minItems: 1, uniqueItems: true })),
  /**
   * Services of the same app this one starts after: a list (each must have started), or
   * compose's mapping whose `condition` says whether each must have started or be healthy.
   */
  depends_on: Type.Optional(
    Type.Union([
      Type.Array(name('service name'), { uniqueItems: true }),
      Type.Record(
        Type.String({ pattern: '^[a-zA-Z0-9][a-zA-Z0-9_.-]*$' }),
        Type.Object({ condition: Type.Union([Type.Literal('service_started'), Type.Literal('service_healthy')]) }, { additionalProperties: false }),
      ),
    ]),
  ),
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

/** How a service hangs together with the rest of its app: compose's `networks` and `depends_on`; each absent when not set. */
export interface ServiceLinks {
  /** App networks the service joins (the first as its network mode); absent: `default`. */
  networks?: string[];
  /** Services whose containers must have started first; ordering only, not part of the container. */
  dependsOn?: string[];
  /** Those of `dependsOn` that must also be healthy (compose's `condition: service_healthy`). */
  dependsOnHealthy?: string[];
}

/** The services `depends_on` names, in either of its forms. */
export const dependencyNames = (dependsOn: WireService['depends_on']): string[] => (Array.isArray(dependsOn) ? dependsOn : Object.keys(dependsOn ?? {}));

export function linksFromWire(w: Pick<WireService, 'networks' | 'depends_on'>): ServiceLinks {
  const deps = dependencyNames(w.depends_on);
  const healthy = Array.isArray(w.depends_on) ? [] : Object.entries(w.depends_on ?? {}).filter(([, d]) => d.condition === 'service_healthy').map(([n]) => n);
  return {
    ...(w.networks?.length ? { networks: w.networks } : {}),
    ...(deps.length ? { dependsOn: deps } : {}),
    ...(healthy.length ? { dependsOnHealthy: healthy } : {}),
  };
}

/** The list form while every condition is `service_started`, so such states read as they always did. */
export function linksToWire(l: ServiceLinks): Pick<WireService, 'networks' | 'depends_on'> {
  const healthy = new Set(l.dependsOnHealthy ?? []);
  const dependsOn = !l.dependsOn?.length
    ? undefined
    : healthy.size === 0
      ? l.dependsOn
      : Object.fromEntries(l.dependsOn.map((d) => [d, { condition: healthy.has(d) ? ('service_healthy' as const) : ('service_started' as const) }]));
  return {
    ...(l.networks?.length ? { networks: l.networks } : {}),
    ...(dependsOn ? { depends_on: dependsOn } : {}),
  };
}

export interface TargetService extends ContainerSettings, ServiceLinks {
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
      problems.push(...checkContainerSettings(service, at));
    }
    const dependsOn = new Map(Object.entries(app.services).map(([k, s]) => [s.serviceName, { at: `local.apps.${appKey}.services.${k}`, deps: dependencyNames(s.depends_on) }]));
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
    ...containerSettingsFromWire(service),
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
        ...containerSettingsToWire(s),
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
