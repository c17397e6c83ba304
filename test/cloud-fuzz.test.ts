/**
 * The cloud API under property-based fuzzing (fast-check), on SQLite and PostgreSQL. Each
 * run is one to four requests (test/helpers/cloud-fuzz-requests.ts: OData resources with
 * path keys, query options and typed bodies; the device endpoints; the key endpoints; the
 * proxy; noise) against a fresh copy of one world (test/helpers/cloud-fuzz-world.ts), and
 * every answer must hold:
 *  - no status of 500 or more;
 *  - an error (4xx) is in the documented shape (docs/errors.md, "Cloud API responses");
 *  - an error, and any GET, leaves every table exactly as it was;
 *  - no answer to anyone but alice or the admin carries a string planted in alice's private
 *    records, unless the request itself carried it (errors may quote their input).
 *
 * Seeded and bounded: the seed is printed; FLEETLAB_FUZZ_SEED=<n> replays a run,
 * FLEETLAB_FUZZ_RUNS=<n> sets the SQLite runs (PostgreSQL does half as many: its round
 * trips cost more), FLEETLAB_FUZZ_DB=sqlite|postgres runs one of the two.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildModel } from '../src/cloud/model/resources.js';
import { errorShapeProblems } from './helpers/cloud-error-shape.js';
import type { DbKind } from './helpers/cloud-fixture.js';
import { cloudRequests, injectOptions, type FuzzRequest } from './helpers/cloud-fuzz-requests.js';
import { fuzzWorld, type FuzzWorld } from './helpers/cloud-fuzz-world.js';
import { changedTables, snapshot } from './helpers/db-snapshot.js';

const runs = Number(process.env.FLEETLAB_FUZZ_RUNS ?? 1000);
const seed = process.env.FLEETLAB_FUZZ_SEED ? Number(process.env.FLEETLAB_FUZZ_SEED) : Math.floor(Math.random() * 2 ** 31);
const kinds = (['sqlite', 'postgres'] as const).filter((k) => !process.env.FLEETLAB_FUZZ_DB || process.env.FLEETLAB_FUZZ_DB === k);
const runsOn = (kind: DbKind) => (kind === 'sqlite' ? runs : Math.max(1, Math.ceil(runs / 2)));

console.log(`cloud fuzz: seed ${seed}, ${kinds.map((k) => `${runsOn(k)} runs on ${k}`).join(', ')} (replay: FLEETLAB_FUZZ_SEED=${seed}; more: FLEETLAB_FUZZ_RUNS)`);

/** Who may see alice's private records. */
const insiders = new Set(['alice', 'admin', 'aliceDevice', 'aliceProvisioning']);

describe.each(kinds)('cloud fuzz on %s', (kind) => {
  let world: FuzzWorld;
  beforeAll(async () => {
    world = await fuzzWorld(kind);
  }, 120_000);
  afterAll(() => world?.close());

  it('no 5xx; errors in the one shape; a refused request or a GET changes nothing; no leak of alice\'s records', async () => {
    const { fixture } = world;
    const statuses = new Map<number, number>();
    const describeRequest = (r: FuzzRequest) => `${r.who}: ${r.method} ${r.url}${r.body ? ` [${r.body.type}] ${r.body.text.slice(0, 300)}` : ''}`;

    const property = fc.asyncProperty(fc.array(cloudRequests(fixture, buildModel()), { minLength: 1, maxLength: 4 }), async (requests) => {
      const run = await world.run();
      try {
        for (const req of requests) {
          const before = await snapshot(run.db);
          const res = await run.app.inject(injectOptions(req, fixture));
          statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
          const problems: string[] = [];
          if (res.statusCode >= 500) problems.push(`status ${res.statusCode}`);
          if (res.statusCode >= 400) problems.push(...errorShapeProblems({ status: res.statusCode, headers: res.headers, body: res.body }, req.method));
          if (res.statusCode >= 400 || req.method === 'GET') {
            const changed = changedTables(before, await snapshot(run.db));
            if (changed.length) problems.push(`${res.statusCode >= 400 ? 'refused' : 'GET'} but changed ${changed.join(', ')}`);
          }
          if (!insiders.has(req.who)) {
            const sent = `${req.url} ${req.body?.text ?? ''}`;
            const leaked = fixture.secrets.filter((s) => res.body.includes(s) && !sent.includes(s));
            if (leaked.length) problems.push(`answered ${leaked.join(', ')} to ${req.who}`);
          }
          if (problems.length) throw new Error(`${describeRequest(req)}\n  -> ${res.statusCode} ${res.body.slice(0, 300)}\n  ${problems.join('\n  ')}`);
        }
      } finally {
        await run.close();
      }
    });
    await fc.assert(property, { seed, numRuns: runsOn(kind) });

    const total = [...statuses.values()].reduce((a, b) => a + b, 0);
    const byStatus = [...statuses.entries()].sort(([a], [b]) => a - b).map(([s, n]) => `${s}: ${n}`).join(', ');
    console.log(`cloud fuzz on ${kind}: ${runsOn(kind)} runs, ${total} requests (shrinking included), 0 failures; statuses ${byStatus}`);
    // a fuzz that only ever hears 400s tests the parser alone: a good share must get through (about a quarter does)
    const ok = [...statuses.entries()].filter(([s]) => s < 300).reduce((a, [, n]) => a + n, 0);
    expect(ok / total).toBeGreaterThan(0.1);
  }, 30 * 60_000);
});
