/**
 * Query plan -> one parameterised SQL statement. Identifiers come from the model (the plan
 * holds only model objects); every value becomes a parameter. Expressions are type-checked
 * here so a malformed filter is a 400, never a database error.
 */
import type { Dialect } from '../db/dialect.js';
import type { SqlValue } from '../db/port.js';
import type { FieldType, LinkDef, ResourceDef } from '../model/types.js';
import type { ColumnRef, Guard, ManyRef, RExpr } from './expr.js';
import { badRequest } from './parse.js';
import type { ExpandPlan, SelectPlan } from './plan.js';

export interface Statement {
  sql: string;
  params: SqlValue[];
  /** Each row is one column `r`, the record as a JSON array laid out as an expanded record's. */
  rowArrays?: true;
}

type T = 'num' | 'text' | 'bool' | 'null' | 'json';

const q = (ident: string) => `"${ident}"`;

function classOf(type: FieldType): T {
  switch (type) {
    case 'integer':
    case 'bigint':
    case 'real':
      return 'num';
    case 'boolean':
      return 'bool';
    case 'json':
      return 'json';
    default:
      return 'text';
  }
}

class Block {
  readonly joins = new Map<string, string>();
  readonly joinSql: string[] = [];
  constructor(
    readonly alias: string,
    readonly resource: ResourceDef,
  ) {}
}

/**
 * Most values one call of json_build_array (PostgreSQL: 100 arguments) or json_array
 * (SQLite: 127) takes, with room to spare. An expanded record is its id, fields, links and
 * expands: at most 1 + fields + 2 x links + reverse links, which the model test keeps
 * under this (the widest, device, is 44).
 */
export const ROW_ARRAY_LIMIT = 90;

export class SqlCompiler {
  private readonly params: SqlValue[] = [];
  private aliases = 0;
  private readonly vars = new Map<string, Block>();

  constructor(
    private readonly dialect: Dialect,
    private readonly resolveResource: (name: string) => ResourceDef,
  ) {}

  /**
   * A parameter's SQL. It carries a marker with its index; `done` puts the parameters in
   * the order their markers appear in the final text, so a fragment may be compiled before
   * or after the text around it (a join's ON clause is compiled while the WHERE is).
   */
  private param(v: SqlValue): string {
    this.params.push(v);
    return this.dialect.param(v).replace('?', `\u0001${this.params.length - 1}\u0001`);
  }

  private block(resource: ResourceDef): Block {
    return new Block(`a${this.aliases++}`, resource);
  }

  /** Alias of the record reached from a block through to-one links (joins shared per path). */
  private joined(block: Block, links: LinkDef[], guards: (Guard | null)[] = []): string {
    let alias = block.alias;
    let key = '';
    links.forEach((link, i) => {
      const guard = guards[i] ?? null;
      key += `/${link.name}${guard ? '+' : ''}`;
      let next = block.joins.get(key);
      if (!next) {
        next = `a${this.aliases++}`;
        block.joins.set(key, next);
        const target = this.resolveResource(link.target);
        let on = `${next}.id = ${alias}.${q(link.column)}`;
        // A record the caller may not read is not joined: its fields read as null.
        if (guard) on += ` AND ${next}.id IN ${this.permitted(guard)}`;
        // A required, unguarded link always has its target (NOT NULL + foreign key), so an
        // inner join means the same and leaves the database free to start from either table.
        block.joinSql.push(`${link.required && !guard ? 'JOIN' : 'LEFT JOIN'} ${q(target.table)} ${next} ON ${on}`);
      }
      alias = next;
    });
    return alias;
  }

  /** `(SELECT id FROM target WHERE <permission>)` for a guard. */
  private permitted(guard: Guard): string {
    const block = this.block(guard.resource);
    this.vars.set(guard.v, block);
    const where = this.bool(guard.where);
    return `(SELECT ${block.alias}.id FROM ${q(guard.resource.table)} ${block.alias} ${block.joinSql.join(' ')} WHERE ${where})`;
  }

  private column(ref: ColumnRef): string {
    const block = this.vars.get(ref.scope);
    if (!block) throw badRequest(`Unknown scope ${ref.scope}`);
    return `${this.joined(block, ref.links, ref.guards)}.${q(ref.column)}`;
  }

  /** SQL for the id of the record a ManyRef starts from. */
  private ownerId(many: ManyRef): string {
    const block = this.vars.get(many.scope);
    if (!block) throw badRequest(`Unknown scope ${many.scope}`);
    if (many.links.length === 0) return `${block.alias}.id`;
    const guards = many.guards ?? [];
    // The last link's column is the owner's id, unless the caller may not read that owner.
    if (guards[many.links.length - 1]) return `${this.joined(block, many.links, guards)}.id`;
    const last = many.links[many.links.length - 1]!;
    return `${this.joined(block, many.links.slice(0, -1), guards)}.${q(last.column)}`;
  }

  /**
   * The records of `many` as a subquery selecting `what`, correlated to their owner; with
   * `what` null, the link column of all of them that have one (for `owner IN (...)`).
   */
  private subquery(many: ManyRef, v: string, what: string | null, extra: (alias: string) => string | null): string {
    const owner = this.ownerId(many);
    const block = this.block(many.source);
    this.vars.set(v, block);
    this.vars.set(many.permVar, block);
    const link = `${block.alias}.${q(many.via)}`;
    const conds = [what === null ? `${link} IS NOT NULL` : `${link} = ${owner}`];
    if (many.permission) conds.push(this.bool(many.permission));
    const more = extra(block.alias);
    if (more) conds.push(more);
    const where = conds.join(' AND ');
    return `(SELECT ${what ?? link} FROM ${q(many.source.table)} ${block.alias} ${block.joinSql.join(' ')} WHERE ${where})`;
  }

  bool(e: RExpr): string {
    const { sql, t } = this.expr(e);
    if (t !== 'bool') throw badRequest('A filter must be a condition (true or false)');
    return sql;
  }

  expr(e: RExpr): { sql: string; t: T } {
    switch (e.k) {
      case 'lit': {
        if (e.v === null) return { sql: 'NULL', t: 'null' };
        const t: T = typeof e.v === 'number' ? 'num' : typeof e.v === 'boolean' ? 'bool' : 'text';
        return { sql: this.param(e.v), t };
      }
      case 'col':
        return { sql: this.column(e), t: classOf(e.type) };
      case 'false':
        return { sql: '(1 = 0)', t: 'bool' };
      case 'cmp': {
        const l = this.expr(e.l);
        const r = this.expr(e.r);
        if (l.t === 'json' || r.t === 'json') throw badRequest('JSON fields cannot be compared');
        if (l.t !== r.t && l.t !== 'null' && r.t !== 'null') throw badRequest(`Cannot compare ${l.t} with ${r.t}`);
        if (l.t === 'null' || r.t === 'null') {
          if (e.op !== 'eq' && e.op !== 'ne') throw badRequest('null can only be compared with eq or ne');
          const other = l.t === 'null' ? r.sql : l.sql;
          return { sql: `(${other} IS ${e.op === 'eq' ? '' : 'NOT '}NULL)`, t: 'bool' };
        }
        const op = { eq: '=', ne: 'IS DISTINCT FROM', gt: '>', ge: '>=', lt: '<', le: '<=' }[e.op];
        return { sql: `(${l.sql} ${op} ${r.sql})`, t: 'bool' };
      }
      case 'arith': {
        const l = this.expr(e.l);
        const r = this.expr(e.r);
        if (l.t !== 'num' || r.t !== 'num') throw badRequest(`${e.op} needs numbers`);
        if (e.op === 'mod' && [e.l, e.r].some((x) => x.k === 'lit' && !Number.isInteger(x.v))) throw badRequest('mod needs integers');
        const op = { add: '+', sub: '-', mul: '*', div: '/', mod: '%' }[e.op];
        return { sql: `(${l.sql} ${op} ${r.sql})`, t: 'num' };
      }
      case 'and':
      case 'or':
        return { sql: `(${this.bool(e.l)} ${e.k.toUpperCase()} ${this.bool(e.r)})`, t: 'bool' };
      case 'not':
        return { sql: `(NOT ${this.bool(e.e)})`, t: 'bool' };
      case 'in': {
        const l = this.expr(e.l);
        const items = e.list.map((i) => this.expr(i));
        if (items.some((i) => i.t !== l.t)) throw badRequest('`in` list values must have the type of the field');
        return { sql: `(${l.sql} IN (${items.map((i) => i.sql).join(', ')}))`, t: 'bool' };
      }
      case 'call':
        return this.call(e.fn, e.args);
      case 'lambda': {
        if (e.fn === 'any' && this.dialect.name === 'sqlite' && e.many.links.length === 0) {
          // SQLite runs a correlated EXISTS once per outer row (every device, for devices by
          // tag); from an IN list it looks the matching rows up by id instead: 0.25 ms
          // against 2.3 ms per $count of query d. The outer id is a primary key, never
          // null, and null links are left out of the list, so IN is exactly true or false,
          // as EXISTS is. PostgreSQL plans both as the same semi-join.
          return { sql: `(${this.ownerId(e.many)} IN ${this.subquery(e.many, e.v, null, () => this.bool(e.body))})`, t: 'bool' };
        }
        if (e.fn === 'any') return { sql: `EXISTS ${this.subquery(e.many, e.v, '1', () => this.bool(e.body))}`, t: 'bool' };
        return { sql: `NOT EXISTS ${this.subquery(e.many, e.v, '1', () => `NOT COALESCE(${this.bool(e.body)}, FALSE)`)}`, t: 'bool' };
      }
      case 'count':
        return { sql: this.subquery(e.many, e.v, 'COUNT(*)', () => (e.filter ? this.bool(e.filter) : null)), t: 'num' };
    }
  }

  private call(fn: string, args: RExpr[]): { sql: string; t: T } {
    const a = args.map((x) => this.expr(x));
    const text = (i: number) => {
      if (a[i]!.t !== 'text' && a[i]!.t !== 'null') throw badRequest(`${fn} needs text arguments`);
      return a[i]!.sql;
    };
    switch (fn) {
      case 'contains':
        return { sql: this.dialect.contains(text(0), text(1)), t: 'bool' };
      case 'startswith':
        return { sql: this.dialect.startsWith(text(0), text(1)), t: 'bool' };
      case 'endswith':
        return { sql: this.dialect.endsWith(text(0), text(1)), t: 'bool' };
      case 'tolower':
        return { sql: `lower(${text(0)})`, t: 'text' };
      case 'toupper':
        return { sql: `upper(${text(0)})`, t: 'text' };
      case 'trim':
        return { sql: `trim(${text(0)})`, t: 'text' };
      case 'length':
        return { sql: `length(${text(0)})`, t: 'num' };
      case 'concat':
        return { sql: `(${text(0)} || ${text(1)})`, t: 'text' };
      default:
        throw badRequest(`Unsupported function ${fn}`);
    }
  }

  private limit(top: number | undefined, skip: number | undefined): string {
    if (top === undefined && skip === undefined) return '';
    if (this.dialect.name === 'sqlite') return ` LIMIT ${top === undefined ? '-1' : this.param(top)}${skip ? ` OFFSET ${this.param(skip)}` : ''}`;
    return `${top === undefined ? '' : ` LIMIT ${this.param(top)}`}${skip ? ` OFFSET ${this.param(skip)}` : ''}`;
  }

  private order(plan: SelectPlan, root: Block): string {
    const items = plan.orderBy.map(({ expr, desc }) => {
      const { sql, t } = this.expr(expr);
      if (t === 'json') throw badRequest('Cannot order by a JSON field');
      // OData puts nulls first in ascending order, PostgreSQL last: say so, except where
      // there can be none, since PostgreSQL walks an index in order only without the clause.
      if (expr.k === 'col' && expr.notNull) return `${sql} ${desc ? 'DESC' : 'ASC'}`;
      return `${sql} ${desc ? 'DESC NULLS LAST' : 'ASC NULLS FIRST'}`;
    });
    items.push(`${root.alias}.id ASC`);
    return items.join(', ');
  }

  /**
   * The rows of a plan in one statement, each `$expand` a column of its own (`__x<i>`,
   * see `expandColumn`), however deep the expansion goes.
   */
  select(plan: SelectPlan): Statement {
    const root = this.block(plan.resource);
    this.vars.set('$it', root);
    // On PostgreSQL each record is one JSON array, as an expanded one is: the driver reads and
    // converts each value of a row on its own, so 67 devices of 13 fields with their fleet
    // cost the process 0.45 ms as 1,005 values and 0.25 ms as 67 arrays, and the database no
    // more. Not under a $skip: PostgreSQL would build the arrays of the rows it passes over.
    const arrays = this.dialect.name === 'postgres' && !plan.skip;
    let cols: string[];
    if (arrays) {
      cols = [`${this.recordArray(plan, root)} AS ${q('r')}`];
    } else {
      cols = [`${root.alias}.id AS ${q('id')}`];
      for (const f of plan.fields) if (f.name !== 'id') cols.push(`${root.alias}.${q(f.column)} AS ${q(f.name)}`);
      for (const l of plan.links) cols.push(`${root.alias}.${q(l.column)} AS ${q(l.name)}`);
      plan.expand.forEach((x, i) => cols.push(`${this.expandColumn(x, root)} AS ${q(`__x${i}`)}`));
    }
    const where = plan.where ? ` WHERE ${this.bool(plan.where)}` : '';
    const order = this.order(plan, root);
    const st = this.done(`SELECT ${cols.join(', ')} FROM ${q(plan.resource.table)} ${root.alias} ${root.joinSql.join(' ')}${where} ORDER BY ${order}${this.limit(plan.top, plan.skip)}`);
    return arrays ? { ...st, rowArrays: true } : st;
  }

  /** A record of `block` as a JSON array: id, the other fields, links, expands (execute.ts `expandedRow`). */
  private recordArray(plan: SelectPlan, block: Block): string {
    const parts = [`${block.alias}.id`];
    for (const f of plan.fields) if (f.name !== 'id') parts.push(`${block.alias}.${q(f.column)}`);
    for (const l of plan.links) parts.push(`${block.alias}.${q(l.column)}`);
    for (const y of plan.expand) {
      const sub = this.expandColumn(y, block);
      // SQLite hands a subquery's JSON on as text: json() makes it JSON again.
      parts.push(y.count || this.dialect.name === 'postgres' ? sub : `json(${sub})`);
    }
    return this.jsonArray(parts);
  }

  /**
   * A correlated subquery for one `$expand` of the records of `parent`: the count, or the
   * linked records as JSON, each an array laid out by `expandedRow` (to-one: one array or
   * NULL; to-many: an array of them in the expand's order, after its $top/$skip).
   */
  private expandColumn(x: ExpandPlan, parent: Block): string {
    const block = this.block(x.plan.resource);
    return this.within(block, () => {
      const conds = [x.forward ? `${block.alias}.id = ${parent.alias}.${q(x.forward.column)}` : `${block.alias}.${q(x.reverse!.via)} = ${parent.alias}.id`];
      if (x.plan.where) conds.push(this.bool(x.plan.where));
      const from = () => `FROM ${q(x.plan.resource.table)} ${block.alias} ${block.joinSql.join(' ')} WHERE ${conds.join(' AND ')}`;
      if (x.count) return `(SELECT COUNT(*) ${from()})`;
      const row = this.recordArray(x.plan, block);
      if (x.forward) return `(SELECT ${row} ${from()})`;
      // The order may join further tables: `from()` reads the joins after it.
      const order = this.order(x.plan, block);
      const inner = `SELECT ${row} AS r, ROW_NUMBER() OVER (ORDER BY ${order}) AS o ${from()} ORDER BY ${order}${this.limit(x.plan.top, x.plan.skip)}`;
      return this.dialect.name === 'postgres'
        ? `(SELECT COALESCE(json_agg(c.r ORDER BY c.o), '[]') FROM (${inner}) c)`
        : `(SELECT json_group_array(json(c.r) ORDER BY c.o) FROM (${inner}) c)`;
    });
  }

  /** Compiles `fn` with `$it` (a query's own record) standing for `block`, then puts it back. */
  private within<T>(block: Block, fn: () => T): T {
    const outer = this.vars.get('$it');
    this.vars.set('$it', block);
    try {
      return fn();
    } finally {
      if (outer) this.vars.set('$it', outer);
    }
  }

  /** A JSON array of `parts` (see ROW_ARRAY_LIMIT). */
  private jsonArray(parts: string[]): string {
    if (parts.length > ROW_ARRAY_LIMIT) throw new Error(`an expanded record of ${parts.length} values is wider than ROW_ARRAY_LIMIT (${ROW_ARRAY_LIMIT})`);
    return `${this.dialect.name === 'postgres' ? 'json_build_array' : 'json_array'}(${parts.join(', ')})`;
  }

  /** COUNT(*) of a plan's rows. */
  count(plan: SelectPlan): Statement {
    const root = this.block(plan.resource);
    this.vars.set('$it', root);
    const where = plan.where ? ` WHERE ${this.bool(plan.where)}` : '';
    return this.done(`SELECT COUNT(*) AS ${q('n')} FROM ${q(plan.resource.table)} ${root.alias} ${root.joinSql.join(' ')}${where}`);
  }

  /** `SELECT id` of the rows a where clause picks: the target of UPDATE/DELETE. */
  ids(resource: ResourceDef, where: RExpr | null): Statement {
    const root = this.block(resource);
    this.vars.set('$it', root);
    const cond = where ? ` WHERE ${this.bool(where)}` : '';
    return this.done(`SELECT ${root.alias}.id FROM ${q(resource.table)} ${root.alias} ${root.joinSql.join(' ')}${cond}`);
  }

  private done(sql: string): Statement {
    const params: SqlValue[] = [];
    const text = sql.replace(/\u0001(\d+)\u0001/g, (_m, i: string) => {
      params.push(this.params[Number(i)]!);
      return '?';
    });
    return { sql: text, params };
  }
}
