/**
 * What a caller may see and touch (docs/decisions.md item 3, issue 16): the device key the whole
 * device, an app's scoped key its own app only. These filters are applied where the device
 * API reads app data (api/reads.ts, AppActions), never per route, so a route added later
 * cannot forget them. docs/device-api-scopes.md lists what each endpoint gives a scoped key.
 */
import { unauthorized } from '../../errors.js';
import type { TargetState, WireLocalState } from '../../protocol/target-state.js';
import type { EngineSnapshot } from '../adapters/engine.js';
import type { Identity } from './keys.js';
import { overallProgress, type DeviceView } from './status.js';

export const wholeDevice: Identity = { kind: 'device' };

export function inScope(who: Identity, appId: number): boolean {
  return who.kind === 'device' || who.appId === appId;
}

/**
 * Refuses an app outside the caller's scope. Callers check this before looking the app up,
 * so a scoped key gets 401 for every other id and cannot probe which apps exist.
 */
export function requireInScope(who: Identity, appId: number): void {
  if (!inScope(who, appId)) throw unauthorized();
}

export function scoped<T extends { appId: number }>(who: Identity, items: readonly T[]): T[] {
  return items.filter((item) => inScope(who, item.appId));
}

/**
 * The view of the caller's apps. Per-app lists, commits and the download progress computed
 * from them are narrowed; `status` and `appState` stay the device's (an update of another
 * app still makes the device busy, as balena-supervisor reports it).
 */
export function scopedView(who: Identity, view: DeviceView): DeviceView {
  if (who.kind === 'device') return view;
  const images = scoped(who, view.images);
  const percents = images.flatMap((i) => (i.downloadProgress === null ? [] : [i.downloadProgress]));
  return {
    ...view,
    downloadProgress: overallProgress(percents),
    services: scoped(who, view.services),
    containers: scoped(who, view.containers),
    images,
    commits: new Map([...view.commits].filter(([appId]) => inScope(who, appId))),
  };
}

/** The target with only the caller's apps; name and config are the device's and stay. */
export function scopedTarget(who: Identity, target: TargetState): TargetState {
  return who.kind === 'device' ? target : { ...target, apps: scoped(who, target.apps) };
}

/** The engine objects of the caller's apps; the image table is not per app and stays. */
export function scopedSnapshot(who: Identity, snapshot: EngineSnapshot): EngineSnapshot {
  if (who.kind === 'device') return snapshot;
  return {
    ...snapshot,
    containers: scoped(who, snapshot.containers),
    volumes: scoped(who, snapshot.volumes),
    networks: scoped(who, snapshot.networks),
  };
}

/**
 * A local target state written with a scoped key: it may name only its own app (else 401),
 * and every other app keeps its current target, so that what the key reads back from
 * `GET /v2/local/target-state` (its app only) can be posted again without removing the others.
 */
export function scopedTargetWrite(who: Identity, posted: WireLocalState, current: WireLocalState | null): WireLocalState {
  if (who.kind === 'device') return posted;
  for (const appId of Object.keys(posted.apps)) requireInScope(who, Number(appId));
  const others = Object.entries(current?.apps ?? {}).filter(([appId]) => !inScope(who, Number(appId)));
  return { ...posted, apps: { ...Object.fromEntries(others), ...posted.apps } };
}
