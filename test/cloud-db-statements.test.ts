/**
 * Prepared statements on PostgreSQL (src/cloud/db/statement-names.ts): which texts get a
 * name, that the table of names stays bounded, and that a real server holds the plan.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { StatementNames } from '../src/cloud/db/statement-names.js';
import { databases } from './helpers/cloud-fixture.js';

describe('statement names', () => {
  it('names a text the second time it is seen, the same name ever after', () => {
    const names = new StatementNames();
    expect(names.nameOf('SELECT 1')).toBeUndefined();
    const name = names.nameOf('SELECT 1');
    expect(name).toMatch(/^fleetlab_\d+$/);
    expect(names.nameOf('SELECT 1')).toBe(name);
    names.nameOf('SELECT 2');
    expect(names.nameOf('SELECT 2')).not.toBe(name);
  });

  it('names no more than maxNames texts, and forgets one-off texts past maxSeen', () => {
    const names = new StatementNames({ maxNames: 2, maxSeen: 3 });
    for (const sql of ['a', 'a', 'b', 'b']) names.nameOf(sql);
    expect(names.nameOf('c')).toBeUndefined();
    expect(names.nameOf('c')).toBeUndefined();
    expect([names.nameOf('a'), names.nameOf('b')]).toEqual(['fleetlab_0', 'fleetlab_1']);

    const forgetful = new StatementNames({ maxNames: 10, maxSeen: 3 });
    for (const sql of ['x', 'p', 'q', 'r']) forgetful.nameOf(sql); // the fourth clears the three
    expect(forgetful.nameOf('x')).toBeUndefined();
    expect(forgetful.nameOf('x')).toBe('fleetlab_0');
  });
});

describe('prepared statements on PostgreSQL', () => {
  const dbs = databases();
  afterAll(() => dbs.closeAll());

  it('a repeated statement is prepared on the connection; a one-off is not', async () => {
    const db = await dbs.open('postgres', { pool: 1 });
    for (let i = 0; i < 3; i++) expect(await db.query<{ n: number }>('SELECT CAST(? AS integer) + 1 AS n', [i])).toEqual([{ n: i + 1 }]);
    await db.query('SELECT CAST(? AS text) AS once', ['x']);
    const held = await db.query<{ name: string; statement: string }>('SELECT name, statement FROM pg_prepared_statements ORDER BY name', []);
    expect(held).toEqual([{ name: 'fleetlab_0', statement: 'SELECT CAST($1 AS integer) + 1 AS n' }]);
  });
});
