/**
 * Builtins the device bundle loads on first use rather than at start-up. Each builtin a
 * supervisor loads stays in its RSS for good: its source and code cache (file-backed pages
 * of the node binary) and its objects; tls alone ~3 MiB on Node 24, and crypto, readline and
 * v8 together 1.6 MiB of the bundle's idle RSS with the device's flags (66.3 -> 64.7 MiB,
 * medians of 4 alternating starts on an existing store). Dependencies and our own modules
 * import these at load time but call them only on paths an idle device never takes:
 * - https, tls, http2, zlib: fastify's HTTPS and HTTP/2 servers (the API serves plain HTTP),
 *   docker-modem's https (the engine is on a local socket), ws's TLS and compression;
 * - crypto: key generation, ETags, config hashes, the API key check, ws's handshake;
 * - readline: the local API's log stream; v8: execa's IPC input.
 * Left out, because they are used at start-up whatever stands in: worker_threads (pino reads
 * isMainThread, thread-stream Worker), perf_hooks (fastify reads performance), assert
 * (fastify's router asserts its options), dns (net.listen on an address loads it).
 *
 * A stand-in gives, without loading anything, a forwarding function for each of the
 * builtin's plain functions (named in lower camel case: not classes, whose `instanceof` a
 * forwarder would break), so destructuring `{ randomBytes }` at load time costs nothing.
 * Anything else read from it loads the builtin and comes from it.
 */
import { createRequire } from 'node:module';

export const DEVICE_LAZY_BUILTINS = ['https', 'tls', 'http2', 'zlib', 'crypto', 'readline', 'v8'] as const;

const hostRequire = createRequire(import.meta.url);

/**
 * The exports of `mod` a stand-in forwards without loading: its own enumerable plain
 * functions. Read from the Node that builds the bundle; a device on another Node that lacks
 * one gets a clear error when it is called, and a name it adds loads the builtin when read.
 */
export function forwardedFunctions(mod: object): string[] {
  return Object.entries(mod)
    .filter(([key, value]) => typeof value === 'function' && /^[a-z][A-Za-z0-9_$]*$/.test(key) && key !== 'default')
    .map(([key]) => key)
    .sort();
}

/**
 * The stand-in for builtin `name` as CommonJS (`module.exports`), for a dependency's
 * `require`. These builtins export plain objects, as the stand-in is. A property is reported
 * configurable, as a proxy of an empty object must (the builtins' own exports are).
 */
export function lazyBuiltinSource(name: string, functions: readonly string[]): string {
  return `${standInSource(name, functions)}\nmodule.exports = stand;`;
}

/**
 * The stand-in for builtin `name` as an ES module, for an `import` (ours or a dependency's):
 * the forwarders as named exports, the CommonJS stand-in as the default. A named import of
 * anything else fails the build (esbuild: no matching export), as it should: that value
 * cannot be had without loading the builtin at start-up.
 */
export function lazyBuiltinModuleSource(name: string, functions: readonly string[]): string {
  const named = functions.length ? `export const { ${functions.join(', ')} } = forwarders;\n` : '';
  return `${standInSource(name, functions)}\n${named}export default stand;`;
}

function standInSource(name: string, functions: readonly string[]): string {
  // An object whose prototype is the stand-in (follow-redirects builds its wrappers so)
  // gets its own property on set, as it would over the builtin's writable data property,
  // without loading the builtin.
  return `let real;
const load = () => (real ??= require(${JSON.stringify(`node:${name}`)}));
const forwarders = Object.create(null);
for (const key of ${JSON.stringify(functions)}) {
  forwarders[key] = { [key](...args) {
    const f = load()[key];
    if (typeof f !== 'function') throw new TypeError(\`node:${name} has no function \${key} on Node \${process.version}\`);
    return f.apply(real, args);
  } }[key];
}
const stand = new Proxy({}, {
  get: (_, key, receiver) => forwarders[key] ?? Reflect.get(load(), key, receiver === stand ? load() : receiver),
  set: (_, key, value, receiver) => receiver === stand ? Reflect.set(load(), key, value) : Reflect.defineProperty(receiver, key, { value, writable: true, enumerable: true, configurable: true }),
  has: (_, key) => key in load(),
  ownKeys: () => Reflect.ownKeys(load()),
  getOwnPropertyDescriptor: (_, key) => { const d = Reflect.getOwnPropertyDescriptor(load(), key); return d && { ...d, configurable: true }; },
  defineProperty: (_, key, d) => Reflect.defineProperty(load(), key, d),
  deleteProperty: (_, key) => Reflect.deleteProperty(load(), key),
  getPrototypeOf: () => Reflect.getPrototypeOf(load()),
});`;
}

const filter = new RegExp(`^(node:)?(${DEVICE_LAZY_BUILTINS.join('|')})$`);
const STAND_IN = 'device-lazy-builtin';
const STAND_IN_MODULE = 'device-lazy-builtin-module';

/**
 * esbuild plugin: a dependency's `require` of a DEVICE_LAZY_BUILTINS builtin gets the
 * CommonJS stand-in, any `import` of one the ES module stand-in. The stand-ins' own
 * `require` of the builtin is left to Node.
 */
export const lazyBuiltinsPlugin = {
  name: 'fleetlab-device-lazy-builtins',
  setup(build: { onResolve: Function; onLoad: Function }) {
    build.onResolve({ filter }, (args: { path: string; kind: string; importer: string }) => {
      const name = args.path.replace(/^node:/, '');
      if (args.kind === 'import-statement') return { path: name, namespace: STAND_IN_MODULE };
      if (args.kind === 'require-call' && args.importer.includes('/node_modules/')) return { path: name, namespace: STAND_IN };
      return undefined;
    });
    const load = (source: typeof lazyBuiltinSource) => (args: { path: string }) => ({
      contents: source(args.path, forwardedFunctions(hostRequire(`node:${args.path}`) as object)),
      loader: 'js',
    });
    build.onLoad({ filter: /.*/, namespace: STAND_IN }, load(lazyBuiltinSource));
    build.onLoad({ filter: /.*/, namespace: STAND_IN_MODULE }, load(lazyBuiltinModuleSource));
  },
};
