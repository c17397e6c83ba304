/**
 * Runs query plans on a Db: one statement per request, its `$expand`s included as JSON
 * built by the database (sql.ts), and shapes rows into the envelope of docs/decisions.md
 * item 16: links as `{"__id": N}`, expanded links as arrays, `$count` as a number.
 */
import type { Db, Row } from '../db/port.js';
import type { FieldDef, Model } from '../model/types.js';
import type { ExpandPlan, SelectPlan } from './plan.js';
import { SqlCompiler } from './sql.js';

export type Record_ = Record<string, unknown>;

export class QueryRunner {
  constructor(
    private readonly db: Db,
    private readonly model: Model,
  ) {}

  private compiler(): SqlCompiler {
    return new SqlCompiler(this.db.dialect, (name) => {
      const r = this.model.get(name);
      if (!r) throw new Error(`model names unknown resource ${name}`);
      return r;
    });
  }

  async count(plan: SelectPlan): Promise<number> {
    const st = this.compiler().count(plan);
    const rows = await this.db.query<{ n: number | string }>(st.sql, st.params);
    return Number(rows[0]?.n ?? 0);
  }

  async select(plan: SelectPlan): Promise<Record_[]> {
    const st = this.compiler().select(plan);
    const rows = await this.db.query(st.sql, st.params);
    if (st.rowArrays) return rows.map((row) => expandedRow(plan, row.r as unknown[]));
    return rows.map((row) => {
      const out = shape(plan, row);
      plan.expand.forEach((x, i) => (out[x.name] = expanded(x, row[`__x${i}`])));
      return out;
    });
  }

  async ids(plan: { resource: SelectPlan['resource']; where: SelectPlan['where'] }): Promise<number[]> {
    const st = this.compiler().ids(plan.resource, plan.where);
    return (await this.db.query<{ id: number }>(st.sql, st.params)).map((r) => Number(r.id));
  }
}

/** An `$expand` column as the API returns it: a count, or the linked records in an array. */
function expanded(x: ExpandPlan, value: unknown): unknown {
  if (x.count) return Number(value ?? 0);
  // PostgreSQL's driver parses json columns; SQLite returns them as text.
  const json = typeof value === 'string' ? (JSON.parse(value) as unknown) : value;
  if (json === null || json === undefined) return [];
  const rows = x.forward ? [json as unknown[]] : (json as unknown[][]);
  return rows.map((r) => expandedRow(x.plan, r));
}

/** One linked record from the array sql.ts builds: id, the other fields, links, expands. */
function expandedRow(plan: SelectPlan, values: unknown[]): Record_ {
  let i = 1;
  const out: Record_ = {};
  for (const f of plan.fields) out[f.name] = f.name === 'id' ? Number(values[0]) : fromDb(f, values[i++]);
  for (const l of plan.links) out[l.name] = linkOf(values[i++]);
  for (const x of plan.expand) out[x.name] = expanded(x, values[i++]);
  return out;
}

/** A database row as the API returns it. */
function shape(plan: SelectPlan, row: Row): Record_ {
  const out: Record_ = {};
  for (const f of plan.fields) out[f.name] = fromDb(f, row[f.name]);
  for (const l of plan.links) out[l.name] = linkOf(row[l.name]);
  return out;
}

/** A link column's value as the API shows it. */
const linkOf = (v: unknown): { __id: number } | null => (v === null || v === undefined ? null : { __id: Number(v) });

export function fromDb(f: Pick<FieldDef, 'type'>, v: unknown): unknown {
  if (v === null || v === undefined) return null;
  switch (f.type) {
    case 'boolean':
      return v === true || v === 1 || v === '1' || v === 't';
    case 'integer':
    case 'bigint':
    case 'real':
      return Number(v);
    case 'json':
      try {
        return JSON.parse(String(v));
      } catch {
        return null;
      }
    default:
      return String(v);
  }
}

