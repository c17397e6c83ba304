/**
 * Parsed OData request -> query plan, checked against the model and with the caller's
 * permission ANDed in at every level (root, lambdas, counts, expands). Pure: no database.
 */
import type { SqlValue } from '../db/port.js';
import type { FieldDef, LinkDef, Model, ResourceDef, ReverseLinkDef } from '../model/types.js';
import { and, type Expr, type Guard, type ManyRef, type RExpr } from './expr.js';
import { badRequest, type ExpandItem, type OrderItem, type ParsedRequest, type QueryOptions } from './parse.js';

export type Rule = Expr | 'all' | 'none';

/** What a caller may see and change, as filters on each resource (by request name). */
export interface Access {
  read(resource: string): Rule;
  write(resource: string): Rule;
  /**
   * The link column through which a resource's read rule is exactly its owner's read rule
   * (a device's tags are readable iff the device is). Reached from a readable owner through
   * that link, such records need no check of their own; that saves a join per row.
   */
  inheritsRead?(resource: string): string | undefined;
}

export interface SelectPlan {
  resource: ResourceDef;
  fields: FieldDef[];
  links: LinkDef[];
  where: RExpr | null;
  orderBy: { expr: RExpr; desc: boolean }[];
  top?: number;
  skip?: number;
  expand: ExpandPlan[];
}

export interface ExpandPlan {
  name: string;
  /** forward: this record's link column holds the target id; reverse: target rows point here. */
  forward?: LinkDef;
  reverse?: ReverseLinkDef;
  count: boolean;
  plan: SelectPlan;
}

export interface Planner {
  model: Model;
  access: Access;
}

const ROOT = '$it';

/** The resource a request name addresses, or a 400 naming it. */
export function resourceOf(model: Model, name: string): ResourceDef {
  const def = model.get(name);
  if (!def) throw badRequest(`Unknown resource: ${name}`);
  return def;
}

/** Filter for a key: `(1)` is the id; named keys must be one of the resource's unique sets. */
export function keyFilter(resource: ResourceDef, key: SqlValue | Record<string, SqlValue>): Expr {
  if (key === null || typeof key !== 'object') {
    if (typeof key !== 'number' || !Number.isInteger(key)) throw badRequest('A key without a name must be an integer id');
    return { k: 'cmp', op: 'eq', l: { k: 'field', scope: null, path: ['id'] }, r: { k: 'lit', v: key } };
  }
  const names = Object.keys(key).sort();
  const ok = [['id'], ...resource.uniques].some((u) => u.length === names.length && [...u].sort().every((n, i) => n === names[i]));
  if (!ok) throw badRequest(`(${names.join(',')}) is not a unique key of ${resource.name}`);
  return names
    .map((n): Expr => ({ k: 'cmp', op: 'eq', l: { k: 'field', scope: null, path: [n] }, r: { k: 'lit', v: key[n]! } }))
    .reduce((a, b) => ({ k: 'and', l: a, r: b }));
}

export function planSelect(p: Planner, req: ParsedRequest): SelectPlan {
  const resource = resourceOf(p.model, req.resource);
  const extra = req.key === undefined ? null : keyFilter(resource, req.key);
  return selectPlan(p, resource, req.options, extra);
}

/** The where clause selecting the records a PATCH/DELETE may touch. */
export function planTarget(p: Planner, req: ParsedRequest): { resource: ResourceDef; where: RExpr | null } {
  const resource = resourceOf(p.model, req.resource);
  const o = req.options;
  if (o.select || o.expand || o.orderby || o.top !== undefined || o.skip !== undefined) {
    throw badRequest('Only $filter applies to PATCH, PUT and DELETE');
  }
  const filter = and(o.filter ?? null, req.key === undefined ? null : keyFilter(resource, req.key));
  const r = new Resolver(p);
  const where = and(filter ? r.expr(filter, env(resource)) : null, r.permission(resource, 'write'));
  return { resource, where };
}

/** A plan that finds one record by id under the given permission mode (checks after writes). */
export function planById(p: Planner, resourceName: string, id: number, mode: 'read' | 'write'): SelectPlan {
  const resource = resourceOf(p.model, resourceName);
  const r = new Resolver(p);
  const where = and(r.expr(keyFilter(resource, id), env(resource)), r.permission(resource, mode));
  return { ...emptyPlan(resource), where };
}

function emptyPlan(resource: ResourceDef): SelectPlan {
  return { resource, fields: visibleFields(resource), links: resource.links, where: null, orderBy: [], expand: [] };
}

export const visibleFields = (r: ResourceDef) => r.fields.filter((f) => !f.hidden);

function selectPlan(p: Planner, resource: ResourceDef, o: QueryOptions, extra: Expr | null, inherited = false): SelectPlan {
  const r = new Resolver(p);
  const e = env(resource);
  let fields = visibleFields(resource);
  let links = resource.links;
  if (o.select) {
    const expanded = new Set((o.expand ?? []).map((x) => x.name));
    for (const name of o.select) {
      // Naming an expanded link in $select as well is allowed (it is returned expanded anyway).
      if (!fields.some((f) => f.name === name) && !links.some((l) => l.name === name) && !expanded.has(name)) throw badRequest(`Unknown field ${resource.name}.${name}`);
    }
    fields = fields.filter((f) => o.select!.includes(f.name));
    links = links.filter((l) => o.select!.includes(l.name));
  }
  const filter = and(o.filter ?? null, extra);
  const where = and(filter ? r.expr(filter, e) : null, inherited ? null : r.permission(resource, 'read'));
  const orderBy = (o.orderby ?? []).map((item: OrderItem) => {
    const expr = item.count
      ? r.expr({ k: 'count', scope: null, path: item.path, ...(item.count.filter ? { filter: item.count.filter } : {}) }, e)
      : r.expr({ k: 'field', scope: null, path: item.path }, e);
    return { expr, desc: item.desc };
  });
  const expand = (o.expand ?? []).map((x) => expandPlan(p, resource, x));
  return { resource, fields, links, where, orderBy, top: o.top, skip: o.skip, expand };
}

function expandPlan(p: Planner, resource: ResourceDef, x: ExpandItem): ExpandPlan {
  const forward = resource.links.find((l) => l.name === x.name);
  const reverse = resource.reverse.find((l) => l.name === x.name);
  if (!forward && !reverse) throw badRequest(`Unknown link ${resource.name}.${x.name}`);
  const target = resourceOf(p.model, forward ? forward.target : reverse!.source);
  if (x.count && (x.options.select || x.options.expand || x.options.orderby)) throw badRequest('$count in $expand takes only $filter');
  if (forward && (x.options.top !== undefined || x.options.skip !== undefined || x.options.orderby)) {
    throw badRequest(`${x.name} links to one record; $top, $skip and $orderby do not apply`);
  }
  // The parent rows are readable; children that inherit their rule through this link are too.
  const inherited = reverse !== undefined && p.access.inheritsRead?.(target.name) === reverse.via;
  return { name: x.name, forward, reverse, count: x.count, plan: selectPlan(p, target, x.options, null, inherited) };
}

interface Env {
  vars: Map<string, ResourceDef>;
  root: string;
}

const env = (resource: ResourceDef): Env => ({ vars: new Map([[ROOT, resource]]), root: ROOT });

class Resolver {
  private fresh = 0;
  /** >0 while resolving a permission rule: its own link walks need no guard. */
  private trusted = 0;
  constructor(private readonly p: Planner) {}

  permission(resource: ResourceDef, mode: 'read' | 'write', e: Env = env(resource)): RExpr | null {
    const rule = mode === 'read' ? this.p.access.read(resource.name) : this.p.access.write(resource.name);
    if (rule === 'all') return null;
    if (rule === 'none') return { k: 'false' };
    this.trusted++;
    try {
      return this.expr(rule, e);
    } finally {
      this.trusted--;
    }
  }

  /** The read permission on a link's target, for a walk a request asked for. */
  private guard(target: ResourceDef): Guard | null {
    if (this.trusted > 0) return null;
    const v = `$g${this.fresh++}`;
    const where = this.permission(target, 'read', { vars: new Map([[v, target]]), root: v });
    return where ? { v, resource: target, where } : null;
  }

  expr(x: Expr, e: Env): RExpr {
    switch (x.k) {
      case 'lit':
        return x;
      case 'field':
        return this.column(x.scope, x.path, e);
      case 'cmp':
      case 'arith':
        return { k: x.k, op: x.op, l: this.expr(x.l, e), r: this.expr(x.r, e) } as RExpr;
      case 'and':
      case 'or':
        return { k: x.k, l: this.expr(x.l, e), r: this.expr(x.r, e) };
      case 'not':
        return { k: 'not', e: this.expr(x.e, e) };
      case 'in':
        return { k: 'in', l: this.expr(x.l, e), list: x.list.map((i) => this.expr(i, e)) };
      case 'call':
        return this.call(x.fn, x.args.map((a) => this.expr(a, e)));
      case 'lambda': {
        const one = this.toOneLambda(x, e);
        if (one) return this.expr(one, e);
        const many = this.many(x.scope, x.path, e);
        if (e.vars.has(x.v)) throw badRequest(`Lambda variable ${x.v} is already in use`);
        const inner: Env = { vars: new Map(e.vars).set(x.v, many.source), root: e.root };
        return { k: 'lambda', fn: x.fn, many, v: x.v, body: this.expr(x.body, inner) };
      }
      case 'count': {
        const many = this.many(x.scope, x.path, e);
        // Inside a count's filter, bare names are the counted records' fields.
        const v = `$c${this.fresh++}`;
        const inner: Env = { vars: new Map(e.vars).set(v, many.source), root: v };
        return { k: 'count', many, v, filter: x.filter ? this.expr(x.filter, inner) : null };
      }
    }
  }

  private call(fn: string, args: RExpr[]): RExpr {
    const arity: Record<string, number> = { contains: 2, startswith: 2, endswith: 2, substringof: 2, tolower: 1, toupper: 1, length: 1, trim: 1, concat: 2, indexof: 2 };
    const n = arity[fn];
    if (n === undefined) throw badRequest(`Unsupported function ${fn}`);
    if (args.length !== n) throw badRequest(`${fn} takes ${n} argument(s)`);
    // substringof(needle, haystack) is contains(haystack, needle) with the arguments swapped.
    if (fn === 'substringof') return { k: 'call', fn: 'contains', args: [args[1]!, args[0]!] };
    return { k: 'call', fn, args };
  }

  /**
   * A lambda over a to-one link (`belongs_to__application/any(a: a/slug eq 'x')`, as
   * balena-sdk writes link filters) ranges over zero or one record: `any` is "linked (and
   * readable) and the body holds for it", `all` is "not linked or the body holds". The
   * variable becomes the link path itself, so the body walks the link like any other path.
   */
  private toOneLambda(x: Extract<Expr, { k: 'lambda' }>, e: Env): Expr | null {
    const { at, rest } = this.walk(x.scope, x.path, e);
    if (rest.length !== 1 || !at.links.some((l) => l.name === rest[0])) return null;
    if (e.vars.has(x.v)) throw badRequest(`Lambda variable ${x.v} is already in use`);
    const scope = x.scope ?? e.root;
    const body = substituteScope(x.body, x.v, scope, x.path);
    const linked: Expr = { k: 'cmp', op: x.fn === 'any' ? 'ne' : 'eq', l: { k: 'field', scope, path: [...x.path, 'id'] }, r: { k: 'lit', v: null } };
    return { k: x.fn === 'any' ? 'and' : 'or', l: linked, r: body };
  }

  /** Walks a path of to-one links from a scope; returns the resource reached and the links. */
  private walk(scope: string | null, path: string[], e: Env): { start: string; links: LinkDef[]; guards: (Guard | null)[]; at: ResourceDef; rest: string[] } {
    const start = scope ?? e.root;
    let at = e.vars.get(start);
    if (!at) throw badRequest(`Unknown lambda variable ${String(scope)}`);
    const links: LinkDef[] = [];
    const guards: (Guard | null)[] = [];
    let i = 0;
    for (; i < path.length - 1; i++) {
      const link = at.links.find((l) => l.name === path[i]);
      if (!link) break;
      links.push(link);
      at = resourceOf(this.p.model, link.target);
      guards.push(this.guard(at));
    }
    return { start, links, guards, at, rest: path.slice(i) };
  }

  private column(scope: string | null, path: string[], e: Env): RExpr {
    const { start, links, guards, at, rest } = this.walk(scope, path, e);
    if (rest.length !== 1) {
      const reverse = at.reverse.some((r) => r.name === rest[0]);
      throw badRequest(reverse ? `${rest[0]} links to many records: use ${rest[0]}/any(x: ...) or ${rest[0]}/$count` : `Unknown field ${at.name}.${rest[0]}`);
    }
    const name = rest[0]!;
    const field = at.fields.find((f) => f.name === name && !f.hidden);
    if (field) {
      // `link/id` is the link column itself: no join needed.
      // (Unless the record it names is one the caller may not read: then it must read as null.)
      if (field.name === 'id' && links.length > 0 && guards[guards.length - 1] === null) {
        const last = links[links.length - 1]!;
        return { k: 'col', scope: start, links: links.slice(0, -1), guards: guards.slice(0, -1), column: last.column, type: 'integer' };
      }
      return { k: 'col', scope: start, links, guards, column: field.column, type: field.type, ...(field.notNull && links.length === 0 ? { notNull: true } : {}) };
    }
    const link = at.links.find((l) => l.name === name);
    if (link) return { k: 'col', scope: start, links, guards, column: link.column, type: 'integer' };
    if (at.reverse.some((r) => r.name === name)) throw badRequest(`${name} links to many records: use ${name}/any(x: ...) or ${name}/$count`);
    throw badRequest(`Unknown field ${at.name}.${name}`);
  }

  private many(scope: string | null, path: string[], e: Env): ManyRef {
    const { start, links, guards, at, rest } = this.walk(scope, path, e);
    const reverse = rest.length === 1 ? at.reverse.find((r) => r.name === rest[0]) : undefined;
    if (!reverse) throw badRequest(`${path.join('/')} is not a link to many records`);
    const source = resourceOf(this.p.model, reverse.source);
    const v = `$p${this.fresh++}`;
    // The owner is readable (a permitted root, lambda row or guarded link), so rows that
    // inherit its rule through `via` need no check of their own.
    // (Outside permission rules every link walk is guarded, so the owner is always readable.)
    const inherits = this.trusted === 0 && this.p.access.inheritsRead?.(source.name) === reverse.via;
    const permission = inherits ? null : this.permission(source, 'read', { vars: new Map([[v, source]]), root: v });
    return { scope: start, links, guards, source, via: reverse.via, permission, permVar: v };
  }
}

/** `x` with every path that starts at lambda variable `v` re-rooted at `scope`/`prefix`. */
function substituteScope(x: Expr, v: string, scope: string, prefix: string[]): Expr {
  const sub = (y: Expr) => substituteScope(y, v, scope, prefix);
  switch (x.k) {
    case 'lit':
      return x;
    case 'field':
      return x.scope === v ? { ...x, scope, path: [...prefix, ...x.path] } : x;
    case 'cmp':
    case 'arith':
      return { ...x, l: sub(x.l), r: sub(x.r) } as Expr;
    case 'and':
    case 'or':
      return { k: x.k, l: sub(x.l), r: sub(x.r) };
    case 'not':
      return { k: 'not', e: sub(x.e) };
    case 'in':
      return { k: 'in', l: sub(x.l), list: x.list.map(sub) };
    case 'call':
      return { ...x, args: x.args.map(sub) };
    case 'lambda':
      return { ...(x.scope === v ? { ...x, scope, path: [...prefix, ...x.path] } : x), body: sub(x.body) };
    case 'count':
      return { ...(x.scope === v ? { ...x, scope, path: [...prefix, ...x.path] } : x), ...(x.filter ? { filter: sub(x.filter) } : {}) };
  }
}
