/**
 * The device's state as the API reports it, derived (purely) from the target, what the
 * engine holds, image downloads in flight and the applier's transient per-service statuses.
 */
import type { DeviceStatus, Health, ImageStatus, ServiceStatus, StatusContainer } from '../../protocol/device-api.js';
import type { TargetState } from '../../protocol/target-state.js';
import { normaliseImageRef, type EngineSnapshot, type ManagedContainer } from '../adapters/engine.js';
import type { DesiredContainer } from './container-spec.js';
import { imagePresent, serviceKey } from './planner.js';


export interface Fetch {
  appId: number;
  serviceName: string;
  image: string;
  percent: number;
}

export interface StatusInput {
  target: TargetState;
  current: EngineSnapshot;
  desired: ReadonlyMap<string, DesiredContainer>;
  fetches: Map<string, Fetch>;
  /** The last failed pull per `${appId}/${image}`, while it is waiting to be retried. */
  pullFailures: ReadonlyMap<string, { error: string }>;
  transient: Map<string, ServiceStatus>;
  userStopped: Set<string>;
  applying: boolean;
}

export interface ServiceView {
  appId: number;
  appName: string;
  serviceName: string;
  serviceId: number;
  imageId: number;
  image: string;
  releaseId: number;
  status: ServiceStatus;
  /** The healthcheck's verdict while the service's container runs with one (compose's `healthcheck`). */
  health?: Health;
  downloadProgress: number | null;
  container?: ManagedContainer;
}

export interface DeviceView {
  status: DeviceStatus;
  appState: 'applying' | 'applied';
  downloadProgress: number | null;
  services: ServiceView[];
  containers: StatusContainer[];
  images: ImageStatus[];
  /** Commit per app id: the release its containers run, else the target's. */
  commits: Map<number, string>;
}

function containerStatus(c: ManagedContainer, wantRunning: boolean, userStopped: Set<string>): ServiceStatus {
  switch (c.state) {
    case 'running':
    case 'restarting':
      return 'Running';
    case 'created':
      return 'Installing';
    case 'dead':
      return 'Dead';
    case 'removing':
      return 'Stopping';
    default:
      return !wantRunning || userStopped.has(c.id) ? 'Stopped' : 'Exited';
  }
}

function fetchOf(fetches: Map<string, Fetch>, appId: number, image: string): Fetch | undefined {
  for (const f of fetches.values()) if (f.appId === appId && f.image === image) return f;
  return undefined;
}

/** The overall download progress: the mean of the downloads in flight, null when there are none. */
export function overallProgress(percents: readonly number[]): number | null {
  return percents.length ? Math.floor(percents.reduce((a, b) => a + b, 0) / percents.length) : null;
}

export function deviceView(input: StatusInput): DeviceView {
  const { target, current, desired, fetches, transient, userStopped } = input;
  const services: ServiceView[] = [];
  const commits = new Map<number, string>();
  const targetKeys = new Set<string>();

  for (const app of target.apps) {
    const appContainers = current.containers.filter((c) => c.appId === app.appId);
    commits.set(app.appId, appContainers.find((c) => c.commit)?.commit ?? app.commit);
    for (const service of app.services) {
      const key = serviceKey(app.appId, service.serviceName);
      targetKeys.add(key);
      const want = desired.get(key);
      const candidates = appContainers.filter((c) => c.serviceName === service.serviceName);
      const atTarget = candidates.find((c) => c.configHash === want?.configHash);
      const older = candidates.find((c) => c !== atTarget);
      const fetch = fetchOf(fetches, app.appId, service.image);
      const base = {
        appId: app.appId, appName: app.name, serviceName: service.serviceName, serviceId: service.serviceId,
        imageId: service.imageId, image: service.image, releaseId: app.releaseId,
      };
      let view: ServiceView;
      if (fetch) view = { ...base, status: 'Downloading', downloadProgress: fetch.percent };
      else if (atTarget) view = { ...base, status: containerStatus(atTarget, service.running, userStopped), downloadProgress: null, container: atTarget };
      // New image ready while the old container still runs (an update waiting for its lock).
      else if (imagePresent(input.current.images, service.image)) view = { ...base, status: 'Downloaded', downloadProgress: null, container: older };
      else if (older) {
        view = { ...base, releaseId: older.releaseId, status: containerStatus(older, service.running, userStopped), downloadProgress: null, container: older };
      } else view = { ...base, status: 'Downloading', downloadProgress: null };
      const override = transient.get(key);
      if (override) view.status = override;
      if (view.container?.health && view.status === 'Running') view.health = view.container.health;
      services.push(view);
    }
  }
  // Containers of apps or services leaving the device still show until they are gone.
  for (const c of current.containers) {
    const key = serviceKey(c.appId, c.serviceName);
    if (targetKeys.has(key)) continue;
    services.push({
      appId: c.appId, appName: String(c.appId), serviceName: c.serviceName, serviceId: c.serviceId, imageId: c.imageId,
      image: c.image, releaseId: c.releaseId, status: transient.get(key) ?? containerStatus(c, true, userStopped),
      downloadProgress: null, container: c,
    });
  }

  const containers: StatusContainer[] = current.containers.map((c) => ({
    status: transient.get(serviceKey(c.appId, c.serviceName)) ?? containerStatus(c, true, userStopped),
    serviceName: c.serviceName,
    appId: c.appId,
    imageId: c.imageId,
    serviceId: c.serviceId,
    containerId: c.id,
    createdAt: c.createdAt,
    ...(c.health ? { health: c.health } : {}),
  }));

  const images: ImageStatus[] = target.apps.flatMap((app) =>
    app.services.map((s) => {
      const fetch = fetchOf(fetches, app.appId, s.image);
      const failure = fetch ? undefined : input.pullFailures.get(`${app.appId}/${s.image}`);
      const engineImageId = input.current.images.get(s.image) ?? input.current.images.get(normaliseImageRef(s.image)) ?? '';
      return {
        name: s.image,
        appId: app.appId,
        serviceName: s.serviceName,
        imageId: s.imageId,
        engineImageId,
        // Not in the engine and not being pulled: a download still to come, or failed and waiting to be retried.
        status: fetch || !engineImageId ? ('Downloading' as const) : ('Downloaded' as const),
        downloadProgress: fetch ? fetch.percent : null,
        ...(failure ? { downloadError: failure.error } : {}),
      };
    }),
  );

  const percents = [...fetches.values()].map((f) => f.percent);
  const downloadProgress = overallProgress(percents);
  const statuses = new Set(transient.values());
  const status: DeviceStatus = percents.length
    ? 'Downloading'
    : statuses.has('Stopping') ? 'Stopping'
    : statuses.has('Installing') ? 'Installing'
    : statuses.has('Starting') ? 'Starting'
    : 'Idle';

  return { status, appState: input.applying ? 'applying' : 'applied', downloadProgress, services, containers, images, commits };
}
