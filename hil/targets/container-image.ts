/**
 * The image of the HIL `container` target: the simulated device (supervisor plus simulated
 * peers) in a Debian root filesystem, built locally because no registry is reachable.
 *
 * Three images, each tagged by a hash of its inputs so an unchanged rebuild only inspects tags:
 * - base `fleetlab/device-sim-base:<hash>`: `debootstrap --variant=minbase` with the system
 *   tools the sim runs (dbus, journalctl, systemd-journal-remote, unshare/mount, busybox) plus
 *   this host's Node binary, imported through the Engine API. Slow (about a minute), rare.
 * - deps `fleetlab/device-sim-deps:<hash>`: `FROM <base>` + the production node_modules
 *   (native addons built on this host, which runs the same glibc), built through the Engine
 *   API from a tar context. Rebuilt when the lockfile (installed: a package's version) or an
 *   addon changes (about ten seconds: the context is ~110 MB).
 * - app `fleetlab/device-sim:<hash>`: `FROM <deps>` + the fleetlab CLI and sim compiled from
 *   the current sources, package.json and bin/. Seconds; what the target runs.
 *
 * Two places the fleetlab tree can come from (`fleetlabSource`):
 * - a checkout (src/ and package-lock.json): the sources are transpiled file by file
 *   (TypeScript's transpileModule, no type check) into the build context rather than copied
 *   from dist/: the image then always runs what is in src/ and sim/, whether or not
 *   `npm run build` ran since, and a build of the whole project (tests, benches, other work in
 *   progress) is not on this path. `npx tsc` is the type check. The deps are the lockfile's
 *   production packages.
 * - the installed package (a device team's node_modules/fleetlab: dist/, no sources, no
 *   lockfile, no compiler): the compiled tree goes in as shipped, and the deps are what Node
 *   resolves from it, found by walking node_modules as Node does (`productionClosure`) and
 *   laid out at the same relative paths so the image resolves them the same way.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, realpathSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, parse, posix, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import Docker from 'dockerode';
import { execa } from 'execa';
import { FleetlabError, errorText } from '../../src/errors.js';
import { findTool, missingToolError, type ToolSpec } from '../../src/tools.js';
import { withBuildLock } from '../../src/build-lock.js';
import { streamDone } from '../../src/engine-client/engine-stream.js';

/** Type only: the compiler is a devDependency, so the installed package must not load it. */
type TypeScript = typeof import('typescript');

export const DEVICE_IMAGE_REPO = 'fleetlab/device-sim';
export const DEVICE_BASE_REPO = 'fleetlab/device-sim-base';
export const DEVICE_DEPS_REPO = 'fleetlab/device-sim-deps';
/** Where the fleetlab tree sits in the image. */
export const APP_DIR = '/opt/fleetlab';
/** Label on both images: which of the two it is. */
export const IMAGE_KIND_LABEL = 'io.fleetlab.image';

/** Debian packages of the base: what `fleetlab sim device` runs besides Node. */
export const BASE_PACKAGES = [
  'dbus', // dbus-daemon (the private bus) and dbus-send (the harness's login1 calls)
  'systemd', // journalctl
  'systemd-journal-remote', // writes the journal files
  'util-linux', // unshare
  'mount', // mount --bind for the GPIO tree
  'busybox-static',
  'ca-certificates',
  'libstdc++6', // Node's C++ runtime
  'iproute2',
] as const;

const debootstrapTool: ToolSpec = { candidates: ['/usr/sbin/debootstrap', 'debootstrap'], debianPackage: 'debootstrap' };
const tarTool: ToolSpec = { candidates: ['tar'], debianPackage: 'tar' };

/** Dropped from the root filesystem: documentation, translations and the downloaded .debs. */
const TRIM_PATHS = ['var/cache/apt/archives', 'var/lib/apt/lists', 'usr/share/doc', 'usr/share/man', 'usr/share/info', 'usr/share/locale'];

export interface BuildEvent {
  /** `base`, `app`, `check`, `compile`, ... */
  readonly stage: string;
  readonly detail: string;
  /** Since the build started. */
  readonly elapsedMs: number;
}

export interface DeviceImageOptions {
  /**
   * The fleetlab whose tree goes into the image: a checkout or the installed package's
   * directory. Default: the one this module belongs to.
   */
  readonly repoRoot?: string;
  readonly dockerSocket?: string;
  readonly suite?: string;
  readonly mirror?: string;
  /** A Node 20 binary for Debian bookworm; default the one running this code. */
  readonly nodeBinary?: string;
  /** Where the root filesystem is assembled; default the OS temp dir. */
  readonly workDir?: string;
  /** Rebuild every layer even when its tag exists. */
  readonly force?: boolean;
  /**
   * Remove the other tags of each rebuilt image (default true). A HIL worker building
   * lazily passes false: another worker may be about to start the image it would remove.
   */
  readonly prune?: boolean;
  readonly progress?: (event: BuildEvent) => void;
}

export interface DeviceImage {
  /** `fleetlab/device-sim:<hash>`: what the target runs. */
  readonly ref: string;
  readonly baseRef: string;
  readonly depsRef: string;
  readonly builtBase: boolean;
  readonly builtDeps: boolean;
  readonly builtApp: boolean;
  readonly baseMs: number;
  readonly depsMs: number;
  readonly appMs: number;
  readonly totalMs: number;
}

// ---------------------------------------------------------------------------------------------
// Planning (pure)

function sha256(...parts: Array<string | Buffer>): string {
  const h = createHash('sha256');
  for (const p of parts) {
    h.update(typeof p === 'string' ? Buffer.from(p) : p);
    h.update('\0');
  }
  return h.digest('hex');
}

/** Tag of the base: the package list, suite, mirror and the Node binary's content. */
export function baseTag(inputs: { suite: string; mirror: string; packages: readonly string[]; nodeSha256: string }): string {
  return sha256('device-sim-base/1', inputs.suite, inputs.mirror, [...inputs.packages].sort().join(','), inputs.nodeSha256).slice(0, 16);
}

interface LockPackage {
  dev?: boolean;
}

/**
 * Top-level `node_modules/<name>` directories of the production dependency tree, from the
 * lockfile (v2/v3 `packages`); nested ones travel inside their parent. `present` filters out
 * optional packages for other platforms, which are in the lockfile but not on disk.
 */
export function productionPackageDirs(lock: { packages?: Record<string, LockPackage> }, present: (dir: string) => boolean): string[] {
  if (!lock.packages) throw new FleetlabError('SUP_ERR_INTERNAL', 'package-lock.json has no "packages" map (lockfile v2 or later is needed)');
  const dirs: string[] = [];
  for (const [key, pkg] of Object.entries(lock.packages)) {
    if (!key.startsWith('node_modules/') || pkg.dev) continue;
    if (key.indexOf('/node_modules/', 'node_modules/'.length - 1) >= 0) continue;
    if (present(key)) dirs.push(key);
  }
  return dirs.sort();
}

/**
 * The deps image: the production node_modules where the app resolves them. `topDirs`: the
 * context's top-level directories, each copied to the same name under APP_DIR.
 */
export function depsDockerfile(baseRef: string, inputsHash: string, topDirs: readonly string[] = ['node_modules']): string {
  return [`FROM ${baseRef}`, ...topDirs.map((d) => `COPY ${d} ${APP_DIR}/${d}`), `LABEL ${IMAGE_KIND_LABEL}=device-sim-deps io.fleetlab.inputs=${inputsHash}`, ''].join('\n');
}

/**
 * The app image: the compiled tree on top of the deps; starts the simulated device. `appDir`:
 * where fleetlab's package.json goes (an installed package sits below its project's root).
 */
export function appDockerfile(depsRef: string, inputsHash: string, appDir: string = APP_DIR): string {
  return [
    `FROM ${depsRef}`,
    `COPY package.json ${appDir}/package.json`,
    `COPY bin ${appDir}/bin`,
    `COPY dist ${appDir}/dist`,
    `WORKDIR ${appDir}`,
    `LABEL ${IMAGE_KIND_LABEL}=device-sim io.fleetlab.inputs=${inputsHash}`,
    `ENTRYPOINT ["node", "${appDir}/bin/fleetlab.js"]`,
    'CMD ["sim", "device", "--engine", "docker", "--docker-socket", "/var/run/docker.sock", "--port", "48484", "--local-mode", "--listen-address", "0.0.0.0"]',
    '',
  ].join('\n');
}

/** What the device runs: the CLI and the sim, from source (no tests, benches or harness). */
const SOURCE_TREES = ['cli', 'src', 'sim'];

function walk(dir: string, out: string[] = []): string[] {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const full = join(dir, e.name);
    if (e.isDirectory()) walk(full, out);
    else if (e.isFile()) out.push(full);
  }
  return out;
}

/** The TypeScript sources the image compiles, relative to the checkout, sorted. */
export function deviceSources(repoRoot: string): string[] {
  return SOURCE_TREES.flatMap((t) => walk(join(repoRoot, t)))
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))
    .map((f) => relative(repoRoot, f))
    .sort();
}

/**
 * Hash of the deps image: node_modules by the lockfile plus the native addons built here
 * (the rest of node_modules is what the lockfile says).
 */
function depsInputsHash(repoRoot: string, baseRef: string, packageDirs: readonly string[]): string {
  const h = createHash('sha256');
  h.update(`device-sim-deps/1\0${baseRef}\0`).update(readFileSync(join(repoRoot, 'package-lock.json')));
  for (const dir of packageDirs) {
    for (const f of walk(join(repoRoot, dir)).filter((p) => p.endsWith('.node')).sort()) h.update(`${relative(repoRoot, f)}\0`).update(readFileSync(f));
  }
  return h.digest('hex').slice(0, 16);
}

/** Hash of the app image: the sources, bin/ and package.json by content, and the compiler version. */
function appInputsHash(repoRoot: string, depsRef: string, sources: readonly string[], ts: TypeScript): string {
  const h = createHash('sha256');
  h.update(`device-sim/3\0${depsRef}\0${ts.version}\0`);
  const files = [...sources, ...walk(join(repoRoot, 'bin')).map((f) => relative(repoRoot, f)).sort(), 'package.json'];
  for (const f of files) h.update(`${f}\0`).update(readFileSync(join(repoRoot, f)));
  return h.digest('hex').slice(0, 16);
}

/** `src/x.ts` -> `<outDir>/dist/src/x.js`, ES2022 modules as tsconfig.json emits them. */
async function transpileSources(ts: TypeScript, repoRoot: string, sources: readonly string[], outDir: string): Promise<void> {
  for (const rel of sources) {
    const out = ts.transpileModule(readFileSync(join(repoRoot, rel), 'utf8'), {
      fileName: rel,
      reportDiagnostics: true,
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, esModuleInterop: true, sourceMap: false },
    });
    const errors = (out.diagnostics ?? []).filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (errors.length > 0) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `${rel} does not compile: ${errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, ' ')).join('; ')}`);
    }
    const target = join(outDir, 'dist', rel.replace(/\.ts$/, '.js'));
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, out.outputText);
  }
}

// ---------------------------------------------------------------------------------------------
// Where the tree comes from (pure but for reading the file system)

/** A fleetlab checkout (sources and lockfile) or the installed package (compiled tree only). */
export interface FleetlabSource {
  readonly kind: 'checkout' | 'package';
  readonly root: string;
}

/**
 * fleetlab's directory (the one holding its package.json) from the URL of a module in
 * hil/targets/: two levels up from the sources, three from their compiled copies in dist/.
 */
export function fleetlabDirOf(moduleUrl: string): string {
  const file = fileURLToPath(moduleUrl);
  return resolve(dirname(file), file.endsWith('.ts') ? '../..' : '../../..');
}

export function fleetlabSource(root: string): FleetlabSource {
  const dir = resolve(root);
  if (existsSync(join(dir, 'cli/main.ts')) && existsSync(join(dir, 'package-lock.json'))) return { kind: 'checkout', root: dir };
  if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'dist/cli/main.js')) && existsSync(join(dir, 'bin/fleetlab.js'))) return { kind: 'package', root: dir };
  throw new FleetlabError(
    'SUP_ERR_INTERNAL',
    `${dir} is neither a fleetlab checkout (cli/main.ts and package-lock.json) nor an installed fleetlab package (package.json, bin/fleetlab.js and dist/cli/main.js), ` +
      'so the container target has nothing to put in its image: reinstall fleetlab in your project (npm install fleetlab), or in a checkout run npm install',
  );
}

interface Manifest {
  name?: string;
  version?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

function readManifest(dir: string): Manifest {
  try {
    return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
  } catch (err) {
    throw new FleetlabError('SUP_ERR_INTERNAL', `cannot read ${join(dir, 'package.json')} (${errorText(err)}): reinstall the packages of your project (npm install)`);
  }
}

/** Node's NODE_MODULES_PATHS: `<dir>/node_modules` for `from` and each directory above it, skipping node_modules themselves. */
function nodeModulesPaths(from: string): string[] {
  const out: string[] = [];
  for (let dir = from; ; dir = dirname(dir)) {
    if (parse(dir).base !== 'node_modules') out.push(join(dir, 'node_modules'));
    if (dirname(dir) === dir) return out;
  }
}

/** Where Node finds package `name` imported from a module in `from`, or undefined. */
export function resolvePackageDir(from: string, name: string): string | undefined {
  return nodeModulesPaths(from)
    .map((d) => join(d, name))
    .find((p) => existsSync(join(p, 'package.json')));
}

export interface InstalledPackage {
  readonly name: string;
  readonly version: string;
  /** Where Node finds it (`<dir>/node_modules/<name>`); a symlink in a linked install. */
  readonly path: string;
  /** Its real path: Node resolves its own dependencies from here. */
  readonly realPath: string;
}

/**
 * The packages fleetlab at `packageDir` loads at run time, as Node would find them: its
 * `dependencies` and `optionalDependencies`, then theirs, recursively. An absent optional
 * dependency (another platform's, or one that failed to build) is skipped; so is an absent
 * peer dependency, which the package that declares it has to cope without, while a present
 * one is taken, since the importer loads it. Sorted by path.
 */
export function productionClosure(packageDir: string): InstalledPackage[] {
  const root = realpathSync(packageDir);
  const found = new Map<string, InstalledPackage>();
  const expanded = new Set<string>([root]);
  const pending: Array<{ from: string; by: string; manifest: Manifest }> = [{ from: root, by: 'fleetlab', manifest: readManifest(root) }];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const { from, by, manifest } = next;
    const wanted = [
      ...Object.keys(manifest.dependencies ?? {}).map((name) => ({ name, required: !(name in (manifest.optionalDependencies ?? {})) })),
      ...Object.keys(manifest.optionalDependencies ?? {}).map((name) => ({ name, required: false })),
      ...Object.keys(manifest.peerDependencies ?? {}).map((name) => ({ name, required: false })),
    ];
    for (const { name, required } of wanted) {
      const path = resolvePackageDir(from, name);
      if (!path) {
        if (!required) continue;
        throw new FleetlabError(
          'SUP_ERR_INTERNAL',
          `${name}, a dependency of ${by}, is not installed (looked in node_modules of ${from} and every directory above it): ` +
            'run npm install in your project (without --omit=prod), then run the container target again',
        );
      }
      if (found.has(path)) continue;
      const realPath = realpathSync(path);
      const pkg = readManifest(realPath);
      found.set(path, { name, version: pkg.version ?? '', path, realPath });
      if (expanded.has(realPath)) continue;
      expanded.add(realPath);
      pending.push({ from: realPath, by: `${name}@${pkg.version ?? '?'}`, manifest: pkg });
    }
  }
  return [...found.values()].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

function isWithin(parent: string, child: string): boolean {
  const rel = relative(parent, child);
  return rel !== '' && !rel.startsWith(`..${sep}`) && rel !== '..' && !rel.startsWith(sep);
}

function commonAncestor(dirs: readonly string[]): string {
  let common = dirs[0]!;
  for (const d of dirs) while (common !== d && !isWithin(common, d)) common = dirname(common);
  return common;
}

/** How an installed fleetlab and its closure sit in the image, all relative to `root`. */
export interface PackageLayout {
  /** The deepest directory holding fleetlab and every node_modules it resolves from: APP_DIR in the image. */
  readonly root: string;
  /** fleetlab's directory ('' when it is the root). */
  readonly fleetlab: string;
  /** What the deps image copies: package directories (and the links to them), nested ones left to their parent. */
  readonly paths: readonly string[];
}

export function packageLayout(fleetlabDir: string, closure: readonly InstalledPackage[]): PackageLayout {
  const self = realpathSync(fleetlabDir);
  // Resolution inside the image only works if every node_modules a package was found in keeps its place.
  const holders = closure.map((p) => dirname(p.name.startsWith('@') ? dirname(dirname(p.path)) : dirname(p.path)));
  const root = commonAncestor([self, ...holders, ...closure.map((p) => p.realPath)]);
  const dirs = new Set<string>();
  const links = new Set<string>();
  for (const p of closure) {
    if (p.realPath !== self) dirs.add(p.realPath);
    if (p.path !== p.realPath) links.add(p.path);
  }
  // tar takes a directory with all below it, so listing a nested one again would double the context.
  const covered = (p: string) => [...dirs].some((d) => isWithin(d, p));
  const paths = [...dirs, ...links].filter((p) => !covered(p)).map((p) => relative(root, p).split(sep).join('/'));
  return { root, fleetlab: relative(root, self).split(sep).join('/'), paths: [...new Set(paths)].sort() };
}

/** Top-level directories of the layout's paths: one COPY each in the deps Dockerfile. */
export function layoutTopDirs(layout: PackageLayout): string[] {
  return [...new Set(layout.paths.map((p) => p.split('/')[0]!))].sort();
}

/**
 * Hash of the deps image of an installed fleetlab: each package by place and version, and the
 * native addons built here by content (an install has no lockfile to stand for the rest).
 */
function packageDepsInputsHash(layout: PackageLayout, closure: readonly InstalledPackage[], baseRef: string): string {
  const h = createHash('sha256');
  h.update(`device-sim-deps/package/1\0${baseRef}\0${layout.paths.join('\n')}\0`);
  for (const p of closure) h.update(`${relative(layout.root, p.path)}\0${relative(layout.root, p.realPath)}\0${p.name}@${p.version}\0`);
  for (const rel of layout.paths) {
    for (const f of walk(join(layout.root, rel)).filter((p) => p.endsWith('.node')).sort()) h.update(`${relative(layout.root, f)}\0`).update(readFileSync(f));
  }
  return h.digest('hex').slice(0, 16);
}

/** What the app image of an installed fleetlab copies from it: the compiled tree as shipped. */
const PACKAGE_APP_PATHS = ['package.json', 'bin', 'dist'];

/** Hash of the app image of an installed fleetlab: its compiled tree by content, and where it sits. */
function packageAppInputsHash(layout: PackageLayout, depsRef: string): string {
  const h = createHash('sha256');
  h.update(`device-sim/package/1\0${depsRef}\0${layout.fleetlab}\0`);
  const dir = join(layout.root, layout.fleetlab);
  const files = [...walk(join(dir, 'bin')), ...walk(join(dir, 'dist'))].map((f) => relative(dir, f)).sort();
  for (const f of [...files, 'package.json']) h.update(`${f}\0`).update(readFileSync(join(dir, f)));
  return h.digest('hex').slice(0, 16);
}

// ---------------------------------------------------------------------------------------------
// Effects

async function imageId(docker: Docker, ref: string): Promise<string | undefined> {
  try {
    return (await docker.getImage(ref).inspect()).Id;
  } catch {
    return undefined;
  }
}

async function imageExists(docker: Docker, ref: string): Promise<boolean> {
  return (await imageId(docker, ref)) !== undefined;
}

/** Removes the other tags of `repo` (older builds); images still used by a container stay. */
async function pruneOtherTags(docker: Docker, repo: string, keep: string): Promise<void> {
  const images = await docker.listImages({ filters: { reference: [repo] } });
  for (const image of images) {
    for (const tag of image.RepoTags ?? []) {
      if (tag !== keep && tag.startsWith(`${repo}:`)) await docker.getImage(tag).remove().catch(() => undefined);
    }
  }
}

export async function buildDeviceImage(options: DeviceImageOptions): Promise<DeviceImage> {
  const started = Date.now();
  const report = (stage: string, detail: string) => options.progress?.({ stage, detail, elapsedMs: Date.now() - started });
  return withBuildLock('fleetlab-device-image', report, () => buildLayers(options, started, report));
}

async function buildLayers(options: DeviceImageOptions, started: number, report: (stage: string, detail: string) => void): Promise<DeviceImage> {
  const source = fleetlabSource(options.repoRoot ?? fleetlabDirOf(import.meta.url));
  const socketPath = options.dockerSocket ?? '/var/run/docker.sock';
  const docker = new Docker({ socketPath });
  try {
    await docker.ping();
  } catch (err) {
    throw new FleetlabError('SUP_ERR_ENGINE', `no container engine at ${socketPath} (${errorText(err)}): start dockerd (scripts/provision does)`);
  }
  const suite = options.suite ?? 'bookworm';
  const mirror = options.mirror ?? 'http://deb.debian.org/debian';
  const nodeBinary = options.nodeBinary ?? process.execPath;

  const baseRef = `${DEVICE_BASE_REPO}:${baseTag({ suite, mirror, packages: BASE_PACKAGES, nodeSha256: sha256(readFileSync(nodeBinary)) })}`;
  const baseStarted = Date.now();
  let builtBase = false;
  // Images a rebuild re-tags away from: removed at the end, app first, so the chain goes.
  const replaced: string[] = [];
  const remember = async (ref: string) => {
    const id = await imageId(docker, ref);
    if (id) replaced.unshift(id);
  };
  if (options.force || !(await imageExists(docker, baseRef))) {
    await remember(baseRef);
    await buildBase(docker, { baseRef, suite, mirror, nodeBinary, workDir: options.workDir ?? tmpdir(), report });
    builtBase = true;
    if (options.prune !== false) await pruneOtherTags(docker, DEVICE_BASE_REPO, baseRef);
  } else report('base', `${baseRef} exists`);
  const baseMs = Date.now() - baseStarted;

  const depsStarted = Date.now();
  const deps = source.kind === 'checkout' ? checkoutDeps(source.root, baseRef) : packageDeps(source.root, baseRef);
  const depsRef = `${DEVICE_DEPS_REPO}:${deps.hash}`;
  let builtDeps = false;
  if (options.force || builtBase || !(await imageExists(docker, depsRef))) {
    await remember(depsRef);
    report('deps', `building ${depsRef} FROM ${baseRef} (${deps.summary})`);
    await buildFromContext(docker, { ref: depsRef, dockerfile: deps.dockerfile, repoRoot: deps.contextRoot, repoPaths: deps.paths, report: (d) => report('deps', d) });
    builtDeps = true;
    if (options.prune !== false) await pruneOtherTags(docker, DEVICE_DEPS_REPO, depsRef);
  } else report('deps', `${depsRef} exists`);
  const depsMs = Date.now() - depsStarted;

  const appStarted = Date.now();
  const app = await deps.app(depsRef);
  const ref = `${DEVICE_IMAGE_REPO}:${app.hash}`;
  let builtApp = false;
  if (options.force || builtDeps || !(await imageExists(docker, ref))) {
    await remember(ref);
    report('app', `building ${ref} FROM ${depsRef}; ${app.summary}`);
    await buildFromContext(docker, {
      ref,
      dockerfile: app.dockerfile,
      repoRoot: app.contextRoot,
      repoPaths: app.paths,
      ...(app.prepare ? { prepare: app.prepare, contextPaths: ['dist'] } : {}),
      report: (d) => report('app', d),
    });
    builtApp = true;
    if (options.prune !== false) await pruneOtherTags(docker, DEVICE_IMAGE_REPO, ref);
  } else report('app', `${ref} exists`);
  const appMs = Date.now() - appStarted;
  const current = new Set(await Promise.all([baseRef, depsRef, ref].map((r) => imageId(docker, r))));
  // Still in use by a container (or identical to the new one): stays.
  for (const id of replaced) if (!current.has(id)) await docker.getImage(id).remove().catch(() => undefined);
  report('done', ref);
  return { ref, baseRef, depsRef, builtBase, builtDeps, builtApp, baseMs, depsMs, appMs, totalMs: Date.now() - started };
}

/** One image on top of another: its tag's hash, its Dockerfile and what its context takes from where. */
interface LayerPlan {
  readonly hash: string;
  readonly dockerfile: string;
  /** Directory `paths` are relative to. */
  readonly contextRoot: string;
  readonly paths: readonly string[];
  /** Writes dist/ into the staging dir (the checkout's transpiled sources). */
  readonly prepare?: (dir: string) => Promise<void>;
  readonly summary: string;
}

/** The deps layer, and the app layer that goes on it (known once the deps' tag is). */
interface DepsPlan extends LayerPlan {
  app(depsRef: string): Promise<LayerPlan>;
}

function checkoutDeps(repoRoot: string, baseRef: string): DepsPlan {
  const lock = JSON.parse(readFileSync(join(repoRoot, 'package-lock.json'), 'utf8')) as { packages?: Record<string, LockPackage> };
  const packageDirs = productionPackageDirs(lock, (dir) => existsSync(join(repoRoot, dir)));
  const hash = depsInputsHash(repoRoot, baseRef, packageDirs);
  return {
    hash,
    dockerfile: depsDockerfile(baseRef, hash),
    contextRoot: repoRoot,
    paths: packageDirs,
    summary: `${packageDirs.length} production packages`,
    app: (depsRef) => checkoutApp(repoRoot, depsRef),
  };
}

function packageDeps(fleetlabDir: string, baseRef: string): DepsPlan {
  const closure = productionClosure(fleetlabDir);
  const layout = packageLayout(fleetlabDir, closure);
  const hash = packageDepsInputsHash(layout, closure, baseRef);
  return {
    hash,
    dockerfile: depsDockerfile(baseRef, hash, layoutTopDirs(layout)),
    contextRoot: layout.root,
    paths: layout.paths,
    summary: `${closure.length} production packages installed under ${layout.root}`,
    app: async (depsRef) => packageApp(layout, depsRef),
  };
}

async function checkoutApp(repoRoot: string, depsRef: string): Promise<LayerPlan> {
  // Loaded here, not at the top: the installed package has no compiler and does not need one.
  const { default: ts } = await import('typescript');
  const sources = deviceSources(repoRoot);
  const hash = appInputsHash(repoRoot, depsRef, sources, ts);
  return {
    hash,
    dockerfile: appDockerfile(depsRef, hash),
    contextRoot: repoRoot,
    paths: ['package.json', 'bin'],
    prepare: (dir) => transpileSources(ts, repoRoot, sources, dir),
    summary: `transpiling ${sources.length} sources`,
  };
}

function packageApp(layout: PackageLayout, depsRef: string): LayerPlan {
  const hash = packageAppInputsHash(layout, depsRef);
  const appDir = layout.fleetlab ? posix.join(APP_DIR, layout.fleetlab) : APP_DIR;
  return {
    hash,
    dockerfile: appDockerfile(depsRef, hash, appDir),
    contextRoot: join(layout.root, layout.fleetlab),
    paths: PACKAGE_APP_PATHS,
    summary: `the compiled tree of ${join(layout.root, layout.fleetlab)} at ${appDir}`,
  };
}

async function buildBase(
  docker: Docker,
  o: { baseRef: string; suite: string; mirror: string; nodeBinary: string; workDir: string; report: (stage: string, detail: string) => void },
): Promise<void> {
  const debootstrap = findTool(debootstrapTool, `${process.env.PATH ?? ''}:/usr/sbin:/sbin`);
  if (!debootstrap) throw missingToolError(debootstrapTool);
  const tar = findTool(tarTool);
  if (!tar) throw missingToolError(tarTool);
  if (process.getuid?.() !== 0) {
    throw new FleetlabError('HIL_ERR_PERMISSION', `building ${o.baseRef} runs debootstrap, which needs root: run it once as root (sudo "$(command -v node)" node_modules/fleetlab/bin/fleetlab.js test-images device-sim: not npx under sudo, which leaves root's files in your npm cache), and later runs, as any user in the docker group, reuse the image`);
  }
  const dir = await mkdtemp(join(o.workDir, 'fleetlab-device-base-'));
  const rootfs = join(dir, 'rootfs');
  try {
    o.report('base', `debootstrap --variant=minbase ${o.suite} from ${o.mirror} (${BASE_PACKAGES.join(', ')})`);
    const run = execa(debootstrap, ['--variant=minbase', `--include=${BASE_PACKAGES.join(',')}`, o.suite, rootfs, o.mirror], { all: true, reject: false });
    const phases = new Set<string>();
    let tail: string[] = [];
    run.all?.on('data', (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (!line.trim()) continue;
        tail = [...tail.slice(-19), line];
        const verb = /^I: (\w+)/.exec(line)?.[1];
        // One line per phase: Retrieving/Validating alternate for every package.
        if (verb && !phases.has(verb)) {
          phases.add(verb);
          o.report('base', `debootstrap: ${line.slice(3)}`);
        }
      }
    });
    const result = await run;
    if (result.exitCode !== 0) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `debootstrap failed (exit ${result.exitCode}); its last lines:\n${tail.join('\n')}\n(log: ${join(rootfs, 'debootstrap/debootstrap.log')})`);
    }
    for (const p of TRIM_PATHS) await rm(join(rootfs, p), { recursive: true, force: true });
    await execa('install', ['-m', '0755', o.nodeBinary, join(rootfs, 'usr/local/bin/node')]);
    // The host's Node must run on the image's libraries: prove it before the import.
    const version = await execa('chroot', [rootfs, '/usr/local/bin/node', '--version'], { reject: false });
    if (version.exitCode !== 0) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `${o.nodeBinary} does not run in the ${o.suite} root filesystem: ${version.stderr || version.stdout}`);
    }
    o.report('base', `node ${version.stdout.trim()} runs in the root filesystem; importing into the engine`);
    const [repo, tag] = o.baseRef.split(':') as [string, string];
    const tarball = execa(tar, ['-C', rootfs, '--numeric-owner', '--exclude=./dev/*', '--exclude=./proc/*', '--exclude=./sys/*', '-cf', '-', '.'], { buffer: false });
    const stream = await docker.importImage(tarball.stdout!, {
      repo,
      tag,
      changes: ['ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'WORKDIR /', 'CMD ["/bin/bash"]'],
    });
    await streamDone(docker, stream, { what: `importing ${o.baseRef}` });
    await tarball;
    o.report('base', `${o.baseRef} imported`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * `docker build` through the Engine API from a tar context streamed by tar: the Dockerfile
 * and what `prepare` writes (`contextPaths`) from a staging dir, `repoPaths` from the checkout.
 */
async function buildFromContext(
  docker: Docker,
  o: {
    ref: string;
    dockerfile: string;
    repoRoot: string;
    repoPaths: readonly string[];
    prepare?: (dir: string) => Promise<void>;
    contextPaths?: readonly string[];
    report: (detail: string) => void;
  },
): Promise<void> {
  const tar = findTool(tarTool);
  if (!tar) throw missingToolError(tarTool);
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-device-ctx-'));
  try {
    await writeFile(join(dir, 'Dockerfile'), o.dockerfile);
    await o.prepare?.(dir);
    const listFile = join(dir, '.files');
    await writeFile(listFile, `${o.repoPaths.join('\0')}\0`);
    // Compiler intermediates of the native addons are not needed at run time.
    const context = execa(
      tar,
      ['-cf', '-', '--exclude=obj.target', '--exclude=.deps', '-C', dir, 'Dockerfile', ...(o.contextPaths ?? []), '-C', o.repoRoot, '--null', '-T', listFile],
      { buffer: false },
    );
    const stream = await docker.buildImage(context.stdout! as unknown as NodeJS.ReadableStream, { t: o.ref, rm: true, forcerm: true });
    await streamDone(docker, stream, { what: `building ${o.ref}`, onEvent: (e) => {
      const line = e.stream?.trim();
      if (line?.startsWith('Step ')) o.report(line);
    } });
    await context;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
