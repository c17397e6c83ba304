/**
 * /v1 to /v5 (docs/decisions.md item 19): the same data under older names. A table of resource
 * and field renames per version is applied to the parsed request and the body on the way
 * in, and reversed on the way out; a field the v6 model no longer has reads back as null
 * and is a 400 in a filter, an order or a body. The names are fleetlab's table, modelled
 * on resin/balena's older models (docs/cloud-model.md says what is and is not verified).
 */
import { FleetlabError } from '../../errors.js';
import type { Expr } from '../odata/expr.js';
import type { ExpandItem, ParsedRequest, QueryOptions } from '../odata/parse.js';
import type { SelectPlan } from '../odata/plan.js';
import type { Model, ResourceDef } from './types.js';

export interface VersionTable {
  /** old resource name -> v6 name */
  resources: Record<string, string>;
  /** per v6 resource: old field name -> v6 name, or null when the field is gone */
  fields: Record<string, Record<string, string | null>>;
}

const legacy: VersionTable = {
  resources: { environment_variable: 'application_environment_variable' },
  fields: {
    device: { name: 'device_name', commit: null, logs_channel: null, vpn_address: null },
    application: { commit: null, git_repository: null },
  },
};

export const versionTables: Record<string, VersionTable> = {
  v1: legacy,
  v2: legacy,
  v3: legacy,
  v4: legacy,
  v5: { resources: {}, fields: { device: { logs_channel: null, vpn_address: null }, application: {} } },
  v6: { resources: {}, fields: {} },
};

const bad = (m: string) => new FleetlabError('CLOUD_ERR_BAD_REQUEST', m);

export class VersionTranslator {
  constructor(
    private readonly model: Model,
    private readonly table: VersionTable,
  ) {}

  resourceName(old: string): string {
    return this.table.resources[old] ?? old;
  }

  private field(resource: ResourceDef, old: string): string {
    const base = this.model.get(resource.name)?.table === 'application' ? 'application' : resource.name;
    const map = this.table.fields[base] ?? {};
    if (!(old in map)) return old;
    const v6 = map[old];
    if (v6 === null || v6 === undefined) throw bad(`${resource.name}.${old} no longer exists`);
    return v6;
  }

  private next(resource: ResourceDef, name: string): ResourceDef | undefined {
    const link = resource.links.find((l) => l.name === name);
    if (link) return this.model.get(link.target);
    const rev = resource.reverse.find((l) => l.name === name);
    return rev ? this.model.get(rev.source) : undefined;
  }

  private path(resource: ResourceDef, path: string[]): { path: string[]; end?: ResourceDef } {
    let cur: ResourceDef | undefined = resource;
    const out: string[] = [];
    for (const seg of path) {
      if (!cur) {
        out.push(seg);
        continue;
      }
      const name = this.field(cur, seg);
      out.push(name);
      cur = this.next(cur, name);
    }
    return { path: out, end: cur };
  }

  private expr(e: Expr, resource: ResourceDef, vars: Map<string, ResourceDef>): Expr {
    const start = (scope: string | null) => (scope ? vars.get(scope) : resource) ?? resource;
    switch (e.k) {
      case 'lit':
        return e;
      case 'field':
        return { ...e, path: this.path(start(e.scope), e.path).path };
      case 'cmp':
      case 'arith':
        return { ...e, l: this.expr(e.l, resource, vars), r: this.expr(e.r, resource, vars) } as Expr;
      case 'and':
      case 'or':
        return { ...e, l: this.expr(e.l, resource, vars), r: this.expr(e.r, resource, vars) };
      case 'not':
        return { ...e, e: this.expr(e.e, resource, vars) };
      case 'in':
        return { ...e, l: this.expr(e.l, resource, vars), list: e.list };
      case 'call':
        return { ...e, args: e.args.map((a) => this.expr(a, resource, vars)) };
      case 'lambda': {
        const p = this.path(start(e.scope), e.path);
        const inner = new Map(vars);
        if (p.end) inner.set(e.v, p.end);
        return { ...e, path: p.path, body: this.expr(e.body, resource, inner) };
      }
      case 'count': {
        const p = this.path(start(e.scope), e.path);
        return { ...e, path: p.path, filter: e.filter && p.end ? this.expr(e.filter, p.end, vars) : e.filter };
      }
    }
  }

  private options(resource: ResourceDef, o: QueryOptions): QueryOptions {
    const out: QueryOptions = { ...o };
    if (o.select) {
      // A removed field may be selected: it reads back as null.
      out.select = o.select.flatMap((f) => {
        try {
          return [this.field(resource, f)];
        } catch {
          return [];
        }
      });
      if (out.select.length === 0) out.select = ['id'];
    }
    if (o.filter) out.filter = this.expr(o.filter, resource, new Map());
    if (o.orderby) {
      out.orderby = o.orderby.map((i) => {
        const p = this.path(resource, i.path);
        const filter = i.count?.filter && p.end ? this.expr(i.count.filter, p.end, new Map()) : i.count?.filter;
        return { ...i, path: p.path, ...(i.count ? { count: filter ? { filter } : {} } : {}) };
      });
    }
    if (o.expand) {
      out.expand = o.expand.map((x): ExpandItem => {
        const name = this.field(resource, x.name);
        const target = this.next(resource, name);
        return { ...x, name, options: target ? this.options(target, x.options) : x.options };
      });
    }
    return out;
  }

  request(req: ParsedRequest): ParsedRequest {
    const resourceName = this.resourceName(req.resource);
    const resource = this.model.get(resourceName);
    if (!resource) return { ...req, resource: resourceName };
    let key = req.key;
    if (key !== undefined && key !== null && typeof key === 'object') {
      key = Object.fromEntries(Object.entries(key).map(([k, v]) => [this.field(resource, k), v]));
    }
    return { ...req, resource: resourceName, key, options: this.options(resource, req.options) };
  }

  body(resourceName: string, body: unknown): unknown {
    const resource = this.model.get(resourceName);
    if (!resource || body === null || typeof body !== 'object' || Array.isArray(body)) return body;
    return Object.fromEntries(Object.entries(body).map(([k, v]) => [this.field(resource, k), v]));
  }

  /** v6 record -> old names, with removed fields as null (only when no $select narrowed it). */
  record(resourceName: string, rec: Record<string, unknown>, selected?: string[]): Record<string, unknown> {
    const base = this.model.get(resourceName)?.table === 'application' ? 'application' : resourceName;
    const map = this.table.fields[base] ?? {};
    const out = { ...rec };
    for (const [old, v6] of Object.entries(map)) {
      if (v6 === null) {
        if (!selected || selected.includes(old)) out[old] = null;
      } else if (v6 in out) {
        out[old] = out[v6];
        delete out[v6];
      }
    }
    return out;
  }

  /** Like record, for a result of `plan`, down through its expanded links. */
  recordDeep(plan: SelectPlan, rec: Record<string, unknown>, selected?: string[]): Record<string, unknown> {
    const out = this.record(plan.resource.name, rec, selected ?? (plan.fields.length === plan.resource.fields.filter((f) => !f.hidden).length ? undefined : []));
    for (const x of plan.expand) {
      const v = out[x.name];
      if (Array.isArray(v)) out[x.name] = v.map((r) => this.recordDeep(x.plan, r as Record<string, unknown>));
    }
    return out;
  }
}
