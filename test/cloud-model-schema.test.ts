/**
 * The model's `notNull` flags (src/cloud/model/resources.ts) against the columns the
 * migrations create, read from PostgreSQL's catalogue. The SQL compiler leaves out
 * `NULLS FIRST` for a NOT NULL column so the database can walk an index in order; a flag on
 * a nullable column would order its nulls wrongly, and a missing flag costs that index.
 */
import { afterAll, expect, it } from 'vitest';
import { prepareDatabase } from '../src/cloud/bootstrap.js';
import { buildModel } from '../src/cloud/model/resources.js';
import { databases } from './helpers/cloud-fixture.js';

const dbs = databases();
afterAll(() => dbs.closeAll());

it('every field is flagged notNull exactly when its column is NOT NULL', async () => {
  const db = await dbs.open('postgres', { pool: 1 });
  await prepareDatabase(db);
  const rows = await db.query<{ table_name: string; column_name: string }>(
    `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public' AND is_nullable = 'NO'`,
    [],
  );
  const notNullColumns = new Set(rows.map((r) => `${r.table_name}.${r.column_name}`));
  const mismatches: string[] = [];
  for (const resource of buildModel().resources.values()) {
    for (const field of resource.fields) {
      const column = `${resource.table}.${field.column}`;
      if (Boolean(field.notNull) !== notNullColumns.has(column)) mismatches.push(`${resource.name}.${field.name} (${column}): flagged ${Boolean(field.notNull)}, column NOT NULL ${notNullColumns.has(column)}`);
    }
  }
  expect(mismatches).toEqual([]);
});
