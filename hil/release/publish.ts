/**
 * A release onto a fleet of a fleetlab cloud, through its data API: one `service` row per
 * compose service (reused when it exists), one `image` per service at the reference the
 * release was built as, the `release` with its composition (what each service runs with),
 * the `release_image` links, and the fleet pinned to it. The fleet's devices then poll their
 * new target state and apply it as they would any release.
 */
import { FleetlabError, errorText } from '../../src/errors.js';
import { containerSettingsToWire } from '../../src/protocol/container-settings.js';
import { linksToWire } from '../../src/protocol/target-state.js';
import type { Release } from './release.js';

export interface CloudTarget {
  /** Base URL of the cloud, e.g. http://127.0.0.1:48400 */
  url: string;
  /** A key that may write the fleet's rows (the admin key printed by `npm start`). */
  apiKey: string;
  /** The fleet's name (`app_name`) or id. */
  fleet: string;
}

export interface PublishedRelease {
  fleetId: number;
  releaseId: number;
  commit: string;
}

type Fetch = typeof fetch;

/** One call of the cloud's API; anything but 2xx is an error that names the call and the answer. */
async function call<T>(target: CloudTarget, method: string, path: string, body: unknown, fetcher: Fetch): Promise<T> {
  let res: Response;
  try {
    res = await fetcher(new URL(path, target.url), {
      method,
      headers: { authorization: `Bearer ${target.apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(30_000),
    });
  } catch (err) {
    throw new FleetlabError('HIL_ERR_DEPLOY', `the cloud at ${target.url} does not answer (${errorText(err)}): check --cloud (npm start prints its URL)`);
  }
  const text = await res.text();
  if (res.status === 401) throw new FleetlabError('HIL_ERR_DEPLOY', `the cloud refused the key (401) on ${method} ${path}: pass a key that may write the fleet (--api-key; npm start prints the admin key)`);
  if (res.status < 200 || res.status > 299) throw new FleetlabError('HIL_ERR_DEPLOY', `${method} ${path} on the cloud answered ${res.status}: ${text.slice(0, 500)}`);
  return (text ? JSON.parse(text) : undefined) as T;
}

const rows = <T>(body: { d: T[] }): T[] => body.d;
const quote = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** What each service runs with, as a release row's composition carries it. */
export function compositionOf(release: Release): Record<string, unknown> {
  const services: Record<string, Record<string, unknown>> = {};
  for (const s of release.project.services) {
    services[s.name] = {
      environment: s.environment,
      labels: s.labels,
      ...(s.command ? { command: s.command } : {}),
      ...(s.volumes.length ? { volumes: s.volumes } : {}),
      ...(s.restart ? { restart: s.restart } : {}),
      ...(s.networkMode ? { network_mode: s.networkMode } : {}),
      ...containerSettingsToWire(s),
      ...linksToWire(s),
    };
  }
  return {
    services,
    volumes: Object.fromEntries(release.project.volumes.map((v) => [v, {}])),
    ...(release.project.networks.length ? { networks: Object.fromEntries(release.project.networks.map((n) => [n, {}])) } : {}),
  };
}

/**
 * The fleet `target` names (name or id), as this key sees it. `fleetlab deploy` asks it before
 * it builds, so a cloud that does not answer, a wrong key or fleet is said at once.
 */
export async function findFleet(target: CloudTarget, fetcher: Fetch = fetch): Promise<{ id: number; app_name: string }> {
  const byId = /^[1-9][0-9]*$/.test(target.fleet);
  const fleets = rows(await call<{ d: Array<{ id: number; app_name: string }> }>(target, 'GET', `/v6/application?$select=id,app_name&$filter=${byId ? `id eq ${target.fleet}` : `app_name eq ${quote(target.fleet)}`}`, undefined, fetcher));
  const fleet = fleets[0];
  if (!fleet) throw new FleetlabError('HIL_ERR_DEPLOY', `no fleet ${JSON.stringify(target.fleet)} on ${target.url} that this key may see`);
  return fleet;
}

export async function publishRelease(release: Release, target: CloudTarget, log: (line: string) => void = () => undefined, fetcher: Fetch = fetch): Promise<PublishedRelease> {
  const fleet = await findFleet(target, fetcher);

  const existing = rows(await call<{ d: Array<{ id: number }> }>(target, 'GET', `/v6/release?$select=id&$filter=belongs_to__application eq ${fleet.id} and commit eq ${quote(release.commit)}`, undefined, fetcher));
  let releaseId = existing[0]?.id;
  if (releaseId !== undefined) {
    log(`release ${release.commit.slice(0, 8)} is already on the cloud (release ${releaseId})`);
  } else {
    const created = await call<{ id: number }>(target, 'POST', '/v6/release', { belongs_to__application: fleet.id, commit: release.commit, status: 'success', composition: compositionOf(release) }, fetcher);
    releaseId = created.id;
    for (const s of release.project.services) {
      const found = rows(await call<{ d: Array<{ id: number }> }>(target, 'GET', `/v6/service?$select=id&$filter=application eq ${fleet.id} and service_name eq ${quote(s.name)}`, undefined, fetcher));
      const serviceId = found[0]?.id ?? (await call<{ id: number }>(target, 'POST', '/v6/service', { application: fleet.id, service_name: s.name }, fetcher)).id;
      const image = await call<{ id: number }>(target, 'POST', '/v6/image', { is_a_build_of__service: serviceId, is_stored_at__image_location: release.images[s.name], status: 'success' }, fetcher);
      await call(target, 'POST', '/v6/release_image', { image: image.id, is_part_of__release: releaseId }, fetcher);
    }
    log(`release ${releaseId} (${release.commit.slice(0, 8)}) created on fleet ${fleet.app_name}: ${release.project.services.map((s) => s.name).join(', ')}`);
  }
  await call(target, 'PATCH', `/v6/application(${fleet.id})`, { should_be_running__release: releaseId }, fetcher);
  log(`fleet ${fleet.app_name} (id ${fleet.id}) now runs release ${releaseId}`);
  return { fleetId: fleet.id, releaseId, commit: release.commit };
}

export interface FleetProgress {
  devices: number;
  online: number;
  running: number;
}

/** Where the fleet's devices are with `releaseId`: how many are online and how many run it. */
export async function fleetProgress(target: CloudTarget, fleetId: number, releaseId: number, fetcher: Fetch = fetch): Promise<FleetProgress> {
  const devices = rows(await call<{ d: Array<{ is_online: boolean; is_running__release: { __id: number } | null }> }>(target, 'GET', `/v6/device?$select=is_online,is_running__release&$filter=belongs_to__application eq ${fleetId}`, undefined, fetcher));
  return {
    devices: devices.length,
    online: devices.filter((d) => d.is_online).length,
    running: devices.filter((d) => d.is_running__release?.__id === releaseId).length,
  };
}
