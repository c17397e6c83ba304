/**
 * The planner: (current engine state, target state) -> the next round of steps. Pure and
 * deterministic; the applier runs a round, reads the engine again and asks for the next,
 * until a round is empty. Because each round is derived from what the engine reports, a
 * supervisor killed halfway through resumes by planning again.
 *
 * Ordering rules:
 * - new images are fetched while the old release keeps running; a service is replaced only
 *   when every image of its app's target release is present (no half-updated app);
 * - networks and volumes exist before containers that use them; the supervisor network exists
 *   (as the settings say, with the containers it must hold connected) before a labelled service
 *   whose address is on it is created, and is kept after;
 * - a service with `depends_on` is created (or started) only once each service it depends on
 *   has a container of the target release that has started (compose's `service_started`), or
 *   runs and is healthy (`service_healthy`); while only health holds a service back the round
 *   says so with a `wait` step, as nothing else would make the applier look again;
 * - an outdated container is removed (under its update lock) before its successor is created;
 * - networks of removed apps go once their containers are gone; volumes stay until
 *   `cleanup-volumes` (as the spec says since 10.0; docs/device-api.md, "Supervisor versions"),
 *   unless `removeUnreferencedVolumes` (an emulated supervisor before 10.0): then a volume no
 *   target declares goes once every container of its app is of the target (none can mount it).
 */
import type { TargetApp, TargetState } from '../../protocol/target-state.js';
import { normaliseImageRef, type EngineSnapshot, type ManagedContainer, type ManagedNetwork, type ManagedVolume } from '../adapters/engine.js';
import type { DesiredContainer } from './container-spec.js';

export type Step =
  | { action: 'fetch'; appId: number; serviceName: string; image: string }
  | { action: 'createSupervisorNetwork' }
  | { action: 'createNetwork'; appId: number; network: string }
  | { action: 'createVolume'; appId: number; volume: string }
  | { action: 'removeContainer'; appId: number; container: ManagedContainer; reason: string }
  | { action: 'createContainer'; appId: number; desired: DesiredContainer }
  | { action: 'start'; appId: number; container: ManagedContainer }
  | { action: 'stop'; appId: number; container: ManagedContainer }
  | { action: 'removeNetwork'; appId: number; network: ManagedNetwork }
  | { action: 'removeVolume'; appId: number; volume: ManagedVolume }
  /** Nothing to do but look again: `serviceName` waits for the health of services it depends on. */
  | { action: 'wait'; appId: number; serviceName: string; reason: string };

export interface PlanInput {
  target: TargetState;
  current: EngineSnapshot;
  /** Desired container per target service, keyed `${appId}/${serviceName}`. */
  desired: ReadonlyMap<string, DesiredContainer>;
  /**
   * Exited containers to start although they exited: those the supervisor found exited when it
   * started, each until it has been started once (a stop is temporary: a reboot undoes it). Any
   * other exited container stays so: a service the user stopped, or one that ran and exited,
   * even while the supervisor's first apply is still going.
   */
  startExited?: ReadonlySet<string>;
  /** Remove volumes no target declares in a normal update, as supervisors before 10.0 did. */
  removeUnreferencedVolumes?: boolean;
}

export const serviceKey = (appId: number, serviceName: string) => `${appId}/${serviceName}`;

/** A step as a person reads it: what an apply in flight is doing (StateEngine.activity). */
export function describeStep(step: Step): string {
  switch (step.action) {
    case 'fetch':
      return `fetching ${step.serviceName}'s image`;
    case 'createSupervisorNetwork':
      return 'creating the supervisor network';
    case 'createNetwork':
      return `creating network ${step.network}`;
    case 'createVolume':
      return `creating volume ${step.volume}`;
    case 'removeContainer':
      return `removing ${step.container.serviceName} (${step.reason})`;
    case 'createContainer':
      return `creating ${step.desired.service.serviceName}`;
    case 'start':
      return `starting ${step.container.serviceName}`;
    case 'stop':
      return `stopping ${step.container.serviceName}`;
    case 'removeNetwork':
      return `removing network ${step.network.network}`;
    case 'removeVolume':
      return `removing volume ${step.volume.volume}`;
    case 'wait':
      return `${step.serviceName} waits: ${step.reason}`;
  }
}

export function imagePresent(images: Map<string, string>, ref: string): boolean {
  return images.has(ref) || images.has(normaliseImageRef(ref));
}

function planApp(app: TargetApp, input: PlanInput): Step[] {
  const { current, desired } = input;
  const steps: Step[] = [];
  const appId = app.appId;
  const containers = current.containers.filter((c) => c.appId === appId);
  const networks = new Set(current.networks.filter((n) => n.appId === appId).map((n) => n.network));
  const volumes = new Set(current.volumes.filter((v) => v.appId === appId).map((v) => v.volume));

  for (const network of ['default', ...app.networks]) {
    if (!networks.has(network)) steps.push({ action: 'createNetwork', appId, network });
  }
  for (const volume of app.volumes) {
    if (!volumes.has(volume)) steps.push({ action: 'createVolume', appId, volume });
  }

  const missing = app.services.filter((s) => !imagePresent(current.images, s.image));
  const fetchedImages = new Set<string>();
  for (const service of missing) {
    const ref = normaliseImageRef(service.image);
    if (fetchedImages.has(ref)) continue;
    fetchedImages.add(ref);
    steps.push({ action: 'fetch', appId, serviceName: service.serviceName, image: service.image });
  }
  const releaseReady = missing.length === 0;

  const targetNames = new Set(app.services.map((s) => s.serviceName));
  const seen = new Set<string>();
  for (const container of containers) {
    const want = desired.get(serviceKey(appId, container.serviceName));
    if (!targetNames.has(container.serviceName) || !want) {
      if (releaseReady) steps.push({ action: 'removeContainer', appId, container, reason: 'service is not in the target release' });
      continue;
    }
    if (container.configHash !== want.configHash || seen.has(container.serviceName)) {
      if (releaseReady) steps.push({ action: 'removeContainer', appId, container, reason: seen.has(container.serviceName) ? 'duplicate container' : 'configuration changed' });
      continue;
    }
    seen.add(container.serviceName);
    const wantRunning = want.service.running;
    if (wantRunning && (container.state === 'created' || (container.state === 'exited' && (input.startExited?.has(container.id) ?? false)))) {
      steps.push({ action: 'start', appId, container });
    } else if (!wantRunning && (container.state === 'running' || container.state === 'restarting')) {
      steps.push({ action: 'stop', appId, container });
    }
  }

  // A dependency counts as started when its up-to-date container has run and is not being
  // (re)started in this very round; its dependents wait for the next round's snapshot.
  const starting = new Set(steps.flatMap((s) => (s.action === 'start' ? [s.container.serviceName] : [])));
  const hasStarted = (c: ManagedContainer) => {
    const want = desired.get(serviceKey(appId, c.serviceName));
    // A service the target keeps stopped is as started as it will get once its container exists.
    return c.configHash === want?.configHash && (c.state !== 'created' || !want.service.running) && !starting.has(c.serviceName);
  };
  const started = new Set(containers.filter(hasStarted).map((c) => c.serviceName));
  const upToDate = new Map(containers.filter((c) => c.configHash === desired.get(serviceKey(appId, c.serviceName))?.configHash).map((c) => [c.serviceName, c]));
  const healthy = new Set([...upToDate.values()].filter((c) => hasStarted(c) && c.state === 'running' && c.health === 'healthy').map((c) => c.serviceName));
  const serviceOf = (name: string) => desired.get(serviceKey(appId, name))?.service;
  const depsStarted = (serviceName: string) => (serviceOf(serviceName)?.dependsOn ?? []).every((d) => started.has(d));
  const depsReady = (serviceName: string) => depsStarted(serviceName) && (serviceOf(serviceName)?.dependsOnHealthy ?? []).every((d) => healthy.has(d));
  /** Why a service whose dependencies have started still waits: one phrase per dependency not healthy yet. */
  const healthWait = (serviceName: string): Step[] => {
    if (!depsStarted(serviceName) || depsReady(serviceName)) return [];
    const why = (serviceOf(serviceName)?.dependsOnHealthy ?? []).filter((d) => !healthy.has(d)).map((d) => {
      const c = upToDate.get(d);
      if (!c || c.state !== 'running') return `${d} is not running`;
      if (c.health === 'unhealthy') return `${d} is unhealthy`;
      if (c.health === 'starting') return `${d}'s healthcheck has not passed yet`;
      return `${d} has no healthcheck (give it one in the compose file or its image)`;
    });
    return [{ action: 'wait', appId, serviceName, reason: `${serviceName} waits for ${why.join(', ')}` }];
  };
  const ordered = steps.flatMap((s) => (s.action !== 'start' || depsReady(s.container.serviceName) ? [s] : healthWait(s.container.serviceName)));

  if (!releaseReady) return ordered;
  const staleNames = new Set(
    ordered.filter((s): s is Extract<Step, { action: 'removeContainer' }> => s.action === 'removeContainer').map((s) => s.container.serviceName),
  );
  for (const service of app.services) {
    if (seen.has(service.serviceName) || staleNames.has(service.serviceName)) continue;
    const want = desired.get(serviceKey(appId, service.serviceName));
    if (!want) continue;
    const netReady = want.appNetworks.every((n) => networks.has(n)) && (!want.needsSupervisorNetwork || (current.supervisorNetwork?.usable === true && want.madeForSupervisorNetwork === current.supervisorNetwork.name));
    const volReady = service.volumes.every((v) => volumes.has(v.volume));
    if (netReady && volReady && depsReady(service.serviceName)) ordered.push({ action: 'createContainer', appId, desired: want });
    else if (netReady && volReady) ordered.push(...healthWait(service.serviceName));
  }
  // Every container of the app of the target: only declared volumes are mounted.
  const allCurrent = containers.every((c) => c.configHash === desired.get(serviceKey(appId, c.serviceName))?.configHash);
  if (input.removeUnreferencedVolumes && allCurrent) ordered.push(...unreferencedVolumes(appId, new Set(app.volumes), input));
  return ordered;
}

function unreferencedVolumes(appId: number, declared: ReadonlySet<string>, input: PlanInput): Step[] {
  return input.current.volumes.filter((v) => v.appId === appId && !declared.has(v.volume)).map((volume) => ({ action: 'removeVolume', appId, volume }));
}

function planRemovedApp(appId: number, input: PlanInput): Step[] {
  const containers = input.current.containers.filter((c) => c.appId === appId);
  if (containers.length > 0) {
    return containers.map((container) => ({ action: 'removeContainer', appId, container, reason: 'app is not in the target state' }));
  }
  const volumes = input.removeUnreferencedVolumes ? unreferencedVolumes(appId, new Set(), input) : [];
  return [...volumes, ...input.current.networks.filter((n) => n.appId === appId).map((network): Step => ({ action: 'removeNetwork', appId, network }))];
}

export function plan(input: PlanInput): Step[] {
  const targetIds = new Set(input.target.apps.map((a) => a.appId));
  const currentIds = new Set([
    ...input.current.containers.map((c) => c.appId),
    ...input.current.networks.map((n) => n.appId),
    ...(input.removeUnreferencedVolumes ? input.current.volumes.map((v) => v.appId) : []),
  ]);
  const steps: Step[] = [];
  const wantsSupervisorNetwork = [...input.desired.values()].some((d) => d.needsSupervisorNetwork);
  if (wantsSupervisorNetwork && !input.current.supervisorNetwork?.usable) steps.push({ action: 'createSupervisorNetwork' });
  for (const app of input.target.apps) steps.push(...planApp(app, input));
  for (const appId of [...currentIds].filter((id) => !targetIds.has(id)).sort((a, b) => a - b)) {
    steps.push(...planRemovedApp(appId, input));
  }
  return steps;
}
