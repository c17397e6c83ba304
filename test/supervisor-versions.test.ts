/**
 * The version table of src/supervisor/versions.ts against the specification's own
 * ("Endpoint availability by supervisor version", kept word for word in docs/device-api.md):
 * the same rows, each row's routes and behaviours named by its words, and every route the
 * device API registers in exactly one row. And the versions a device accepts.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isFleetlabError } from '../src/errors.js';
import { loadConfig } from '../src/supervisor/config.js';
import { apiAt, compareVersions, CURRENT_VERSION, formatVersion, rowVersion, parseSupervisorVersion, VERSION_TABLE, type Behaviour } from '../src/supervisor/versions.js';
import { startSimEngine, type SimEngineHandle } from '../sim/engine/index.js';
import { startSupervisorFixture, type SupervisorFixture } from './helpers/supervisor-fixture.js';

const deviceApiDoc = readFileSync(new URL('../docs/device-api.md', import.meta.url), 'utf8');

/** The rows of the first markdown table under a `| Supervisor version | Added |` head. */
function specRows(markdown: string): Array<{ version: string; added: string }> {
  const lines = markdown.split('\n');
  const head = lines.findIndex((l) => /^\|\s*Supervisor version\s*\|\s*Added\s*\|$/.test(l.trim()));
  if (head < 0) throw new Error('no "| Supervisor version | Added |" table in docs/device-api.md');
  const rows: Array<{ version: string; added: string }> = [];
  for (const line of lines.slice(head + 2)) {
    if (!line.startsWith('|')) break;
    const cells = line.slice(1, line.lastIndexOf('|')).split('|').map((c) => c.trim());
    rows.push({ version: cells[0]!, added: cells[1]! });
  }
  return rows;
}

/** The spec's words for each behaviour: each must be in its row's cell. */
const BEHAVIOUR_WORDS: Record<Behaviour, readonly string[]> = {
  vendorPrefix: ['`PLATFORM_`', 'legacy prefix'],
  serviceName: ['`serviceName`', '`imageId`', 'restart-service, stop-service, start-service'],
  keepsUnreferencedVolumes: ['unreferenced volumes are no longer removed automatically in normal updates'],
  journalFormat: ['`format`', 'journal logs'],
  hostConfigLocks: ['host config PATCH respects update locks'],
  journalSinceUntil: ['`since`', '`until`', 'journal logs'],
};

/** How a row's cell may name a route: `METHOD /path`, its last segment, or a `PATCH` and `GET /path` pair. */
function named(cell: string, route: string): boolean {
  const [method, path] = route.split(' ') as [string, string];
  const last = path.split('/').at(-1)!;
  return cell.includes(`\`${route}\``) || (cell.includes(`\`${method}\``) && cell.includes(path)) || new RegExp(`(^|[\\s\`(,])${last}([\\s\`),]|$)`).test(cell);
}

describe('the version table', () => {
  it('has the rows of the specification, in its order and words', () => {
    expect(VERSION_TABLE.map(({ version, added }) => ({ version, added }))).toEqual(specRows(deviceApiDoc));
  });

  it("names in each row's words every route and behaviour it adds, and every backticked name of the row is one of them", () => {
    for (const row of VERSION_TABLE) {
      for (const route of row.routes) if (row.version !== 'after 1.1.0') expect(named(row.added, route), `${row.version}: ${route}`).toBe(true);
      for (const b of row.behaviours) for (const word of BEHAVIOUR_WORDS[b]) expect(row.added, `${row.version}: ${b}`).toContain(word);
      const covered = (token: string) =>
        row.routes.some((r) => r === token || r.endsWith(`/${token}`) || r.startsWith(`${token} `) || r.split(' ')[1]!.startsWith(token) || `${r.split(' ')[0]} ${r.split(' ')[1]}` === token) ||
        row.behaviours.some((b) => BEHAVIOUR_WORDS[b].includes(`\`${token}\``));
      for (const [, token] of row.added.matchAll(/`([^`]+)`/g)) expect(covered(token!), `${row.version}: \`${token}\``).toBe(true);
    }
  });

  it('adds each route once, and versions rise down the table', () => {
    const routes = VERSION_TABLE.flatMap((r) => r.routes);
    expect(new Set(routes).size).toBe(routes.length);
    const versions = VERSION_TABLE.map(rowVersion);
    expect(versions.map(formatVersion)).toEqual([...versions].sort(compareVersions).map(formatVersion));
    expect(new Set(versions.map(formatVersion)).size).toBe(versions.length);
    expect(formatVersion(CURRENT_VERSION)).toBe('14.7.0');
  });
});

describe('the routes the device API registers', () => {
  let dir: string;
  let engine: SimEngineHandle;
  let f: SupervisorFixture;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-versions-'));
    engine = await startSimEngine({ socketPath: join(dir, 'engine.sock'), dataDir: join(dir, 'engine') });
    f = await startSupervisorFixture({ dockerSocket: engine.socketPath, dir: join(dir, 'device') });
  });
  afterAll(async () => {
    await f?.close();
    await engine?.close();
    await rm(dir, { recursive: true, force: true });
  });

  /** `METHOD /path` of every route, from fastify's own route tree (HEAD is its twin of GET). */
  function registered(): string[] {
    const stack: Array<{ depth: number; path: string }> = [];
    const out: string[] = [];
    for (const line of f.sup.api.printRoutes({ commonPrefix: false }).split('\n')) {
      const m = /^((?:│ {3}| {4})*)[├└]── (\S+) \(([^)]+)\)$/.exec(line);
      if (!m) continue;
      const depth = m[1]!.length / 4;
      while (stack.length > depth) stack.pop();
      const path = `${stack.at(-1)?.path ?? ''}${m[2]}`;
      stack.push({ depth, path });
      for (const method of m[3]!.split(', ')) if (method !== 'HEAD') out.push(`${method} ${path}`);
    }
    return out.sort();
  }

  it('are the routes of the table, each in one row', () => {
    expect(registered()).toEqual(VERSION_TABLE.flatMap((r) => r.routes).sort());
  });
});

describe('the versions a device accepts', () => {
  it('takes X.Y.Z from 1.1.0 to the current version', () => {
    expect(formatVersion(parseSupervisorVersion('1.1.0', 'x'))).toBe('1.1.0');
    expect(formatVersion(parseSupervisorVersion('9.7.0', 'x'))).toBe('9.7.0');
    expect(formatVersion(parseSupervisorVersion('14.7.0', 'x'))).toBe('14.7.0');
  });

  it('refuses anything else with the range accepted, as a bad request of the one error family', () => {
    for (const [raw, why] of [['9.7', 'is not a version X.Y.Z'], ['v9.7.0', 'is not a version X.Y.Z'], ['09.7.0', 'is not a version X.Y.Z'], ['1.0.9', 'is older than 1.1.0'], ['0.2.0', 'is older than 1.1.0'], ['14.7.1', 'is newer than 14.7.0'], ['15.0.0', 'is newer than 14.7.0']] as const) {
      let thrown: unknown;
      try {
        parseSupervisorVersion(raw, '--supervisor-version');
      } catch (err) {
        thrown = err;
      }
      expect(isFleetlabError(thrown) && thrown.code, raw).toBe('SUP_ERR_BAD_REQUEST');
      expect((thrown as Error).message).toBe(`--supervisor-version: "${raw}" ${why}${why.startsWith('is older') ? ', the first supervisor with an API' : why.startsWith('is newer') ? ', the newest this fleetlab answers as' : ''}; accepted: a supervisor version from 1.1.0 to 14.7.0`);
    }
  });

  it('is checked where the supervisor reads its settings, naming the flag and variable', () => {
    expect(() => loadConfig({ env: { FLEETLAB_SUPERVISOR_VERSION: '20.0.0' } })).toThrow('supervisorVersion (--supervisor-version, FLEETLAB_SUPERVISOR_VERSION): "20.0.0" is newer than 14.7.0');
    expect(loadConfig({ flags: { supervisorVersion: '9.7.0' } }).supervisorVersion).toBe('9.7.0');
    expect(() => loadConfig({ flags: { legacyVendor: 'Resin_' } })).toThrow('legacyVendor must be a lowercase word');
  });
});

describe('apiAt', () => {
  it('has the rows up to the version, and every row without one', () => {
    const v9 = apiAt(parseSupervisorVersion('9.7.0', 'x'));
    expect(v9.hasRoute('GET', '/v2/state/status')).toBe(true);
    expect(v9.hasRoute('HEAD', '/v2/state/status')).toBe(true);
    expect(v9.hasRoute('GET', '/v2/device/name')).toBe(false);
    expect(v9.hasRoute('POST', '/v2/journal-logs')).toBe(false);
    expect(v9.has('serviceName')).toBe(true);
    expect(v9.has('keepsUnreferencedVolumes')).toBe(false);
    const own = apiAt(undefined);
    expect(own.emulated).toBeUndefined();
    expect(VERSION_TABLE.flatMap((r) => r.routes).every((r) => own.hasRoute(r.split(' ')[0]!, r.split(' ')[1]!))).toBe(true);
    expect((['vendorPrefix', 'serviceName', 'keepsUnreferencedVolumes', 'journalFormat', 'hostConfigLocks', 'journalSinceUntil'] as const).every((b) => own.has(b))).toBe(true);
    // 12.11.33 is before the row of 12.11.34: patch numbers count.
    expect(apiAt(parseSupervisorVersion('12.11.33', 'x')).has('hostConfigLocks')).toBe(false);
    expect(apiAt(parseSupervisorVersion('12.11.34', 'x')).has('hostConfigLocks')).toBe(true);
  });
});
