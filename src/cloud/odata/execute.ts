/**
 * Runs query plans on a Db: one statement for the records, then one per expanded link
 * per level (never one per record), and shapes rows into the envelope of DECISIONS.md
 * item 16: links as `{"__id": N}`, expanded links as arrays, `$count` as a number.
 */
import type { Db, Row } from '../db/port.js';
import type { FieldDef, Model } from '../model/types.js';
import type { ExpandPlan, SelectPlan } from './plan.js';
import { type Scope, SqlCompiler } from './sql.js';

export type Record_ = Record<string, unknown>;

/** Parent ids per statement: keeps parameter lists well under both databases' limits. */
const CHUNK = 500;

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
    return this.rows(plan, { kind: 'root' });
  }

  async ids(plan: { resource: SelectPlan['resource']; where: SelectPlan['where'] }): Promise<number[]> {
    const st = this.compiler().ids(plan.resource, plan.where);
    return (await this.db.query<{ id: number }>(st.sql, st.params)).map((r) => Number(r.id));
  }

  private async rows(plan: SelectPlan, scope: Scope): Promise<Record_[]> {
    const needed = plan.expand.filter((x) => x.forward && !plan.links.includes(x.forward)).map((x) => x.forward!.column);
    const st = this.compiler().select(plan, scope, [...new Set(needed)]);
    const raw = await this.db.query(st.sql, st.params);
    const out = raw.map((r) => shape(plan, r));
    for (const x of plan.expand) await this.expand(x, raw, out);
    const dropId = !plan.fields.some((f) => f.name === 'id');
    for (const r of out) {
      for (const c of needed) delete r[`__col_${c}`];
      if (dropId) delete r.id;
    }
    return out;
  }

  private async expand(x: ExpandPlan, raw: Row[], out: Record_[]): Promise<void> {
    if (x.forward) {
      const link = x.forward;
      const fkOf = (r: Row) => (r[link.name] ?? r[`__col_${link.column}`]) as number | null;
      const ids = [...new Set(raw.map(fkOf).filter((v): v is number => v !== null && v !== undefined).map(Number))];
      const found = new Map<number, Record_>();
      for (let i = 0; i < ids.length; i += CHUNK) {
        const st = await this.rows({ ...x.plan, fields: withId(x.plan) }, { kind: 'ids', ids: ids.slice(i, i + CHUNK) });
        for (const rec of st) found.set(Number(rec.id), rec);
      }
      if (!x.plan.fields.some((f) => f.name === 'id')) for (const rec of found.values()) delete rec.id;
      raw.forEach((r, i) => {
        const fk = fkOf(r);
        const rec = fk === null || fk === undefined ? undefined : found.get(Number(fk));
        out[i]![x.name] = x.count ? (rec ? 1 : 0) : rec ? [rec] : [];
      });
      return;
    }
    const via = x.reverse!.via;
    const ids = raw.map((r) => Number(r.id));
    if (x.count) {
      const counts = new Map<number, number>();
      for (let i = 0; i < ids.length; i += CHUNK) {
        const st = this.compiler().count(x.plan, { kind: 'parents', via, ids: ids.slice(i, i + CHUNK) });
        for (const r of await this.db.query<{ __parent: number; n: number }>(st.sql, st.params)) counts.set(Number(r.__parent), Number(r.n));
      }
      out.forEach((r) => (r[x.name] = counts.get(Number(r.id)) ?? 0));
      return;
    }
    const children = new Map<number, Record_[]>();
    for (let i = 0; i < ids.length; i += CHUNK) {
      for (const rec of await this.rows(x.plan, { kind: 'parents', via, ids: ids.slice(i, i + CHUNK) })) {
        const parent = Number(rec.__parent);
        delete rec.__parent;
        delete rec.__rn;
        const list = children.get(parent) ?? [];
        list.push(rec);
        children.set(parent, list);
      }
    }
    out.forEach((r) => (r[x.name] = children.get(Number(r.id)) ?? []));
  }
}

const withId = (plan: SelectPlan) => (plan.fields.some((f) => f.name === 'id') ? plan.fields : [{ name: 'id', column: 'id', type: 'integer' as const }, ...plan.fields]);

/** A database row as the API returns it. */
function shape(plan: SelectPlan, row: Row): Record_ {
  const out: Record_ = {};
  for (const f of plan.fields) out[f.name] = fromDb(f, row[f.name]);
  if (!plan.fields.some((f) => f.name === 'id')) out.id = Number(row.id);
  for (const l of plan.links) out[l.name] = row[l.name] === null || row[l.name] === undefined ? null : { __id: Number(row[l.name]) };
  for (const k of Object.keys(row)) if (k.startsWith('__')) out[k] = row[k];
  return out;
}

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

