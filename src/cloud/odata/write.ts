/**
 * POST, PATCH, PUT and DELETE on OData resources, in one transaction each. Bodies are
 * checked against the model (unknown field, wrong type, read-only field: 400). A link is
 * given as an id or as `{"__id": N}` (balena-sdk sends plain ids); the linked record must
 * be one the caller can read. After an insert the new record must satisfy the caller's
 * write permission, else the transaction rolls back with CLOUD_ERR_FORBIDDEN.
 */
import { FleetlabError } from '../../errors.js';
import type { Db, SqlValue } from '../db/port.js';
import type { FieldDef, LinkDef, Model, ResourceDef } from '../model/types.js';
import type { InsertHooks } from '../model/hooks.js';
import { QueryRunner, type Record_ } from './execute.js';
import type { RExpr } from './expr.js';
import { badRequest } from './parse.js';
import { type Access, planById } from './plan.js';

export type Values = Map<string, SqlValue>;

const q = (ident: string) => `"${ident}"`;

/** Body -> column values, checked against the model. */
export function validateBody(resource: ResourceDef, body: unknown, mode: 'create' | 'update'): Values {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw badRequest('The body must be a JSON object');
  const values: Values = new Map();
  for (const [name, raw] of Object.entries(body as Record<string, unknown>)) {
    const field = resource.fields.find((f) => f.name === name && !f.hidden);
    const link = resource.links.find((l) => l.name === name);
    if (!field && !link) throw badRequest(`Unknown field ${resource.name}.${name}`);
    if ((field?.readOnly || link?.readOnly) && !(name === 'id' && raw === undefined)) throw badRequest(`${name} cannot be written`);
    const column = (field ?? link)!.column;
    if (values.has(column)) throw badRequest(`${name} is given twice (it is an alias)`);
    values.set(column, field ? fieldValue(field, raw) : linkValue(link!, raw));
  }
  if (mode === 'create') {
    const missing = resource.fields.filter((f) => f.required && !values.has(f.column));
    if (missing.length) throw badRequest(`${resource.name}: ${missing.map((f) => `${f.name} (${f.type})`).join(', ')} ${missing.length > 1 ? 'are' : 'is'} required`);
  }
  return values;
}

/**
 * Missing links, each with where to find a value: a first fleet needs an organization id,
 * and the caller may not know yet that one was made for them.
 */
function missingLinks(resource: ResourceDef, links: LinkDef[]): FleetlabError {
  const article = (noun: string) => (/^[aeiou]/.test(noun) ? 'an' : 'a');
  const each = links.map((l) => `${l.name} (the id of ${article(l.target)} ${l.target}; GET /v6/${l.target} lists those you can use)`);
  return badRequest(`${resource.name}: ${each.join(', ')} ${links.length > 1 ? 'are' : 'is'} required`);
}

function fieldValue(f: FieldDef, v: unknown): SqlValue {
  if (v === null) {
    if (f.required) throw badRequest(`${f.name} cannot be null`);
    return null;
  }
  const wrong = () => badRequest(`${f.name} must be ${f.type}`);
  switch (f.type) {
    case 'integer':
    case 'bigint':
      if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw wrong();
      return v;
    case 'real':
      if (typeof v !== 'number' || !Number.isFinite(v)) throw wrong();
      return v;
    case 'boolean':
      if (typeof v !== 'boolean') throw wrong();
      return v;
    case 'text':
      if (typeof v !== 'string') throw wrong();
      return v;
    case 'datetime': {
      if (typeof v !== 'string' && typeof v !== 'number') throw wrong();
      const d = new Date(v);
      if (Number.isNaN(d.getTime())) throw wrong();
      return d.toISOString();
    }
    case 'json':
      return JSON.stringify(v);
  }
}

function linkValue(l: LinkDef, v: unknown): SqlValue {
  if (v === null) {
    if (l.required) throw badRequest(`${l.name} cannot be null`);
    return null;
  }
  const id = typeof v === 'object' && v !== null && '__id' in v ? (v as { __id: unknown }).__id : v;
  if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 1) throw badRequest(`${l.name} must be a record id or {"__id": id}`);
  return id;
}

export interface WriteContext {
  db: Db;
  model: Model;
  access: Access;
  hooks: InsertHooks;
}

/** Every link value must name a record the caller can read (a 400 otherwise, not a leak). */
async function checkLinks(ctx: WriteContext, tx: Db, resource: ResourceDef, values: Values): Promise<void> {
  for (const link of resource.links) {
    const id = values.get(link.column);
    if (typeof id !== 'number') continue;
    const plan = planById({ model: ctx.model, access: ctx.access }, link.target, id, 'read');
    if ((await new QueryRunner(tx, ctx.model).ids(plan)).length === 0) throw badRequest(`${link.name}: no ${link.target} with id ${id}`);
  }
}

export async function insertRecord(ctx: WriteContext, resourceName: string, body: unknown): Promise<Record_> {
  const resource = ctx.model.get(resourceName)!;
  if (resource.readOnlyResource) throw new FleetlabError('CLOUD_ERR_FORBIDDEN', `${resource.name} records cannot be created through the API`);
  const values = validateBody(resource, body, 'create');
  return ctx.db.transaction(async (tx) => {
    await checkLinks(ctx, tx, resource, values);
    await ctx.hooks.beforeInsert(tx, resource, values);
    const missing = resource.links.filter((l) => l.required && (values.get(l.column) ?? null) === null);
    if (missing.length) throw missingLinks(resource, missing);
    const cols = [...values.keys()];
    const sql = `INSERT INTO ${q(resource.table)} (${cols.map(q).join(', ')}) VALUES (${cols.map(() => '?').join(', ')}) RETURNING id`;
    const rows = await tx.query<{ id: number }>(sql, [...values.values()]);
    const id = Number(rows[0]!.id);
    // The new record read back under the caller's write permission: every field, or none
    // when the caller may not have made it.
    const [record] = await new QueryRunner(tx, ctx.model).select(planById({ model: ctx.model, access: ctx.access }, resourceName, id, 'write'));
    if (!record) throw new FleetlabError('CLOUD_ERR_FORBIDDEN', `Not allowed to create this ${resource.name}`);
    return record;
  });
}

/** PATCH, and PUT (which also requires the fields a create requires; omitted fields keep their values). */
export async function updateRecords(
  ctx: WriteContext,
  resource: ResourceDef,
  where: RExpr | null,
  body: unknown,
  replace: boolean,
): Promise<number> {
  const values = validateBody(resource, body, replace ? 'create' : 'update');
  if (values.size === 0) return 0;
  return ctx.db.transaction(async (tx) => {
    await checkLinks(ctx, tx, resource, values);
    ctx.hooks.beforeUpdate(resource, values);
    const ids = await new QueryRunner(tx, ctx.model).ids({ resource, where });
    if (ids.length === 0) return 0;
    const sets = [...values.keys()].map((c) => `${q(c)} = ?`).join(', ');
    for (let i = 0; i < ids.length; i += 500) {
      const chunk = ids.slice(i, i + 500);
      await tx.query(`UPDATE ${q(resource.table)} SET ${sets} WHERE id IN (${chunk.map(() => '?').join(', ')})`, [...values.values(), ...chunk]);
    }
    return ids.length;
  });
}

export async function deleteRecords(ctx: WriteContext, resource: ResourceDef, where: RExpr | null): Promise<number> {
  return ctx.db.transaction(async (tx) => {
    const ids = await new QueryRunner(tx, ctx.model).ids({ resource, where });
    for (let i = 0; i < ids.length; i += 500) {
      const chunk = ids.slice(i, i + 500);
      await tx.query(`DELETE FROM ${q(resource.table)} WHERE id IN (${chunk.map(() => '?').join(', ')})`, chunk);
    }
    return ids.length;
  });
}

