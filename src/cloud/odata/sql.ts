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
import type { SelectPlan } from './plan.js';

export interface Statement {
  sql: string;
  params: SqlValue[];
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

/** Which rows of a select: all matching, or the ones linked to a set of parent ids. */
export type Scope =
  | { kind: 'root' }
  | { kind: 'ids'; ids: number[] }
  | { kind: 'parents'; via: string; ids: number[] };

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

  private subquery(many: ManyRef, v: string, what: string, extra: (alias: string) => string | null): string {
    const owner = this.ownerId(many);
    const block = this.block(many.source);
    this.vars.set(v, block);
    this.vars.set(many.permVar, block);
    const conds = [`${block.alias}.${q(many.via)} = ${owner}`];
    if (many.permission) conds.push(this.bool(many.permission));
    const more = extra(block.alias);
    if (more) conds.push(more);
    const where = conds.join(' AND ');
    return `(SELECT ${what} FROM ${q(many.source.table)} ${block.alias} ${block.joinSql.join(' ')} WHERE ${where})`;
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

  /** The rows of a plan; `scope` narrows them to ids or to children of parent ids. */
  select(plan: SelectPlan, scope: Scope = { kind: 'root' }, extraColumns: string[] = []): Statement {
    const root = this.block(plan.resource);
    this.vars.set('$it', root);
    const cols = [`${root.alias}.id AS ${q('id')}`];
    for (const f of plan.fields) if (f.name !== 'id') cols.push(`${root.alias}.${q(f.column)} AS ${q(f.name)}`);
    for (const l of plan.links) cols.push(`${root.alias}.${q(l.column)} AS ${q(l.name)}`);
    for (const c of extraColumns) cols.push(`${root.alias}.${q(c)} AS ${q(`__col_${c}`)}`);
    const conds = this.scopeConditions(root, scope);
    if (plan.where) conds.push(this.bool(plan.where));
    const where = conds.length ? ` WHERE ${conds.join(' AND ')}` : '';
    const order = this.order(plan, root);
    if (scope.kind === 'parents' && (plan.top !== undefined || plan.skip)) {
      // $top/$skip inside $expand apply per parent record, hence the window.
      const rn = `ROW_NUMBER() OVER (PARTITION BY ${root.alias}.${q(scope.via)} ORDER BY ${order}) AS ${q('__rn')}`;
      const inner = `SELECT ${cols.join(', ')}, ${root.alias}.${q(scope.via)} AS ${q('__parent')}, ${rn} FROM ${q(plan.resource.table)} ${root.alias} ${root.joinSql.join(' ')}${where}`;
      const lo = this.param(plan.skip ?? 0);
      const hi = plan.top === undefined ? '' : ` AND x.${q('__rn')} <= ${this.param((plan.skip ?? 0) + plan.top)}`;
      return this.done(`SELECT * FROM (${inner}) x WHERE x.${q('__rn')} > ${lo}${hi} ORDER BY x.${q('__parent')}, x.${q('__rn')}`);
    }
    const parent = scope.kind === 'parents' ? `, ${root.alias}.${q(scope.via)} AS ${q('__parent')}` : '';
    const limit = scope.kind === 'root' ? this.limit(plan.top, plan.skip) : '';
    return this.done(`SELECT ${cols.join(', ')}${parent} FROM ${q(plan.resource.table)} ${root.alias} ${root.joinSql.join(' ')}${where} ORDER BY ${order}${limit}`);
  }

  /** COUNT(*) of a plan's rows, or per parent id for `$expand=link/$count`. */
  count(plan: SelectPlan, scope: Scope = { kind: 'root' }): Statement {
    const root = this.block(plan.resource);
    this.vars.set('$it', root);
    const conds = this.scopeConditions(root, scope);
    if (plan.where) conds.push(this.bool(plan.where));
    const where = conds.length ? ` WHERE ${conds.join(' AND ')}` : '';
    const from = `FROM ${q(plan.resource.table)} ${root.alias} ${root.joinSql.join(' ')}${where}`;
    if (scope.kind === 'parents') {
      return this.done(`SELECT ${root.alias}.${q(scope.via)} AS ${q('__parent')}, COUNT(*) AS ${q('n')} ${from} GROUP BY ${root.alias}.${q(scope.via)}`);
    }
    return this.done(`SELECT COUNT(*) AS ${q('n')} ${from}`);
  }

  /** `SELECT id` of the rows a where clause picks: the target of UPDATE/DELETE. */
  ids(resource: ResourceDef, where: RExpr | null): Statement {
    const root = this.block(resource);
    this.vars.set('$it', root);
    const cond = where ? ` WHERE ${this.bool(where)}` : '';
    return this.done(`SELECT ${root.alias}.id FROM ${q(resource.table)} ${root.alias} ${root.joinSql.join(' ')}${cond}`);
  }

  private scopeConditions(root: Block, scope: Scope): string[] {
    if (scope.kind === 'root') return [];
    const column = scope.kind === 'ids' ? 'id' : scope.via;
    if (scope.ids.length === 0) return ['(1 = 0)'];
    return [`${root.alias}.${q(column)} IN (${scope.ids.map((id) => this.param(id)).join(', ')})`];
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
