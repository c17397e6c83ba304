/**
 * fast-check arbitraries for requests to every endpoint of the device API (issue 16's fuzz
 * suite): path params, query, key and body, each mixing well-typed-but-wrong values (an app
 * that is not there, a negative id, a service of the other app, a time journalctl cannot
 * read) with garbage (wrong types, huge numbers, unicode, nested and deep objects, bodies that
 * are not JSON). The device is test/helpers/supervisor-fixture.ts's twoAppState().
 */
import fc from 'fast-check';
import type { WireLocalState } from '../../src/protocol/target-state.js';

/** Which key a request carries; resolved when it is sent, as keys can be regenerated. */
export type KeyChoice = 'device' | 'device-bearer' | 'app1' | 'app2' | 'none' | 'wrong' | 'twice';

export type Payload =
  | { kind: 'none' }
  | { kind: 'json'; value: unknown }
  | { kind: 'raw'; text: string; contentType: string };

export interface FuzzRequest {
  method: string;
  /** Path and query, percent-encoded (or deliberately not). */
  url: string;
  key: KeyChoice;
  payload: Payload;
}

export interface EndpointFuzzer {
  name: string;
  /** A 200 answer is a stream that does not end by itself: read its head only. */
  streams?: boolean;
  /** v1 actions whose errors are `{Data, Error}` (docs/decisions.md item 5). */
  dataErrorEnvelope?: boolean;
  request: fc.Arbitrary<FuzzRequest>;
}

export interface FuzzContext {
  /** Full ids of the device's containers, read when a value is generated. */
  containerIds(): string[];
  /** The device's whole local target, the base that target-state bodies mutate. */
  wholeState: WireLocalState;
}

const wrongNumber = fc.oneof(
  fc.integer(),
  fc.constantFrom(0, -1, -0, 1.5, 3, 99, 2 ** 31, 2 ** 53, 2 ** 53 + 2, 1e20, 1e308, -1e308, Number.MIN_VALUE),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

const oddStrings = [
  '', ' ', '-', '--help', '-f', '--output=export', '\u0000', 'a\nb', '\r\n', '../../etc/passwd', '$(reboot)', '`id`',
  "'; DROP TABLE x; --", '%s%n', '\u202etxt.exe', '𝕏'.repeat(300), 'x'.repeat(10_000), '__proto__', 'constructor',
  'toString', 'null', 'undefined', 'NaN', '1e3', '0x10', 'main', 'MAIN', ' main', 'main ', 'solo', 'worker', 'nope',
];
const wrongString = fc.oneof(
  fc.string(),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom(...oddStrings),
);

const garbage: fc.Arbitrary<unknown> = fc.oneof(
  fc.anything({ maxDepth: 3 }),
  fc.jsonValue({ maxDepth: 3 }),
  wrongString,
  wrongNumber,
  fc.constantFrom(null, true, false, [], {}, [[]], [{}], { '': '' }),
);

/**
 * `force: true` is the one input that makes a lock-respecting action go through the app's
 * update locks the suite holds, which would restart services for most of the run; the
 * success path of force is api.test.ts's. Every other value of force is fuzzed.
 */
const notTrue = fc.oneof({ weight: 2, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: garbage.filter((v) => v !== true) });

function withoutForceTrue(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutForceTrue);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    Object.defineProperty(out, k, { value: k === 'force' && v === true ? false : withoutForceTrue(v), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

const sanitized = (p: Payload): Payload => (p.kind === 'json' ? { kind: 'json', value: withoutForceTrue(p.value) } : p);

/** A field that is usually well typed (right or wrong value), sometimes garbage. */
const field = <T>(typed: fc.Arbitrary<T>) => fc.oneof({ weight: 3, arbitrary: typed }, { weight: 1, arbitrary: garbage });

const rawBodies = fc.record({
  text: fc.oneof(
    fc.constantFrom(
      '{"local":', '{', '}', 'null', '[]', '"text"', '1', 'true', ' ', '{"a":1}{', '\u0000', '{"__proto__":{"polluted":1}}',
      '{"constructor":{"prototype":{"polluted":1}}}', '{"appId":1,"appId":2}', '{"count":1e999}', '[1,2', 'force=1', '\ufeff{}',
      `{"pad":"${'x'.repeat(1.2 * 1024 * 1024)}"}`,
    ),
    fc.integer({ min: 100, max: 20_000 }).map((depth) => `${'['.repeat(depth)}${']'.repeat(depth)}`),
    fc.integer({ min: 100, max: 20_000 }).map((depth) => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`),
    fc.string({ maxLength: 200 }),
  ),
  contentType: fc.constantFrom(
    'application/json', 'application/json; charset=utf-8', 'application/json; charset=utf-16', 'APPLICATION/JSON',
    'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/octet-stream', 'application/merge-patch+json',
  ),
});

/** Bodies for an endpoint whose JSON fields are `fields`. */
function payloadOf(fields: Record<string, fc.Arbitrary<unknown>> = {}): fc.Arbitrary<Payload> {
  const typed = fc.record(fields, { requiredKeys: [] });
  const withExtra = fc.tuple(typed, fc.dictionary(wrongString, garbage, { maxKeys: 3 })).map(([t, extra]) => ({ ...extra, ...t }));
  return fc.oneof(
    { weight: 6, arbitrary: typed.map((value): Payload => ({ kind: 'json', value })) },
    { weight: 2, arbitrary: withExtra.map((value): Payload => ({ kind: 'json', value })) },
    { weight: 2, arbitrary: garbage.map((value): Payload => ({ kind: 'json', value })) },
    { weight: 2, arbitrary: rawBodies.map((r): Payload => ({ kind: 'raw', ...r })) },
    { weight: 1, arbitrary: fc.constant<Payload>({ kind: 'none' }) },
  );
}

const appIdParam = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('1', '2') },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '0', '-1', '3', '99', '01', '1.0', '1e3', '+1', '0x1', 'abc', '%00', '%', '%zz', '%ff', '99999999999999999999999',
      '9007199254740993', '1%2F..', '..', 'null', '%5Bobject%20Object%5D', '1%20', '%E2%80%AE1',
    ),
  },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }).map(encodeURIComponent) },
  { weight: 1, arbitrary: fc.integer().map(String) },
);

const queryValue = fc.oneof(wrongString.map(encodeURIComponent), fc.constantFrom('%', '%zz', '%ff%fe', '', 'a+b', '%00'));
/** Extra query parameters; `fixed` are the endpoint's own. */
function queryOf(fixed: Record<string, fc.Arbitrary<string>> = {}): fc.Arbitrary<string> {
  const own = fc.record(fixed, { requiredKeys: [] }).map((q) => Object.entries(q).map(([k, v]) => `${k}=${v}`));
  const extra = fc.array(fc.tuple(fc.constantFrom('x', 'force', 'appId', '__proto__', 'constructor', 'service', 'a[b]', '%zz'), queryValue).map(([k, v]) => `${k}=${v}`), { maxLength: 3 });
  return fc.tuple(own, fc.oneof({ weight: 3, arbitrary: fc.constant([] as string[]) }, { weight: 1, arbitrary: extra })).map(([a, b]) => [...a, ...b].join('&'));
}

const keyChoice = fc.oneof(
  { weight: 8, arbitrary: fc.constant<KeyChoice>('device') },
  { weight: 1, arbitrary: fc.constantFrom<KeyChoice>('device-bearer', 'app1', 'app2', 'none', 'wrong', 'twice') },
);

interface EndpointSpec {
  method: string;
  /** `:appId` is filled from the appId arbitrary. */
  path: string;
  fields?: Record<string, fc.Arbitrary<unknown>>;
  query?: Record<string, fc.Arbitrary<string>>;
  keys?: fc.Arbitrary<KeyChoice>;
  body?: fc.Arbitrary<Payload>;
  streams?: boolean;
  dataErrorEnvelope?: boolean;
}

function fuzzer(spec: EndpointSpec): EndpointFuzzer {
  const path = spec.path.includes(':appId') ? appIdParam.map((id) => spec.path.replace(':appId', id)) : fc.constant(spec.path);
  const request = fc
    .record({ path, query: queryOf(spec.query), key: spec.keys ?? keyChoice, payload: spec.body ?? payloadOf(spec.fields) })
    .map(({ path: p, query, key, payload }): FuzzRequest => ({ method: spec.method, url: query ? `${p}?${query}` : p, key, payload: sanitized(payload) }));
  return {
    name: `${spec.method} ${spec.path}`,
    request,
    ...(spec.streams ? { streams: true } : {}),
    ...(spec.dataErrorEnvelope ? { dataErrorEnvelope: true } : {}),
  };
}

const appIdField = field(fc.oneof(fc.constantFrom(1, 2), wrongNumber));
const serviceFields = {
  serviceName: field(fc.oneof(fc.constantFrom('main', 'worker', 'solo', 'nope'), wrongString)),
  imageId: field(fc.oneof(fc.constantFrom(101, 102, 201, 999), wrongNumber)),
  force: notTrue,
};

const journalFields = (ctx: FuzzContext) => ({
  all: field(fc.boolean()),
  follow: field(fc.boolean()),
  count: field(wrongNumber),
  unit: field(fc.oneof(fc.constantFrom('demo.service', 'docker.service', '*', 'a*', '-x', 'foo.service\u0000'), wrongString)),
  containerId: field(
    fc.oneof(
      fc.nat({ max: 5 }).map((i) => ctx.containerIds()[i] ?? 'f'.repeat(64)),
      fc.nat({ max: 5 }).map((i) => (ctx.containerIds()[i] ?? 'f'.repeat(64)).slice(0, 12)),
      fc.nat({ max: 5 }).map((i) => (ctx.containerIds()[i] ?? 'f'.repeat(64)).toUpperCase()),
      wrongString,
    ),
  ),
  format: field(fc.oneof(fc.constantFrom('short', 'json', 'cat', 'export', 'verbose', 'xml', '', 'JSON', 'json\n', 'short-iso'), wrongString)),
  since: field(fc.oneof(fc.constantFrom('yesterday', 'today', '2024-01-01', '-1h', '+1h', '@0', 'now', '1970-01-01 00:00:00', '9999-12-31', '2024-13-45', 'garbage'), wrongString)),
  until: field(fc.oneof(fc.constantFrom('yesterday', 'today', '2000-01-01', 'now', '@99999999999', 'never'), wrongString)),
});

const hostConfigFields = {
  network: field(
    fc.record(
      {
        hostname: field(fc.oneof(fc.constantFrom('ok-name', '', null, 'a'.repeat(64), 'a'.repeat(65), 'bad name!', '-lead', 'trail-', 'UPPER', 'dot.ted'), wrongString)),
        proxy: field(
          fc.oneof(
            fc.constantFrom(null, {}),
            fc.record(
              {
                type: field(fc.constantFrom('socks4', 'socks5', 'http-connect', 'http-relay', 'ftp', 'SOCKS5')),
                ip: field(fc.oneof(fc.constantFrom('10.0.0.1', 'proxy.local', '::1', 'bad ip', '', 'a;b'), wrongString)),
                port: field(fc.oneof(fc.constantFrom(1, 1080, 65535, 0, 65536, -1, '1080'), wrongNumber)),
                login: field(wrongString),
                password: field(fc.oneof(fc.constantFrom('secret', 'x"; evil', 'a}b'), wrongString)),
                noProxy: field(fc.array(fc.oneof(fc.constantFrom('10.0.0.0/8', '192.168.1.1', 'bad cidr!', ''), wrongString), { maxLength: 3 })),
              },
              { requiredKeys: [] },
            ),
          ),
        ),
        force: notTrue,
      },
      { requiredKeys: [] },
    ),
  ),
  force: notTrue,
};

/** A JSON path in `value` and every path under it. */
function pathsOf(value: unknown, at: string[] = []): string[][] {
  if (value === null || typeof value !== 'object') return [at];
  return [at, ...Object.entries(value).flatMap(([k, v]) => pathsOf(v, [...at, k]))];
}

function setAt(root: unknown, path: string[], value: unknown, remove: boolean): unknown {
  if (path.length === 0) return value;
  const copy = structuredClone(root) as Record<string, unknown>;
  let node = copy;
  for (const k of path.slice(0, -1)) node = node[k] as Record<string, unknown>;
  const last = path[path.length - 1]!;
  if (remove) delete node[last];
  else node[last] = value;
  return copy;
}

/** Known-wrong edits of a sound target state: each is a rule the schema or checkWireState enforces. */
const semanticEdits: Array<(s: any) => void> = [
  (s) => void (s.apps['1'].services['11'].serviceId = 12),
  (s) => void (s.apps['1'].services['11'].volumes = ['undeclared:/data']),
  (s) => void (s.apps['1'].services['12'].serviceName = 'main'),
  (s) => {
    s.apps['1'].services['11'].depends_on = ['worker'];
    s.apps['1'].services['12'].depends_on = ['main'];
  },
  (s) => void (s.apps['1'].services['11'].depends_on = ['main']),
  (s) => void (s.apps['1'].services['11'].depends_on = ['ghost']),
  (s) => {
    s.apps['1'].services['11'].networks = ['default'];
    s.apps['1'].services['11'].network_mode = 'host';
  },
  (s) => void (s.apps['1'].services['11'].networks = ['undeclared']),
  (s) => void (s.config.SUPERVISOR_POLL_INTERVAL = '5'),
  (s) => void (s.config.SUPERVISOR_POLL_INTERVAL = 'soon'),
  (s) => void (s.config.SUPERVISOR_LOCAL_MODE = 'maybe'),
  (s) => void (s.config.SUPERVISOR_OVERRIDE_LOCK = '2'),
  (s) => void (s.apps['0'] = s.apps['1']),
  (s) => void (s.apps['99999999999999999999'] = s.apps['2']),
  (s) => void (s.apps['1'].services['11'].image = 'has space'),
  (s) => void (s.apps['1'].releaseId = 0),
  (s) => void (s.apps['1'].releaseId = '-1'),
  (s) => void (s.apps['2'].services['21'].serviceName = '-bad'),
  (s) => void (s.apps['2'].services['21'].ports = ['99999:1']),
  (s) => void (s.apps['2'].services['21'].devices = ['/etc/passwd']),
  (s) => void (s.apps['2'].services['21'].restart = 'sometimes'),
];

/**
 * Bodies for POST /v2/local/target-state: the device's own state with one thing wrong
 * (a field replaced by garbage or removed, or a rule broken), or garbage. A replacement can
 * happen to be valid; the suite then puts the original back.
 */
function targetStatePayload(ctx: FuzzContext): fc.Arbitrary<Payload> {
  const base = ctx.wholeState;
  const paths = pathsOf(base).filter((p) => p.length > 0);
  const replaced = fc.tuple(fc.nat(), garbage, fc.boolean()).map(([i, v, remove]) => setAt(base, paths[i % paths.length]!, v, remove));
  const broken = fc.nat({ max: semanticEdits.length - 1 }).map((i) => {
    const copy = structuredClone(base);
    semanticEdits[i]!(copy);
    return copy;
  });
  return fc.oneof(
    { weight: 3, arbitrary: fc.oneof(replaced, broken).map((local): Payload => ({ kind: 'json', value: { local } })) },
    { weight: 1, arbitrary: payloadOf({ local: garbage }) },
  );
}

/** Every endpoint of docs/device-api.md, and requests to no endpoint at all. */
export function deviceApiFuzzers(ctx: FuzzContext): EndpointFuzzer[] {
  const none = { body: fc.oneof(fc.constant<Payload>({ kind: 'none' }), payloadOf()) };
  return [
    fuzzer({ method: 'GET', path: '/ping', keys: fc.constantFrom<KeyChoice>('none', 'wrong', 'device'), ...none }),
    fuzzer({ method: 'POST', path: '/v1/blink', ...none }),
    fuzzer({ method: 'POST', path: '/v1/update', fields: { force: notTrue } }),
    fuzzer({ method: 'POST', path: '/v1/reboot', fields: { force: notTrue }, dataErrorEnvelope: true }),
    fuzzer({ method: 'POST', path: '/v1/shutdown', fields: { force: notTrue }, dataErrorEnvelope: true }),
    fuzzer({ method: 'POST', path: '/v1/purge', fields: { appId: appIdField, force: notTrue }, dataErrorEnvelope: true }),
    fuzzer({ method: 'POST', path: '/v1/restart', fields: { appId: appIdField, force: notTrue } }),
    // Only keys that are not an app's: a new app key would have the services recreated.
    fuzzer({ method: 'POST', path: '/v1/regenerate-api-key', keys: fc.constantFrom<KeyChoice>('device', 'device-bearer', 'none', 'wrong', 'twice'), ...none }),
    fuzzer({ method: 'GET', path: '/v1/device', ...none }),
    fuzzer({ method: 'POST', path: '/v1/apps/:appId/stop', fields: { force: notTrue } }),
    fuzzer({ method: 'POST', path: '/v1/apps/:appId/start', ...none }),
    fuzzer({ method: 'GET', path: '/v1/apps/:appId', ...none }),
    fuzzer({ method: 'GET', path: '/v1/healthy', keys: fc.constantFrom<KeyChoice>('none', 'wrong', 'device'), ...none }),
    fuzzer({ method: 'PATCH', path: '/v1/device/host-config', fields: hostConfigFields }),
    fuzzer({ method: 'GET', path: '/v1/device/host-config', ...none }),
    fuzzer({ method: 'GET', path: '/v2/applications/state', ...none }),
    fuzzer({ method: 'GET', path: '/v2/applications/:appId/state', ...none }),
    fuzzer({ method: 'GET', path: '/v2/state/status', ...none }),
    fuzzer({ method: 'POST', path: '/v2/applications/:appId/restart-service', fields: serviceFields }),
    fuzzer({ method: 'POST', path: '/v2/applications/:appId/stop-service', fields: serviceFields }),
    fuzzer({ method: 'POST', path: '/v2/applications/:appId/start-service', fields: serviceFields }),
    fuzzer({ method: 'POST', path: '/v2/applications/:appId/restart', fields: { force: notTrue } }),
    fuzzer({ method: 'POST', path: '/v2/applications/:appId/purge', fields: { force: notTrue } }),
    fuzzer({ method: 'GET', path: '/v2/version', ...none }),
    fuzzer({ method: 'GET', path: '/v2/containerId', query: { service: fc.oneof(fc.constantFrom('main', 'worker', 'solo', 'nope', ''), queryValue) }, ...none }),
    fuzzer({ method: 'GET', path: '/v2/device/name', ...none }),
    fuzzer({ method: 'GET', path: '/v2/device/tags', ...none }),
    fuzzer({ method: 'GET', path: '/v2/device/vpn', ...none }),
    fuzzer({ method: 'GET', path: '/v2/cleanup-volumes', ...none }),
    fuzzer({ method: 'POST', path: '/v2/journal-logs', fields: journalFields(ctx), streams: true }),
    fuzzer({ method: 'GET', path: '/v2/local/target-state', ...none }),
    fuzzer({ method: 'POST', path: '/v2/local/target-state', body: targetStatePayload(ctx) }),
    fuzzer({ method: 'GET', path: '/v2/local/device-info', ...none }),
    fuzzer({ method: 'GET', path: '/v2/local/logs', streams: true, ...none }),
    {
      name: 'any method, any path',
      streams: true,
      request: fc
        .record({
          method: fc.constantFrom('GET', 'POST', 'PATCH', 'PUT', 'DELETE', 'OPTIONS', 'HEAD'),
          segments: fc.array(fc.oneof(fc.constantFrom('v1', 'v2', 'apps', 'applications', 'local', 'logs', 'state', '1', '..', '%2e%2e', '', '%00'), wrongString.map(encodeURIComponent)), { minLength: 1, maxLength: 4 }),
          key: keyChoice,
          payload: payloadOf(),
        })
        .map(({ method, segments, key, payload }): FuzzRequest => ({ method, url: `/${segments.join('/')}`, key, payload: sanitized(payload) })),
    },
  ];
}
