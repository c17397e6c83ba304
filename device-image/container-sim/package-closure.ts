/**
 * The production packages of an installed fleetlab (a device team's node_modules/fleetlab,
 * which has no lockfile): what Node resolves from it, found by walking node_modules as Node
 * does, and laid out in the image at the same relative paths so it resolves them the same way.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join, parse, relative, sep } from 'node:path';
import { FleetlabError, errorText } from '../../src/errors.js';
import { filesUnder } from './source.js';

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
export function packageDepsInputsHash(layout: PackageLayout, closure: readonly InstalledPackage[], baseRef: string): string {
  const h = createHash('sha256');
  h.update(`device-sim-deps/package/1\0${baseRef}\0${layout.paths.join('\n')}\0`);
  for (const p of closure) h.update(`${relative(layout.root, p.path)}\0${relative(layout.root, p.realPath)}\0${p.name}@${p.version}\0`);
  for (const rel of layout.paths) {
    for (const f of filesUnder(join(layout.root, rel)).filter((p) => p.endsWith('.node')).sort()) h.update(`${relative(layout.root, f)}\0`).update(readFileSync(f));
  }
  return h.digest('hex').slice(0, 16);
}

/** What the app image of an installed fleetlab copies from it: the compiled tree as shipped. */
export const PACKAGE_APP_PATHS = ['package.json', 'bin', 'dist'];

/** Hash of the app image of an installed fleetlab: its compiled tree by content, and where it sits. */
export function packageAppInputsHash(layout: PackageLayout, depsRef: string): string {
  const h = createHash('sha256');
  h.update(`device-sim/package/1\0${depsRef}\0${layout.fleetlab}\0`);
  const dir = join(layout.root, layout.fleetlab);
  const files = [...filesUnder(join(dir, 'bin')), ...filesUnder(join(dir, 'dist'))].map((f) => relative(dir, f)).sort();
  for (const f of [...files, 'package.json']) h.update(`${f}\0`).update(readFileSync(join(dir, f)));
  return h.digest('hex').slice(0, 16);
}
