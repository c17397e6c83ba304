/**
 * Requests for the cloud fuzz, as fast-check arbitraries: OData calls built from the model
 * (resource, path key, $select/$filter/$expand/$orderby/$top/$skip/$count, bodies typed by
 * field), the device endpoints (register, target state, state report), the key endpoints,
 * the proxy, and raw noise. Most are well formed enough to get past the parser, so the
 * planner, the SQL and both databases see them; a share is broken on purpose at each layer.
 * Names and ids come from the world, so keys and links hit real records, others' included.
 */
import fc from 'fast-check';
import type { FieldDef, Model, ResourceDef } from '../../src/cloud/model/types.js';
import type { FuzzFixture, Who } from './cloud-fuzz-world.js';

export type Caller = Who | 'nobody' | 'stranger';

export interface FuzzRequest {
  who: Caller;
  method: string;
  url: string;
  /** The body as sent (raw text, possibly not JSON), and its content type. */
  body?: { text: string; type: string };
  headers?: Record<string, string>;
}

const JUNK_NAMES = ['nope', 'key_hash', '__id', 'id', 'actor', 'constructor', '__proto__', 'd', "x'y", 'a b', 'ünï', ''];
const SPECIAL_STRINGS = ['', "'", "''", '%', '%25', '_', '\\', '\u0000', 'a\u0000b', 'null', 'true', '-1', '1e309', '😀', '\ud800', 'x'.repeat(300), "'); DROP TABLE device; --", '$filter', '/', '(', ')'];
const HEX = '0123456789abcdef'.split('');

/** Lone surrogates as U+FFFD: encodeURIComponent throws on them, and no client could send one. */
const wellFormed = (s: string) => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
const enc = (s: string) => encodeURIComponent(wellFormed(s));
/** As clients that leave OData's punctuation unencoded send it (pinejs-client does). */
const encLoose = (s: string) => enc(s).replace(/%(27|28|29|2F|2C|3A|24|3D|3B|40)/g, (m) => decodeURIComponent(m));

export function cloudRequests(fixture: FuzzFixture, model: Model): fc.Arbitrary<FuzzRequest> {
  const resources = [...model.resources.values()];
  const allIds = [...new Set(Object.values(fixture.ids).flat())];
  const allKeys = Object.values(fixture.keys);

  const text = fc.oneof(
    { arbitrary: fc.string({ maxLength: 24 }), weight: 4 },
    { arbitrary: fc.string({ unit: 'binary', maxLength: 12 }), weight: 1 },
    { arbitrary: fc.constantFrom(...SPECIAL_STRINGS, 'alice-1', 'bob-1', 'alice/private', 'raspberrypi4-64', 'main', 'room'), weight: 2 },
  );
  const id = fc.oneof(
    { arbitrary: fc.constantFrom(...allIds), weight: 6 },
    { arbitrary: fc.integer({ min: -3, max: 60 }), weight: 2 },
    { arbitrary: fc.constantFrom(0, 2 ** 31 - 1, 2 ** 31, 2 ** 53 - 1, Number.MAX_SAFE_INTEGER + 2), weight: 1 },
  );
  const hex = (n: number) => fc.string({ unit: fc.constantFrom(...HEX), minLength: n, maxLength: n });
  const uuid = fc.oneof({ arbitrary: fc.constantFrom(...fixture.uuids), weight: 3 }, { arbitrary: hex(32), weight: 2 }, { arbitrary: hex(62), weight: 1 }, { arbitrary: text, weight: 1 });
  const deviceKeyValue = fc.oneof(fc.constantFrom(...allKeys), fc.string({ minLength: 16, maxLength: 40, unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789-_'.split('')) }), text);

  // ---- OData URL pieces -------------------------------------------------------------
  const numLit = fc.oneof(id.map(String), fc.constantFrom('99999999999999999999999', '1.5', '-0', '1e5', '-2147483649', '9223372036854775808', '0.000001'));
  const strLit = fc.oneof({ arbitrary: text.map((s) => `'${s.replace(/'/g, "''")}'`), weight: 5 }, { arbitrary: text.map((s) => `'${s}`), weight: 1 });
  const literal = fc.oneof(
    { arbitrary: numLit, weight: 3 },
    { arbitrary: strLit, weight: 3 },
    { arbitrary: fc.constantFrom('true', 'false', 'null'), weight: 1 },
    { arbitrary: fc.constantFrom("datetime'2020-01-01T00:00:00Z'", "datetime'2099-12-31T23:59:59.999Z'", "datetime'nonsense'", "datetime'-271821-04-19T00:00:00Z'"), weight: 1 },
  );
  const fieldNames = (r: ResourceDef) => r.fields.filter((f) => !f.hidden).map((f) => f.name);
  const linkNames = (r: ResourceDef) => r.links.map((l) => l.name);
  const reverseNames = (r: ResourceDef) => r.reverse.map((l) => l.name);
  const target = (r: ResourceDef, name: string): ResourceDef | undefined => {
    const l = r.links.find((x) => x.name === name);
    if (l) return model.get(l.target);
    const rev = r.reverse.find((x) => x.name === name);
    return rev ? model.get(rev.source) : undefined;
  };
  const pick = (names: string[]) => fc.oneof({ arbitrary: fc.constantFrom(...(names.length ? names : ['id'])), weight: 20 }, { arbitrary: fc.constantFrom(...JUNK_NAMES), weight: 1 });

  const path = (r: ResourceDef, alias?: string): fc.Arbitrary<string> => {
    const prefix = alias ? `${alias}/` : '';
    const own = pick([...fieldNames(r), ...linkNames(r)]).map((f) => `${prefix}${f}`);
    const links = linkNames(r);
    const through = links.length
      ? fc.constantFrom(...links).chain((l) => pick(fieldNames(target(r, l) ?? r)).map((f) => `${prefix}${l}/${f}`))
      : own;
    const counted = reverseNames(r).length ? fc.constantFrom(...reverseNames(r)).map((l) => `${prefix}${l}/$count`) : own;
    return fc.oneof({ arbitrary: own, weight: 6 }, { arbitrary: through, weight: 2 }, { arbitrary: counted, weight: 1 });
  };

  const operand = (r: ResourceDef, alias?: string): fc.Arbitrary<string> =>
    fc.oneof(
      { arbitrary: path(r, alias), weight: 4 },
      { arbitrary: literal, weight: 2 },
      { arbitrary: fc.tuple(path(r, alias), fc.constantFrom('add', 'sub', 'mul', 'div', 'mod'), numLit).map(([p, op, n]) => `${p} ${op} ${n}`), weight: 1 },
      {
        arbitrary: fc.tuple(fc.constantFrom('tolower', 'toupper', 'length', 'trim', 'year', 'month', 'day', 'hour', 'round', 'floor', 'ceiling', 'now'), path(r, alias)).map(([f, p]) => (f === 'now' ? 'now()' : `${f}(${p})`)),
        weight: 1,
      },
      { arbitrary: fc.tuple(fc.constantFrom('substring', 'indexof', 'concat'), path(r, alias), fc.oneof(numLit, strLit)).map(([f, p, v]) => `${f}(${p},${v})`), weight: 1 },
    );

  /** A literal of the field's own type, so the comparison gets past the planner to SQL. */
  const literalOf = (f: FieldDef): fc.Arbitrary<string> => {
    switch (f.type) {
      case 'integer':
      case 'bigint':
      case 'real':
        return numLit;
      case 'boolean':
        return fc.constantFrom('true', 'false');
      case 'datetime':
        return fc.date({ min: new Date('1970-01-01'), max: new Date('2100-01-01'), noInvalidDate: true }).map((d) => `datetime'${d.toISOString()}'`);
      default:
        return strLit;
    }
  };
  const typedComparison = (r: ResourceDef, alias?: string): fc.Arbitrary<string> => {
    const prefix = alias ? `${alias}/` : '';
    const fields = r.fields.filter((f) => !f.hidden);
    const byField = fc.constantFrom(...fields).chain((f) => fc.tuple(fc.constantFrom('eq', 'ne', 'gt', 'le'), fc.oneof(literalOf(f), fc.constant('null'))).map(([op, v]) => `${prefix}${f.name} ${op} ${v}`));
    if (!r.links.length) return byField;
    const byLink = fc.constantFrom(...r.links).chain((l) => fc.oneof(fc.constantFrom(...(fixture.ids[l.target] ?? [1])).map(String), fc.constant('null')).map((v) => `${prefix}${l.name} eq ${v}`));
    return fc.oneof(byField, byLink);
  };

  const comparison = (r: ResourceDef, alias?: string) =>
    fc.oneof(
      { arbitrary: typedComparison(r, alias), weight: 6 },
      { arbitrary: fc.tuple(operand(r, alias), fc.constantFrom('eq', 'ne', 'gt', 'ge', 'lt', 'le'), operand(r, alias)).map(([a, op, b]) => `${a} ${op} ${b}`), weight: 3 },
      { arbitrary: fc.tuple(fc.constantFrom('contains', 'startswith', 'endswith', 'substringof'), path(r, alias), strLit).map(([f, p, s]) => `${f}(${p},${s})`), weight: 2 },
      { arbitrary: fc.tuple(path(r, alias), fc.array(literal, { minLength: 0, maxLength: 3 })).map(([p, vs]) => `${p} in (${vs.join(',')})`), weight: 1 },
    );

  const lambda = (r: ResourceDef) => {
    const navs = [...linkNames(r), ...reverseNames(r)];
    if (!navs.length) return comparison(r);
    return fc
      .tuple(fc.constantFrom(...navs), fc.constantFrom('any', 'all'), fc.constantFrom('x', 'dt', 'a1'))
      .chain(([nav, fn, v]) => comparison(target(r, nav) ?? r, v).map((body) => `${nav}/${fn}(${v}:${body})`));
  };

  const filter = (r: ResourceDef): fc.Arbitrary<string> =>
    fc.letrec<{ expr: string }>((tie) => ({
      expr: fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        { arbitrary: comparison(r), weight: 5 },
        { arbitrary: lambda(r), weight: 2 },
        { arbitrary: fc.tuple(tie('expr'), fc.constantFrom('and', 'or'), tie('expr')).map(([a, op, b]) => `(${a}) ${op} (${b})`), weight: 2 },
        { arbitrary: tie('expr').map((e) => `not (${e})`), weight: 1 },
        { arbitrary: fc.constantFrom('', 'eq', "id eq 1 and", '(', 'id eq 1)', 'id eq @x', 'true', 'id eq 1;DROP TABLE device'), weight: 1 },
      ),
    })).expr;

  const orderby = (r: ResourceDef) =>
    fc.array(fc.tuple(path(r), fc.constantFrom('', '', ' asc', ' desc', ' desc', ' sideways')).map(([p, d]) => `${p}${d}`), { minLength: 1, maxLength: 3 }).map((xs) => xs.join(','));
  const select = (r: ResourceDef) => fc.oneof(fc.subarray([...fieldNames(r), ...linkNames(r), 'nope'], { minLength: 1 }).map((xs) => xs.join(',')), fc.constantFrom('*', '', ',', 'id,,id'));
  const topSkip = fc.oneof(fc.nat(50).map(String), fc.constantFrom('0', '-1', 'abc', '1.5', '99999999999999999999', ''));

  const expand = (r: ResourceDef, depth: number): fc.Arbitrary<string> => {
    const navs = [...linkNames(r), ...reverseNames(r)];
    if (!navs.length) return fc.constant('nope');
    const one = fc.constantFrom(...navs).chain((nav) => {
      const t = target(r, nav) ?? r;
      const opts: Array<fc.Arbitrary<string>> = [
        select(t).map((s) => `$select=${s}`),
        filter(t).map((f) => `$filter=${f}`),
        orderby(t).map((o) => `$orderby=${o}`),
        topSkip.map((n) => `$top=${n}`),
        topSkip.map((n) => `$skip=${n}`),
      ];
      if (depth > 0) opts.push(expand(t, depth - 1).map((e) => `$expand=${e}`));
      return fc.oneof(
        { arbitrary: fc.constant(nav), weight: 3 },
        { arbitrary: fc.constant(`${nav}/$count`), weight: 1 },
        { arbitrary: fc.array(fc.oneof(...opts), { minLength: 1, maxLength: 3 }).map((os) => `${nav}(${os.join(';')})`), weight: 3 },
      );
    });
    return fc.oneof({ arbitrary: fc.array(one, { minLength: 1, maxLength: 3 }).map((xs) => xs.join(',')), weight: 9 }, { arbitrary: fc.constantFrom('nope', '', 'device(', 'owns__device($top=)'), weight: 1 });
  };

  const encode = fc.constantFrom(enc, enc, encLoose);
  const someOptions = (r: ResourceDef) => {
    const options: Record<string, fc.Arbitrary<string>> = {
      $select: select(r),
      $filter: fc.oneof({ arbitrary: typedComparison(r), weight: 2 }, { arbitrary: filter(r), weight: 1 }),
      $expand: expand(r, 1),
      $orderby: orderby(r),
      $top: topSkip,
      $skip: topSkip,
    };
    return fc
      .subarray(Object.keys(options), { maxLength: 3 })
      .chain((names) => fc.tuple(encode, ...names.map((n) => options[n]!)).map(([how, ...values]) => names.map((n, i) => `${n}=${how(values[i]!)}`).join('&')));
  };
  const query = (r: ResourceDef) =>
    fc.oneof({ arbitrary: fc.constant(''), weight: 3 }, { arbitrary: someOptions(r), weight: 6 }, { arbitrary: everyOption(r), weight: 1 });
  const everyOption = (r: ResourceDef) =>
    fc
      .record(
        {
          $select: select(r),
          $filter: filter(r),
          $expand: expand(r, 1),
          $orderby: orderby(r),
          $top: topSkip,
          $skip: topSkip,
          $count: fc.constantFrom('true', 'false'),
          $format: fc.constantFrom('json', 'xml'),
          junk: fc.constantFrom('foo=bar', '$nope=1', '$top=1&$top=2', '$filter=', '&&', '%ZZ=1', '$select=%E0%A4%A'),
        },
        { requiredKeys: [] },
      )
      .chain((opts) =>
        encode.map((how) =>
          Object.entries(opts)
            .map(([k, v]) => (k === 'junk' ? v : `${k}=${how(v)}`))
            .join('&'),
        ),
      );

  /** `(a=..,b=..)` over one of the resource's unique field sets, each value of its own type. */
  const namedKey = (r: ResourceDef): fc.Arbitrary<string> => {
    if (!r.uniques.length) return fc.constant('(id=1)');
    const valueOf = (column: string): fc.Arbitrary<string> => {
      const link = r.links.find((l) => l.column === column);
      if (link) return fc.constantFrom(...(fixture.ids[link.target] ?? [1])).map(String);
      const field = r.fields.find((f) => f.column === column);
      if (column === 'uuid') return uuid.map((u) => `'${enc(u.replace(/'/g, "''"))}'`);
      return field ? literalOf(field).map(enc) : numLit;
    };
    return fc.constantFrom(...r.uniques).chain((cols) => fc.tuple(...cols.map(valueOf)).map((vs) => `(${cols.map((c, i) => `${r.links.find((l) => l.column === c)?.name ?? c}=${vs[i]}`).join(',')})`));
  };
  const keyPart = (r: ResourceDef) =>
    fc.oneof(
      { arbitrary: fc.constant(''), weight: 30 },
      { arbitrary: numLit.map((n) => `(${n})`), weight: 20 },
      { arbitrary: uuid.map((u) => `(uuid='${enc(u.replace(/'/g, "''"))}')`), weight: r.fields.some((f) => f.name === 'uuid') ? 10 : 1 },
      { arbitrary: namedKey(r), weight: 10 },
      { arbitrary: fc.tuple(pick(fieldNames(r)), literal).map(([f, v]) => `(${f}=${enc(v)})`), weight: 4 },
      { arbitrary: fc.constantFrom('()', "('x')", '(1,2)', '(@id)', '(1', '(id=)', '(-1)', '(1.5)', '(%27)'), weight: 4 },
    );

  // ---- bodies -----------------------------------------------------------------------
  const typed = (f: FieldDef): fc.Arbitrary<unknown> => {
    switch (f.type) {
      case 'integer':
      case 'bigint':
        // ids of the world's records among them: an integer field may hold a reference (api_key.is_of__actor does)
        return fc.oneof({ arbitrary: id, weight: 3 }, { arbitrary: fc.integer({ min: -10, max: 1000 }), weight: 2 }, { arbitrary: fc.constantFrom(2 ** 31, 2 ** 53, 2 ** 63, -(2 ** 63), 1.5, 1e308), weight: 1 });
      case 'real':
        return fc.double();
      case 'boolean':
        return fc.boolean();
      case 'text':
        return text;
      case 'datetime':
        return fc.oneof(fc.date({ noInvalidDate: true }).map((d) => d.toISOString()), fc.constantFrom('2020-01-01', 'yesterday', 8.64e15, 8.64e15 + 1, -1, '+275760-09-13T00:00:00.000Z'));
      case 'json':
        return fc.jsonValue({ maxDepth: 3 });
    }
  };
  const linkValue = fc.oneof({ arbitrary: id, weight: 4 }, { arbitrary: id.map((i) => ({ __id: i })), weight: 2 }, { arbitrary: fc.constantFrom(null, '1', { __id: 'x' }, [1], {}), weight: 1 });
  const anyJson = fc.jsonValue({ maxDepth: 2 });
  const objectBody = (r: ResourceDef) =>
    fc.record(
      {
        ...Object.fromEntries(r.fields.map((f) => [f.name, fc.oneof({ arbitrary: typed(f), weight: 4 }, { arbitrary: anyJson, weight: 1 })])),
        ...Object.fromEntries(r.links.map((l) => [l.name, linkValue])),
        ...(r.table === 'application' || r.table === 'device' ? { device_type: fc.oneof(fc.constantFrom('raspberrypi4-64', 'raspberrypi3', 'no-such-board'), anyJson) } : {}),
        nope: anyJson,
      },
      { requiredKeys: [] },
    );
  const json = (v: unknown) => ({ text: JSON.stringify(v), type: 'application/json' });
  const rawBody = fc.oneof(
    fc.constantFrom('{"a":', '{', 'null', '', '[]', '"x"', '1', 'nope', '{"__proto__":{"x":1}}', '{"a":1,"a":2}').map((text) => ({ text, type: 'application/json' })),
    fc.tuple(fc.string({ maxLength: 20 }), fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', 'application/octet-stream', 'application/json; charset=latin1', 'multipart/form-data')).map(([text, type]) => ({ text, type })),
  );
  const linkTo = (target: string) => fc.oneof({ arbitrary: fc.constantFrom(...(fixture.ids[target] ?? [1])), weight: 4 }, { arbitrary: linkValue, weight: 1 });
  const plainValue = (f: FieldDef): fc.Arbitrary<unknown> => (f.type === 'text' ? fc.string({ maxLength: 16 }) : typed(f));
  /** What a create needs (required fields and links, well typed), and up to two more. */
  const createBody = (r: ResourceDef) =>
    fc.record(
      {
        ...Object.fromEntries(r.fields.filter((f) => f.required).map((f) => [f.name, plainValue(f)])),
        ...Object.fromEntries(r.links.filter((l) => l.required).map((l) => [l.name, linkTo(l.target)])),
      },
    ).chain((required) => changeBody(r, 2).map((more) => ({ ...more, ...required })));
  /** One to `max` writable fields and links, well typed. */
  const changeBody = (r: ResourceDef, max = 3) => {
    const writable: Array<[string, fc.Arbitrary<unknown>]> = [
      ...r.fields.filter((f) => !f.readOnly && !f.hidden).map((f): [string, fc.Arbitrary<unknown>] => [f.name, plainValue(f)]),
      ...r.links.filter((l) => !l.readOnly).map((l): [string, fc.Arbitrary<unknown>] => [l.name, linkTo(l.target)]),
    ];
    if (!writable.length) return fc.constant({});
    return fc.subarray(writable, { minLength: 1, maxLength: Math.min(max, writable.length) }).chain((picked) => fc.tuple(...picked.map(([, a]) => a)).map((values) => Object.fromEntries(picked.map(([n], i) => [n, values[i]]))));
  };
  const body = (r: ResourceDef) =>
    fc.oneof(
      { arbitrary: createBody(r).map(json), weight: 4 },
      { arbitrary: changeBody(r).map(json), weight: 4 },
      { arbitrary: objectBody(r).map(json), weight: 2 },
      { arbitrary: anyJson.map(json), weight: 1 },
      { arbitrary: rawBody, weight: 1 },
    );

  // ---- callers ----------------------------------------------------------------------
  const caller = (weights: Partial<Record<Caller, number>>) =>
    fc.oneof(...Object.entries(weights).map(([who, weight]) => ({ arbitrary: fc.constant(who as Caller), weight: weight! })));
  const user = caller({ alice: 10, bob: 3, admin: 2, aliceDevice: 2, bobDevice: 1, aliceProvisioning: 2, bobProvisioning: 1, nobody: 1, stranger: 1 });
  const device = caller({ aliceDevice: 8, bobDevice: 3, aliceProvisioning: 1, alice: 1, nobody: 1 });

  // ---- requests ---------------------------------------------------------------------
  const resourceNames = [...model.resources.keys(), 'my_application', 'image__is_part_of__release'];
  const odata = fc
    .tuple(
      fc.oneof({ arbitrary: fc.constant('v6'), weight: 8 }, { arbitrary: fc.constantFrom('v1', 'v2', 'v3', 'v4', 'v5'), weight: 2 }),
      fc.oneof({ arbitrary: fc.constantFrom(...resourceNames), weight: 12 }, { arbitrary: fc.constantFrom('environment_variable', 'nope', '', '$metadata', 'device/$count', 'device(1)/device_tag'), weight: 1 }),
      fc.oneof({ arbitrary: fc.constant('GET'), weight: 5 }, { arbitrary: fc.constantFrom('POST', 'PATCH', 'DELETE'), weight: 4 }, { arbitrary: fc.constant('PUT'), weight: 1 }),
      user,
    )
    .chain(([version, name, method, who]) => {
      const r = model.get(name) ?? model.get('device')!;
      // a create goes to the collection without options: mostly so, now and then not
      const rarely = <T>(a: fc.Arbitrary<T>, usual: T) => (method === 'POST' ? fc.oneof({ arbitrary: fc.constant(usual), weight: 12 }, { arbitrary: a, weight: 1 }) : a);
      // `/$count` follows the collection, not a key (the grammar refuses both: now and then sent anyway)
      const target = fc.oneof(
        { arbitrary: keyPart(r).map((k) => [k, ''] as const), weight: 40 },
        { arbitrary: fc.constant(['', '/$count'] as const), weight: 5 },
        { arbitrary: keyPart(r).map((k) => [k, '/$count'] as const), weight: 1 },
      );
      return fc
        .tuple(rarely(target, ['', ''] as const), rarely(query(r), ''), method === 'GET' || method === 'DELETE' ? fc.constant(undefined) : method === 'POST' ? fc.oneof({ arbitrary: createBody(r).map(json), weight: 4 }, { arbitrary: body(r), weight: 1 }) : body(r))
        .map(([[key, count], q, b]): FuzzRequest => ({ who, method, url: `/${version}/${name}${key}${count}${q ? `?${q}` : ''}`, ...(b ? { body: b } : {}) }));
    });

  const report = fc.record(
    {
      status: text,
      is_online: fc.oneof({ arbitrary: fc.boolean(), weight: 8 }, { arbitrary: anyJson, weight: 1 }),
      os_version: text,
      supervisor_version: text,
      ip_address: text,
      mac_address: text,
      api_port: fc.oneof({ arbitrary: fc.integer({ min: 1, max: 65535 }), weight: 8 }, { arbitrary: fc.integer({ min: -1, max: 70_000 }), weight: 1 }, { arbitrary: anyJson, weight: 1 }),
      download_progress: fc.oneof(fc.integer({ min: 0, max: 100 }), fc.constant(null), fc.integer({ min: -1, max: 101 })),
      update_pending: fc.boolean(),
      apps: fc.dictionary(
        fc.oneof(id.map(String), text),
        fc.record(
          {
            release_id: fc.oneof(id, fc.constant(null)),
            commit: fc.oneof(text, fc.constant(null)),
            services: fc.dictionary(
              text,
              fc.record(
                { image: text, image_id: id, status: fc.constantFrom('Running', 'Downloading', 'Installing', 'Stopped', 'weird', ''), download_progress: fc.oneof(fc.integer({ min: -1, max: 101 }), fc.constant(null)), release_id: id },
                { requiredKeys: ['image', 'status', 'download_progress'] },
              ),
              { maxKeys: 3 },
            ),
          },
          { requiredKeys: ['services'] },
        ),
        { maxKeys: 2 },
      ),
      nope: anyJson,
    },
    { requiredKeys: [] },
  );
  /** A device key's own uuid mostly (the endpoints' happy path), any other now and then. */
  const ownUuid = (who: Caller) => {
    const own = who === 'aliceDevice' ? fixture.uuids[0] : who === 'bobDevice' ? fixture.uuids[1] : undefined;
    return own ? fc.oneof({ arbitrary: fc.constant(own), weight: 4 }, { arbitrary: uuid, weight: 1 }) : uuid;
  };
  const registration = fc.record(
    {
      uuid: fc.oneof({ arbitrary: hex(32), weight: 6 }, { arbitrary: uuid, weight: 1 }),
      api_key: fc.oneof({ arbitrary: hex(32), weight: 6 }, { arbitrary: deviceKeyValue, weight: 1 }),
      device_type: fc.oneof({ arbitrary: fc.constantFrom('raspberrypi4-64', 'raspberrypi3'), weight: 6 }, { arbitrary: text, weight: 1 }),
      device_name: text,
      supervisor_version: text,
      os_version: text,
    },
    { requiredKeys: [] },
  );
  const deviceEndpoints = fc.oneof(
    fc
      .tuple(caller({ aliceProvisioning: 6, bobProvisioning: 2, aliceDevice: 1, alice: 1, nobody: 1 }), fc.oneof({ arbitrary: registration.map(json), weight: 8 }, { arbitrary: rawBody, weight: 1 }))
      .map(([who, b]): FuzzRequest => ({ who, method: 'POST', url: '/device/register', body: b })),
    fc
      .tuple(device, fc.option(fc.constantFrom('"x"', '*', ''), { nil: undefined }))
      .chain(([who, etag]) => ownUuid(who).map((u): FuzzRequest => ({ who, method: 'GET', url: `/device/v3/${enc(u)}/state`, ...(etag !== undefined ? { headers: { 'if-none-match': etag } } : {}) }))),
    device.chain((who) =>
      fc
        .oneof({ arbitrary: fc.dictionary(ownUuid(who), report, { minKeys: 1, maxKeys: 2 }).map(json), weight: 8 }, { arbitrary: rawBody, weight: 1 })
        .map((b): FuzzRequest => ({ who, method: 'PATCH', url: '/device/v3/state', body: b })),
    ),
  );
  const keyEndpoints = fc.oneof(
    fc.tuple(user, fc.record({ name: fc.oneof(text, anyJson), description: fc.oneof(text, anyJson) }, { requiredKeys: [] })).map(([who, b]): FuzzRequest => ({ who, method: 'POST', url: '/api-key/user/full', body: json(b) })),
    fc.tuple(user, numLit, fc.record({ name: text, description: text }, { requiredKeys: [] })).map(([who, n, b]): FuzzRequest => ({ who, method: 'POST', url: `/api-key/application/${enc(n)}/provisioning`, body: json(b) })),
    fc.tuple(user, numLit, fc.record({ apiKey: fc.oneof(deviceKeyValue, anyJson) }, { requiredKeys: [] })).map(([who, n, b]): FuzzRequest => ({ who, method: 'POST', url: `/api-key/device/${enc(n)}/device-key`, body: json(b) })),
    fc.tuple(user, fc.record({ username: fc.oneof(text, fc.constantFrom('alice', 'admin', 'carol')), email: fc.oneof(text, anyJson) }, { requiredKeys: [] })).map(([who, b]): FuzzRequest => ({ who, method: 'POST', url: '/fleetlab/users', body: json(b) })),
  );
  const proxy = fc
    .tuple(user, fc.constantFrom('v1/blink', 'v2/journal-logs', 'v1/device', 'ping', 'v2/applications/state', 'nope', '../v6/device', 'v1/%ZZ'), fc.record({ uuid, deviceId: id, appId: id, method: fc.oneof(fc.constantFrom('GET', 'POST', 'PATCH'), text), data: anyJson }, { requiredKeys: [] }))
    .map(([who, p, b]): FuzzRequest => ({ who, method: 'POST', url: `/supervisor/${p}`, body: json(b) }));
  const noise = fc
    .tuple(user, fc.constantFrom('GET', 'POST', 'PATCH', 'PUT', 'DELETE', 'OPTIONS', 'HEAD'), fc.oneof(fc.webPath(), fc.constantFrom('/', '/%', '/v6', '/v6/', '/v6//device', '/device', '/device/v3//state', '/api-key', '/supervisor', '/v6/device%00')), fc.option(rawBody, { nil: undefined }))
    .map(([who, method, url, b]): FuzzRequest => ({ who, method, url: url || '/', ...(b && method !== 'GET' && method !== 'HEAD' ? { body: b } : {}) }));

  return fc.oneof({ arbitrary: odata, weight: 10 }, { arbitrary: deviceEndpoints, weight: 3 }, { arbitrary: keyEndpoints, weight: 1 }, { arbitrary: proxy, weight: 1 }, { arbitrary: noise, weight: 1 });
}

/** The inject options of a request, with the caller's key. */
export function injectOptions(req: FuzzRequest, fixture: FuzzFixture) {
  const key = req.who === 'nobody' ? undefined : req.who === 'stranger' ? 'not-a-key-of-anyone-000000000000' : fixture.keys[req.who];
  return {
    method: req.method as 'GET',
    url: req.url,
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(req.body ? { 'content-type': req.body.type } : {}), ...req.headers },
    ...(req.body ? { payload: req.body.text } : {}),
  };
}
