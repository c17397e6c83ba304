/**
 * Which upstream supervisor version the device API answers as (`supervisorVersion` setting):
 * one table, read from the specification's "Versioning" rows, decides what exists at a
 * version. Pure: the API, the state engine and the container specs ask `apiAt(version)`;
 * test/supervisor-versions.test.ts checks the table against the specification's.
 *
 * Endpoints the table does not name are there from the oldest version (the spec's "API
 * generally"). Where the table gives no behaviour for a version, nothing else changes: an
 * emulated 9.7.0 is fleetlab with the later rows taken away, not a reimplementation of 9.7.0
 * (docs/device-api.md, "Emulated supervisor versions").
 */
import { FleetlabError } from '../errors.js';

/** What a row adds besides endpoints; each is checked against the row's words in the spec. */
export type Behaviour =
  /** Labelled services' variables carry the `<VENDOR>_` prefix (before: the legacy one). */
  | 'vendorPrefix'
  /** `serviceName` is read in the v2 service actions (before: only `imageId`). */
  | 'serviceName'
  /** A normal update keeps volumes no target declares (before: it removes them). */
  | 'keepsUnreferencedVolumes'
  /** `format` in journal-logs. */
  | 'journalFormat'
  /** Host-config PATCH respects update locks (and takes `force`). */
  | 'hostConfigLocks'
  /** `since` and `until` in journal-logs. */
  | 'journalSinceUntil';

export interface VersionRow {
  /** The version as the spec's table writes it. */
  readonly version: string;
  /** The spec's "Added" cell, word for word. */
  readonly added: string;
  /** `METHOD /path` as the API registers it (fastify's `:param` form). */
  readonly routes: readonly string[];
  readonly behaviours: readonly Behaviour[];
}

/** The spec's "Endpoint availability by supervisor version", in its order. */
export const VERSION_TABLE: readonly VersionRow[] = [
  {
    version: 'after 1.1.0',
    added: 'API generally',
    routes: ['GET /ping', 'POST /v1/blink', 'POST /v1/update', 'POST /v1/reboot', 'POST /v1/shutdown', 'POST /v1/purge', 'POST /v1/restart', 'POST /v1/regenerate-api-key'],
    behaviours: [],
  },
  { version: '1.6', added: '`GET /v1/device`', routes: ['GET /v1/device'], behaviours: [] },
  {
    version: '1.8',
    added: '`POST /v1/apps/:appId/stop`, `POST /v1/apps/:appId/start`, `GET /v1/apps/:appId`',
    routes: ['POST /v1/apps/:appId/stop', 'POST /v1/apps/:appId/start', 'GET /v1/apps/:appId'],
    behaviours: [],
  },
  { version: '6.5', added: '`GET /v1/healthy`', routes: ['GET /v1/healthy'], behaviours: [] },
  { version: '6.6', added: '`PATCH` and `GET /v1/device/host-config`', routes: ['PATCH /v1/device/host-config', 'GET /v1/device/host-config'], behaviours: [] },
  {
    version: '7.0.0',
    added: '`restart-service`, `stop-service`, `start-service`, `restart`, `purge` under `/v2/applications/:appId/`',
    routes: ['restart-service', 'stop-service', 'start-service', 'restart', 'purge'].map((a) => `POST /v2/applications/:appId/${a}`),
    behaviours: [],
  },
  { version: '7.12', added: '`GET /v2/applications/state`, `GET /v2/applications/:appId/state`', routes: ['GET /v2/applications/state', 'GET /v2/applications/:appId/state'], behaviours: [] },
  {
    version: '7.21',
    added: '`GET /v2/version`, local mode endpoints (target-state, device-info, logs)',
    routes: ['GET /v2/version', 'GET /v2/local/target-state', 'POST /v2/local/target-state', 'GET /v2/local/device-info', 'GET /v2/local/logs'],
    behaviours: [],
  },
  { version: '7.22.0', added: 'variables use the `PLATFORM_` style prefix; older supervisors use a legacy prefix', routes: [], behaviours: ['vendorPrefix'] },
  { version: '8.2.2', added: '`serviceName` accepted in place of `imageId` for restart-service, stop-service, start-service', routes: [], behaviours: ['serviceName'] },
  { version: '8.6', added: '`GET /v2/containerId`', routes: ['GET /v2/containerId'], behaviours: [] },
  { version: '9.7', added: '`GET /v2/state/status`', routes: ['GET /v2/state/status'], behaviours: [] },
  { version: '9.11', added: '`GET /v2/device/name`, `GET /v2/device/tags`', routes: ['GET /v2/device/name', 'GET /v2/device/tags'], behaviours: [] },
  { version: '10.0', added: '`GET /v2/cleanup-volumes`; unreferenced volumes are no longer removed automatically in normal updates', routes: ['GET /v2/cleanup-volumes'], behaviours: ['keepsUnreferencedVolumes'] },
  { version: '10.2', added: '`POST /v2/journal-logs`', routes: ['POST /v2/journal-logs'], behaviours: [] },
  { version: '10.3', added: '`format` in journal logs', routes: [], behaviours: ['journalFormat'] },
  { version: '11.4', added: '`GET /v2/device/vpn`', routes: ['GET /v2/device/vpn'], behaviours: [] },
  { version: '12.11.34', added: 'host config PATCH respects update locks (with host OS 2.82.6 or newer)', routes: [], behaviours: ['hostConfigLocks'] },
  { version: '14.7.0', added: '`since` and `until` in journal logs', routes: [], behaviours: ['journalSinceUntil'] },
];

export type Version = readonly [major: number, minor: number, patch: number];

/** A row's version as X.Y.Z ("after 1.1.0" is 1.1.0, "9.7" is 9.7.0). */
export function rowVersion(row: Pick<VersionRow, 'version'>): Version {
  const m = /(\d+)\.(\d+)(?:\.(\d+))?$/.exec(row.version);
  if (!m) throw new Error(`version table row "${row.version}" names no version`);
  return [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
}

export const formatVersion = (v: Version): string => v.join('.');

export function compareVersions(a: Version, b: Version): number {
  return a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
}

/** The oldest version with an API (1.1.0): nothing older can be emulated. */
export const OLDEST_VERSION: Version = rowVersion(VERSION_TABLE[0]!);
/** The newest row: fleetlab implements every row, so this is the version it is in full. */
export const CURRENT_VERSION: Version = VERSION_TABLE.map(rowVersion).reduce((a, b) => (compareVersions(a, b) >= 0 ? a : b));

export const acceptedRange = (): string => `${formatVersion(OLDEST_VERSION)} to ${formatVersion(CURRENT_VERSION)}`;

/**
 * An X.Y.Z version fleetlab can answer as, or a SUP_ERR_BAD_REQUEST naming `where` (the flag,
 * setting or option it came from) and the range accepted.
 */
export function parseSupervisorVersion(raw: string, where: string): Version {
  const m = /^(0|[1-9]\d{0,3})\.(0|[1-9]\d{0,3})\.(0|[1-9]\d{0,3})$/.exec(raw);
  const refuse = (why: string) => new FleetlabError('SUP_ERR_BAD_REQUEST', `${where}: ${JSON.stringify(raw)} ${why}; accepted: a supervisor version from ${acceptedRange()}`);
  if (!m) throw refuse('is not a version X.Y.Z');
  const v: Version = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (compareVersions(v, OLDEST_VERSION) < 0) throw refuse(`is older than ${formatVersion(OLDEST_VERSION)}, the first supervisor with an API`);
  if (compareVersions(v, CURRENT_VERSION) > 0) throw refuse(`is newer than ${formatVersion(CURRENT_VERSION)}, the newest this fleetlab answers as`);
  return v;
}

/** What the device API is at one version: the table's rows up to it. */
export interface SupervisorApi {
  /** The emulated version, or undefined for fleetlab's own (every row). */
  readonly emulated: Version | undefined;
  hasRoute(method: string, path: string): boolean;
  has(behaviour: Behaviour): boolean;
}

/** `undefined`: fleetlab's own API, every row of the table. */
export function apiAt(version: Version | undefined): SupervisorApi {
  const rows = version ? VERSION_TABLE.filter((row) => compareVersions(rowVersion(row), version) <= 0) : VERSION_TABLE;
  const routes = new Set(rows.flatMap((row) => row.routes));
  const behaviours = new Set(rows.flatMap((row) => row.behaviours));
  const known = new Set(VERSION_TABLE.flatMap((row) => row.routes));
  return {
    emulated: version,
    // A route the table does not know (none today; the table test keeps it so) is not versioned.
    // HEAD is fastify's own twin of a GET route.
    hasRoute: (method, path) => {
      const key = `${method === 'HEAD' ? 'GET' : method} ${path}`;
      return routes.has(key) || !known.has(key);
    },
    has: (behaviour) => behaviours.has(behaviour),
  };
}

/** The row that adds a route or behaviour, for messages and the harness's `since`. */
export function rowAdding(what: string | Behaviour): VersionRow | undefined {
  return VERSION_TABLE.find((row) => row.routes.includes(what) || (row.behaviours as readonly string[]).includes(what));
}
