/**
 * OData URL -> request -> query plan -> SQL text, without a database: the grammar of the
 * reference (@balena/odata-parser) and our planning of every supported option.
 */
import { describe, expect, it } from 'vitest';
import { sqliteDialect, postgresDialect } from '../src/cloud/db/dialect.js';
import { buildModel } from '../src/cloud/model/resources.js';
import { accessOf } from '../src/cloud/auth/permissions.js';
import type { RExpr } from '../src/cloud/odata/expr.js';
import { liftLiterals, ODataUrlParser, parseODataUrl, withExplicitSortOrder } from '../src/cloud/odata/parse.js';
import { type Access, planSelect, planTarget } from '../src/cloud/odata/plan.js';
import { ROW_ARRAY_LIMIT, SqlCompiler } from '../src/cloud/odata/sql.js';
import { queryMix } from '../support/cloud-bench-data.js';

const model = buildModel();
const all: Access = { read: () => 'all', write: () => 'all' };
const plan = (url: string, access: Access = all) => planSelect({ model, access }, parseODataUrl(url));
const sql = (url: string, access: Access = all, dialect = sqliteDialect) =>
  new SqlCompiler(dialect, (n) => model.get(n)!).select(plan(url, access));

describe('parse: resource path and keys', () => {
  it('numeric key, named key, composite key', () => {
    expect(parseODataUrl('/device(1)')).toMatchObject({ resource: 'device', key: 1, count: false });
    expect(parseODataUrl("/device(uuid='ab')")).toMatchObject({ key: { uuid: 'ab' } });
    expect(parseODataUrl("/device_tag(device=1,tag_key='k')")).toMatchObject({ key: { device: 1, tag_key: 'k' } });
  });

  it('quotes in a key are one literal, never SQL', () => {
    const req = parseODataUrl("/device(uuid='a''); DROP TABLE device;--')");
    expect(req.key).toEqual({ uuid: "a'); DROP TABLE device;--" });
    const st = sql("/device(uuid='a''); DROP TABLE device;--')");
    expect(st.sql).not.toContain('DROP');
    expect(st.params).toContain("a'); DROP TABLE device;--");
  });

  it('$count path', () => {
    expect(parseODataUrl('/device/$count').count).toBe(true);
  });

  it('malformed URLs are CLOUD_ERR_BAD_REQUEST', () => {
    for (const url of ['/device(', '/device?$filter=id eq', '/device?$filter=id eq 1;DROP TABLE x', '/device?$top=-1', '/device?$frobnicate=1']) {
      expect(() => parseODataUrl(url), url).toThrow(expect.objectContaining({ code: 'CLOUD_ERR_BAD_REQUEST' }));
    }
  });
});

describe('parse: query options', () => {
  it('$select, $top, $skip', () => {
    expect(parseODataUrl('/device?$select=id,uuid&$top=5&$skip=2').options).toEqual({ select: ['id', 'uuid'], top: 5, skip: 2 });
  });

  it('query values encoded with encodeURIComponent parse as their plain twins', () => {
    const filter = "device/uuid eq 'a/b(c),d:$e' and startswith(tag_key,'x')";
    const encoded = parseODataUrl(`/device_tag?$filter=${encodeURIComponent(filter)}&$select=${encodeURIComponent('id,tag_key')}`);
    const plain = parseODataUrl(`/device_tag?$filter=${filter.replace(/ /g, '%20')}&$select=id,tag_key`);
    expect(encoded).toEqual(plain);
    expect(JSON.stringify(encoded.options.filter)).toContain('a/b(c),d:$e');
  });

  it('$orderby without a direction is ascending (docs/decisions.md item 18), at every depth', () => {
    expect(parseODataUrl('/device?$orderby=device_name,id desc').options.orderby).toEqual([
      { path: ['device_name'], desc: false },
      { path: ['id'], desc: true },
    ]);
    const nested = parseODataUrl('/application?$expand=owns__device($orderby=device_name;$top=1)&$orderby=app_name');
    expect(nested.options.orderby).toEqual([{ path: ['app_name'], desc: false }]);
    expect(nested.options.expand![0]!.options.orderby).toEqual([{ path: ['device_name'], desc: false }]);
    expect(parseODataUrl('/device?$orderby=belongs_to__application/app_name%20desc').options.orderby).toEqual([
      { path: ['belongs_to__application', 'app_name'], desc: true },
    ]);
    // A comma inside a string literal is not an item separator.
    expect(withExplicitSortOrder("/d?$filter=a eq 'x,y'&$orderby=a")).toBe("/d?$filter=a eq 'x,y'&$orderby=a%20asc");
  });

  it('$filter: comparisons, logic, in, functions, arithmetic, null', () => {
    const f = parseODataUrl("/device?$filter=(id gt 3 or not(is_online eq true)) and id in (1,2) and tolower(device_name) eq 'x' and id add 1 mod 2 eq 0 and uuid ne null").options.filter;
    expect(JSON.stringify(f)).toContain('"k":"in"');
    expect(JSON.stringify(f)).toContain('"fn":"tolower"');
    expect(JSON.stringify(f)).toContain('"op":"mod"');
    expect(JSON.stringify(f)).toContain('{"k":"lit","v":null}');
  });

  it('$filter: lambdas and counts through links', () => {
    const any = parseODataUrl("/device?$filter=device_tag/any(t:t/tag_key eq 'a')").options.filter;
    expect(any).toEqual({ k: 'lambda', scope: null, path: ['device_tag'], fn: 'any', v: 't', body: { k: 'cmp', op: 'eq', l: { k: 'field', scope: 't', path: ['tag_key'] }, r: { k: 'lit', v: 'a' } } });
    const count = parseODataUrl('/application?$filter=owns__device/$count gt 1').options.filter;
    expect(count).toEqual({ k: 'cmp', op: 'gt', l: { k: 'count', scope: null, path: ['owns__device'], filter: undefined }, r: { k: 'lit', v: 1 } });
  });

  it('$expand with nested options and /$count', () => {
    const o = parseODataUrl("/application?$expand=owns__device($select=id;$filter=contains(device_name,'a');$expand=device_tag($top=1);$orderby=id desc;$top=2;$skip=1),owns__device/$count($filter=is_online eq true)").options;
    expect(o.expand).toHaveLength(2);
    expect(o.expand![0]).toMatchObject({ name: 'owns__device', count: false, options: { select: ['id'], top: 2, skip: 1, orderby: [{ path: ['id'], desc: true }] } });
    expect(o.expand![0]!.options.expand![0]).toMatchObject({ name: 'device_tag', options: { top: 1 } });
    expect(o.expand![1]).toMatchObject({ name: 'owns__device', count: true });
  });

  it('datetime literals become ISO strings', () => {
    const f = parseODataUrl("/device?$filter=created_at gt datetime'2020-01-01T00:00:00Z'").options.filter;
    expect(f).toMatchObject({ r: { k: 'lit', v: '2020-01-01T00:00:00.000Z' } });
  });
});

describe('plan: checked against the model', () => {
  it('unknown resource, field, link are 400s', () => {
    for (const url of ['/nope', "/device?$filter=device_name eq 'x", '/device?$select=nope', '/device?$filter=nope eq 1', '/device?$expand=nope', '/device?$orderby=nope', '/device?$filter=belongs_to__application/nope eq 1', "/device(name='x')"]) {
      expect(() => plan(url), url).toThrow(expect.objectContaining({ code: 'CLOUD_ERR_BAD_REQUEST' }));
    }
  });

  it('$select may name an expanded link; an expanded to-one link selected is still expanded', () => {
    const p = plan('/application?$select=app_name,owns__device&$expand=owns__device');
    expect(p.fields.map((f) => f.name)).toEqual(['app_name']);
    expect(p.expand.map((x) => x.name)).toEqual(['owns__device']);
    expect(() => plan('/application?$select=app_name,owns__device')).toThrow(/Unknown field/);
  });

  it('hidden fields are unknown', () => {
    expect(() => plan("/api_key?$filter=key_hash eq 'x'")).toThrow(/Unknown field/);
    expect(() => plan('/api_key?$select=key_hash')).toThrow(/Unknown field/);
    expect(plan('/api_key').fields.map((f) => f.name)).not.toContain('key_hash');
  });

  it('a to-many link without a lambda is a 400 that says how', () => {
    expect(() => plan("/device?$filter=device_tag/tag_key eq 'a'")).toThrow(/any\(/);
  });

  it('link/id needs no join; link/field does', () => {
    const direct = plan('/device?$filter=belongs_to__application/id eq 1').where as RExpr & { k: 'cmp' };
    expect(direct.l).toMatchObject({ k: 'col', links: [], column: 'belongs_to__application' });
    const joined = plan("/device?$filter=belongs_to__application/app_name eq 'x'").where as RExpr & { k: 'cmp' };
    expect(joined.l).toMatchObject({ k: 'col', column: 'app_name' });
    expect((joined.l as { links: { name: string }[] }).links.map((l) => l.name)).toEqual(['belongs_to__application']);
  });

  it('a key must be the id or a unique set', () => {
    expect(plan("/device_tag(device=1,tag_key='k')").where).not.toBeNull();
    expect(() => plan("/device_tag(tag_key='k')")).toThrow(/not a unique key/);
  });

  it('type errors are 400s before any SQL runs', () => {
    for (const url of ["/device?$filter=id eq 'x'", '/device?$filter=device_name gt 1', "/device?$filter=id add 'a' eq 1", '/device?$filter=device_name', "/device?$filter=contains(id,'1')"]) {
      expect(() => sql(url), url).toThrow(expect.objectContaining({ code: 'CLOUD_ERR_BAD_REQUEST' }));
    }
  });

  it('the permission filter is ANDed into the root, lambdas, counts and expands', () => {
    const access = accessOf({ kind: 'user', userId: 7, actor: 9, isAdmin: false });
    const p = plan("/application?$filter=owns__device/any(d:d/is_online eq true)&$expand=owns__device($expand=device_tag),owns__device/$count", access);
    const text = JSON.stringify(p);
    // root: organization membership of user 7, or public
    expect(p.where).toMatchObject({ k: 'and', r: { k: 'or' } });
    // expanded devices carry their own membership rule (a public fleet's devices are not public);
    // their tags inherit the device's rule, checked once on the device
    expect(JSON.stringify(p.expand[0]!.plan.where)).toContain('"v":7');
    expect(p.expand[0]!.plan.expand[0]!.plan.where).toBeNull();
    expect(JSON.stringify(p.expand[1]!.plan.where)).toContain('"v":7');
    // the lambda's device rows are restricted too
    expect(text.match(/"permission":\{/g)?.length).toBeGreaterThan(1);
  });

  it('a walk through a link the request asked for is guarded by the target\'s read permission; permission rules are not', () => {
    const access = accessOf({ kind: 'device', deviceId: 3, uuid: 'd'.repeat(32), actor: 4, applicationId: 5 });
    const p = plan("/application?$filter=organization/handle eq 'alice'", access);
    const cmp = (p.where as RExpr & { k: 'and' }).l as RExpr & { k: 'cmp' };
    const col = cmp.l as { guards?: ({ where: RExpr } | null)[] };
    // a device key may not read organizations at all
    expect(col.guards).toEqual([expect.objectContaining({ where: { k: 'false' } })]);
    const own = plan('/device', accessOf({ kind: 'user', userId: 7, actor: 9, isAdmin: false }));
    expect(JSON.stringify(own.where)).not.toContain('"guards":[{');
    // an unguarded link/id needs no join; a guarded one must join to apply the guard
    const st = new SqlCompiler(sqliteDialect, (n) => model.get(n)!).select(plan('/release?$filter=is_created_by__user/id eq 1', access));
    expect(st.sql).toMatch(/LEFT JOIN "user" a\d+ ON a\d+\.id = a0\."is_created_by__user" AND a\d+\.id IN \(SELECT/);
  });

  it('declared rule inheritance is exact: the child rule is the owner rule one link further', () => {
    const principals = [
      { kind: 'user' as const, userId: 7, actor: 9, isAdmin: false },
      { kind: 'device' as const, deviceId: 3, uuid: 'd'.repeat(32), actor: 4, applicationId: 5 },
    ];
    let checked = 0;
    for (const p of principals) {
      const access = accessOf(p);
      for (const r of model.resources.keys()) {
        const via = access.inheritsRead?.(r);
        if (!via) continue;
        const link = model.get(r)!.links.find((l) => l.column === via)!;
        const child = access.read(r);
        const owner = access.read(link.target);
        // the child's rule, with its first path step removed, must be the owner's rule
        const strip = (e: unknown): unknown =>
          JSON.parse(JSON.stringify(e), (k, v) => (k === 'path' && Array.isArray(v) && v[0] === link.name && v.length > 1 ? v.slice(1) : v));
        if (p.kind === 'user') expect(strip(child), r).toEqual(owner);
        else expect(child, r).toEqual({ ...(owner as object), l: { k: 'field', scope: null, path: [link.name] } });
        checked++;
      }
    }
    expect(checked).toBe(9);
    // a fleet is also readable when public, so nothing inherits from application
    expect(accessOf(principals[0]!).inheritsRead?.('device')).toBeUndefined();
  });

  it('rows reached from a readable owner through the inherited link carry no second check', () => {
    const access = accessOf({ kind: 'user', userId: 7, actor: 9, isAdmin: false });
    const p = plan("/device?$filter=device_tag/any(t:t/tag_key eq 'a')&$expand=device_tag,should_be_running__release", access);
    const lambda = (p.where as RExpr & { k: 'and' }).l as RExpr & { k: 'lambda' };
    expect(lambda.many.permission).toBeNull();
    expect(p.expand[0]!.plan.where).toBeNull();
    expect(p.expand[1]!.plan.where).not.toBeNull();
    // from releases (a different owner), devices are checked
    const r = plan('/release?$expand=should_be_running_on__device', access);
    expect(r.expand[0]!.plan.where).not.toBeNull();
  });

  it('PATCH/DELETE targets carry the write permission; a device key writes only its device', () => {
    const access = accessOf({ kind: 'device', deviceId: 3, uuid: 'd'.repeat(32), actor: 4, applicationId: 5 });
    const t = planTarget({ model, access }, parseODataUrl('/device?$filter=is_online eq true'));
    expect(JSON.stringify(t.where)).toContain('{"k":"lit","v":3}');
    const none = planTarget({ model, access }, parseODataUrl('/application(5)'));
    expect(JSON.stringify(none.where)).toContain('"k":"false"');
  });

  it('$top/$skip/$orderby on a to-one expand are 400s', () => {
    expect(() => plan('/device?$expand=belongs_to__application($top=1)')).toThrow(/links to one record/);
  });
});

describe('SQL: values are parameters, identifiers come from the model', () => {
  it('every literal is a parameter', () => {
    const st = sql("/device?$filter=device_name eq 'x'';--' and id in (1,2) and startswith(uuid,'ab')&$top=3&$skip=1");
    expect(st.sql).not.toMatch(/'x|;--|ab'/);
    expect(st.params).toEqual(["x';--", 1, 2, 'ab', 3, 1]);
    // one placeholder per parameter, so they bind in text order
    expect(st.sql.match(/\?/g)).toHaveLength(st.params.length);
    const ends = sql("/device?$filter=endswith(uuid,'ab') and startswith(uuid,'c')", all, postgresDialect);
    expect(ends.sql.match(/\?/g)).toHaveLength(ends.params.length);
  });

  it('ascending sorts put nulls first, descending last, on both databases', () => {
    expect(sql('/device?$orderby=os_version').sql).toMatch(/"os_version" ASC NULLS FIRST, a0\.id ASC/);
    expect(sql('/device?$orderby=os_version desc', all, postgresDialect).sql).toMatch(/"os_version" DESC NULLS LAST/);
  });

  it('PostgreSQL gets $n placeholders with casts where types are not inferable', () => {
    const st = sql("/device?$filter=contains(device_name,'a') and is_online eq true and id gt 1", all, postgresDialect);
    expect(st.sql).toContain('strpos(');
    expect(st.sql).toContain('?::text');
    expect(st.sql).toContain('?::boolean');
    expect(postgresDialect.placeholders(st.sql)).toMatch(/\$1::text.*\$2::boolean.*\$3::bigint/);
  });

  it('any/all become EXISTS / NOT EXISTS subqueries (an IN list on SQLite); counts a scalar subquery', () => {
    const anyTag = "/device?$filter=device_tag/any(t:t/tag_key eq 'a')";
    expect(sql(anyTag, all, postgresDialect).sql).toMatch(/EXISTS \(SELECT 1 FROM "device_tag" a\d+ +WHERE a\d+\."device" = a0\.id/);
    expect(sql(anyTag).sql).toMatch(/\(a0\.id IN \(SELECT a\d+\."device" FROM "device_tag" a\d+ +WHERE a\d+\."device" IS NOT NULL AND/);
    // Through a link the owner's id may be null (a LEFT JOIN): EXISTS on both.
    expect(sql("/device?$filter=belongs_to__application/owns__release/any(r:r/status eq 'failed')").sql).toMatch(/EXISTS \(SELECT 1 FROM "release"/);
    expect(sql("/device?$filter=device_tag/all(t:t/value ne 'x')").sql).toContain('NOT EXISTS');
    expect(sql('/application?$filter=owns__device/$count ge 2').sql).toMatch(/\(SELECT COUNT\(\*\) FROM "device"/);
  });
});

describe('sql: $expand in the one statement', () => {
  it('builds each expanded record with one JSON array call, whatever a request expands', () => {
    // id, the fields, the links, and one expand per link either way.
    for (const r of model.resources.values()) expect(1 + r.fields.length + 2 * r.links.length + r.reverse.length, r.name).toBeLessThanOrEqual(ROW_ARRAY_LIMIT);
  });

  it('expands two levels as correlated subqueries of one statement, on both databases', () => {
    const url = '/application?$select=app_name&$expand=owns__device($select=device_name;$top=2;$expand=device_tag($select=value))';
    const lite = sql(url);
    expect(lite.sql.match(/json_group_array/g)).toHaveLength(2);
    const pg = sql(url, all, postgresDialect);
    expect(pg.sql.match(/json_agg/g)).toHaveLength(2);
    expect(pg.params).toEqual([2]);
  });
});

describe('ODataUrlParser: URLs of a shape it has parsed', () => {
  const uuids = Array.from({ length: 50 }, (_, i) => `dev${i.toString(16).padStart(29, '0')}`);
  const urls = [
    ...queryMix(uuids).flatMap((q) => [0, 1, 2, 3].map((n) => encodeURI(q.url(n)))),
    '/device(1)',
    '/device(27)?$select=id',
    "/device(uuid='ab')",
    "/device(uuid='a''); DROP TABLE device;--')",
    "/device(uuid=%27a%27%27b%27)",
    "/device_tag(device=1,tag_key='k')",
    '/device?$select=id,uuid&$top=5&$skip=2',
    '/device?$select=id&$top=7&$skip=20',
    "/device?$filter=(id gt 3 or not(is_online eq true)) and id in (1,2) and tolower(device_name) eq 'x' and id add 1 mod 2 eq 0 and uuid ne null",
    "/device?$filter=id eq -5 or memory_usage le 2.5 or cpu_temp eq +7",
    '/device?$filter=id%20eq%2012&$orderby=device_name',
    '/device?$filter=id+eq+12',
    "/device?$filter=device_name eq 'x''y' and device_name ne 'it%27s'",
    "/device?$filter=created_at gt datetime'2020-01-01T00:00:00Z' and created_at lt datetime'2021-01-01T00:00:00Z'",
    "/device?$filter=created_at gt datetime'not a date'",
    "/device?$filter=created_at gt date'2020-01-01'",
    "/application?$expand=owns__device($select=id;$filter=contains(device_name,'a');$expand=device_tag($top=1);$orderby=id desc;$top=2;$skip=1),owns__device/$count($filter=is_online eq true)",
    "/device?$filter=device_tag/any(t:t/tag_key eq 'a' and t/value eq '3')",
    '/application?$filter=owns__device/$count gt 1',
    '/release?$filter=semver_major eq 2 and revision eq 0',
    "/device?$filter=device_name eq @n&@n='x'",
    "/device?$filter=device_name eq 'unterminated",
    '/device(',
    '/device?$filter=id eq',
    '/device?$filter=id eq 1;DROP TABLE x',
    '/device?$top=-1',
    '/device?$frobnicate=1',
  ];
  const fresh = (url: string) => {
    try {
      return parseODataUrl(url);
    } catch (err) {
      return { error: (err as { code?: string }).code };
    }
  };
  const kept = (p: ODataUrlParser, url: string) => {
    try {
      return p.parse(url);
    } catch (err) {
      return { error: (err as { code?: string }).code };
    }
  };

  it('parses every URL as parseODataUrl does, the first time and from its kept shape', () => {
    const p = new ODataUrlParser();
    for (const url of urls) expect(kept(p, url), url).toEqual(fresh(url));
    for (const url of [...urls].reverse()) expect(kept(p, url), url).toEqual(fresh(url));
  });

  it('keeps one shape for a query asked with other values, and each request has its own', () => {
    expect(liftLiterals("/device(uuid='ab')?$filter=id eq 3&$top=5")).toEqual({ shape: '/device(uuid=@l0)?$filter=id eq @l1&$top=5', binds: { '@l0': ['Text', 'ab'], '@l1': ['Real', 3] } });
    expect(liftLiterals("/device?$filter=created_at gt datetime'2020-01-01T00:00:00Z'")!.shape).toBe('/device?$filter=created_at gt @l0');
    expect(liftLiterals("/device?$filter=device_name eq @n&@n='x'")).toBeNull();
    const p = new ODataUrlParser(2);
    expect(p.parse("/device(uuid='a')").key).toEqual({ uuid: 'a' });
    expect(p.parse("/device(uuid='b')").key).toEqual({ uuid: 'b' });
    expect(p.parse("/device(uuid='a')").key).toEqual({ uuid: 'a' });
    // Beyond its size the least recently used shapes go; what it answers does not change.
    for (let i = 0; i < 5; i++) expect(p.parse(`/device?$top=${i}`).options.top).toBe(i);
    expect(p.parse("/device(uuid='c')").key).toEqual({ uuid: 'c' });
  });
});
