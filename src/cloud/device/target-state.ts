/**
 * A device's target state, as the supervisor polls it: the fleet's target release (or the
 * release the device is pinned to), its services and images, and environment and config
 * variables merged (compose-style release composition < fleet variables < device
 * variables). `composeTarget` is pure; `loadTargetRows` reads what it needs in four queries, two
 * of them the release's, which a cache may answer (target-cache.ts).
 */
import { createHash } from 'node:crypto';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { FleetlabError } from '../../errors.js';
import { CONTAINER_SETTING_KEYS, containerSettingsFromWire, containerSettingsToWire } from '../../protocol/container-settings.js';
import { WireService, linksFromWire, linksToWire, type WireApp, type WireLocalState } from '../../protocol/target-state.js';
import type { Db } from '../db/port.js';

/** The part of a compose file a release's `composition` may carry, per service. */
const ComposedService = Type.Pick(WireService, ['command', 'environment', 'labels', 'volumes', 'restart', 'network_mode', ...CONTAINER_SETTING_KEYS, 'networks', 'depends_on']);
export const Composition = Type.Object({
  services: Type.Optional(Type.Record(Type.String(), ComposedService)),
  volumes: Type.Optional(Type.Record(Type.String(), Type.Object({}))),
  networks: Type.Optional(Type.Record(Type.String(), Type.Object({}))),
});
export type Composition = Static<typeof Composition>;

export interface TargetRows {
  readonly device: { readonly uuid: string; readonly name: string };
  readonly app: { readonly id: number; readonly name: string };
  readonly release: { readonly id: number; readonly commit: string; readonly composition: string | null } | null;
  readonly images: ReadonlyArray<{ readonly imageId: number; readonly location: string; readonly serviceId: number; readonly serviceName: string }>;
  readonly env: { readonly app: Record<string, string>; readonly device: Record<string, string> };
  readonly config: { readonly app: Record<string, string>; readonly device: Record<string, string> };
}

/** Parses a release's composition; a malformed one is the release's fault, named as such. */
export function parseComposition(text: string | null, releaseId: number): Composition {
  if (!text) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new FleetlabError('CLOUD_ERR_BAD_REQUEST', `release ${releaseId}: composition is not JSON`);
  }
  if (!Value.Check(Composition, parsed)) {
    const first = [...Value.Errors(Composition, parsed)][0];
    throw new FleetlabError('CLOUD_ERR_BAD_REQUEST', `release ${releaseId}: composition${first?.path ?? ''} ${first?.message ?? 'is malformed'}`);
  }
  return parsed;
}

export function composeTarget(rows: TargetRows): WireLocalState {
  const config = { ...rows.config.app, ...rows.config.device };
  if (!rows.release) return { name: rows.device.name, config, apps: {} };
  const composition = parseComposition(rows.release.composition, rows.release.id);
  const services: WireApp['services'] = {};
  const volumes = new Set(Object.keys(composition.volumes ?? {}));
  for (const image of rows.images) {
    const composed = composition.services?.[image.serviceName] ?? {};
    for (const v of composed.volumes ?? []) volumes.add(v.split(':')[0]!);
    services[String(image.serviceId)] = {
      serviceName: image.serviceName,
      serviceId: image.serviceId,
      imageId: image.imageId,
      image: image.location,
      environment: { ...composed.environment, ...rows.env.app, ...rows.env.device },
      labels: composed.labels ?? {},
      ...(composed.command ? { command: composed.command } : {}),
      ...(composed.volumes ? { volumes: composed.volumes } : {}),
      ...(composed.restart ? { restart: composed.restart } : {}),
      ...(composed.network_mode ? { network_mode: composed.network_mode } : {}),
      ...containerSettingsToWire(containerSettingsFromWire(composed)),
      ...linksToWire(linksFromWire(composed)),
    };
  }
  const networks = new Set(Object.keys(composition.networks ?? {}));
  for (const s of Object.values(services)) for (const n of s.networks ?? []) if (n !== 'default') networks.add(n);
  const app: WireApp = {
    name: rows.app.name,
    commit: rows.release.commit,
    releaseId: rows.release.id,
    services,
    volumes: Object.fromEntries([...volumes].sort().map((v) => [v, {}])),
    networks: Object.fromEntries([...networks].sort().map((n) => [n, {}])),
  };
  return { name: rows.device.name, config, apps: { [String(rows.app.id)]: app } };
}

/** A strong ETag over the serialised body: equal bodies, equal tags. */
export const etagOf = (body: string): string => `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;

const pairs = (rows: Array<{ name: string; value: string }>) => Object.fromEntries(rows.map((r) => [r.name, r.value]));

/** What a target takes from its release: the same for every device that runs it. */
export type ReleaseRows = Pick<TargetRows, 'release' | 'images'>;

/**
 * A target's rows. `releaseRows` reads the release's part (by default from the database);
 * a cache may answer it instead, since every device of a fleet shares it.
 */
export async function loadTargetRows(db: Db, deviceId: number, releaseRows: (releaseId: number) => Promise<ReleaseRows> = (id) => loadReleaseRows(db, id)): Promise<TargetRows> {
  const [d] = await db.query<{ uuid: string; device_name: string; app_id: number; app_name: string; release_id: number | null }>(
    `SELECT d.uuid, d.device_name, a.id AS app_id, a.app_name,
            COALESCE(d.should_be_running__release, a.should_be_running__release) AS release_id
       FROM "device" d JOIN "application" a ON a.id = d.belongs_to__application
      WHERE d.id = ?`,
    [deviceId],
  );
  if (!d) throw new FleetlabError('CLOUD_ERR_UNAUTHORIZED', 'The device of this key no longer exists');
  const releaseId = d.release_id === null ? null : Number(d.release_id);
  const { release, images } = releaseId === null ? { release: null, images: [] } : await releaseRows(releaseId);
  const vars = await db.query<{ kind: string; name: string; value: string }>(
    `SELECT 'app-env' AS kind, name, value FROM "application_environment_variable" WHERE application = ?
     UNION ALL SELECT 'dev-env', name, value FROM "device_environment_variable" WHERE device = ?
     UNION ALL SELECT 'app-config', name, value FROM "application_config_variable" WHERE application = ?
     UNION ALL SELECT 'dev-config', name, value FROM "device_config_variable" WHERE device = ?`,
    [Number(d.app_id), deviceId, Number(d.app_id), deviceId],
  );
  const of = (kind: string) => pairs(vars.filter((v) => v.kind === kind));
  return {
    device: { uuid: d.uuid, name: d.device_name },
    app: { id: Number(d.app_id), name: d.app_name },
    release,
    images,
    env: { app: of('app-env'), device: of('dev-env') },
    config: { app: of('app-config'), device: of('dev-config') },
  };
}

/** The release's row and its images (null and none when the release is gone). */
export async function loadReleaseRows(db: Db, releaseId: number): Promise<ReleaseRows> {
  const [release] = await db.query<{ id: number; commit: string; composition: string | null }>('SELECT id, "commit", composition FROM "release" WHERE id = ?', [releaseId]);
  if (!release) return { release: null, images: [] };
  const images = await db.query<{ image_id: number; location: string; service_id: number; service_name: string }>(
    `SELECT i.id AS image_id, i.is_stored_at__image_location AS location, s.id AS service_id, s.service_name
       FROM "image__is_part_of__release" ir JOIN "image" i ON i.id = ir.image JOIN "service" s ON s.id = i.is_a_build_of__service
      WHERE ir.is_part_of__release = ? ORDER BY s.id`,
    [Number(release.id)],
  );
  return {
    release: { id: Number(release.id), commit: release.commit, composition: release.composition },
    images: images.map((i) => ({ imageId: Number(i.image_id), location: i.location, serviceId: Number(i.service_id), serviceName: i.service_name })),
  };
}
