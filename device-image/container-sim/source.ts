/**
 * Where the fleetlab tree in the image comes from (`fleetlabSource`), and what a checkout
 * gives it:
 * - a checkout (src/ and package-lock.json): the sources are transpiled file by file
 *   (TypeScript's transpileModule, no type check) into the build context rather than copied
 *   from dist/: the image then always runs what is in src/ and sim/, whether or not
 *   `npm run build` ran since, and a build of the whole project (tests, benches, other work in
 *   progress) is not on this path. `npx tsc` is the type check. The deps are the lockfile's
 *   production packages.
 * - the installed package (a device team's node_modules/fleetlab: dist/, no sources, no
 *   lockfile, no compiler): the compiled tree goes in as shipped, and the deps are what Node
 *   resolves from it (./package-closure.ts).
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { FleetlabError } from '../../src/errors.js';

/** Type only: the compiler is a devDependency, so the installed package must not load it. */
export type TypeScript = typeof import('typescript');

/** A fleetlab checkout (sources and lockfile) or the installed package (compiled tree only). */
export interface FleetlabSource {
  readonly kind: 'checkout' | 'package';
  readonly root: string;
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

/**
 * What the device runs, from source, without tests, benches or the harness: `fleetlab sim
 * device` loads cli/main.ts and then sim/, and sim/ imports only sim/ and src/ (the floor
 * rule); test/container-sim.test.ts checks that everything it loads is in here.
 */
const SOURCE_TREES = ['cli', 'src', 'sim'];

/** Every file below `dir`, at any depth; none when it does not exist. */
export function filesUnder(dir: string, out: string[] = []): string[] {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const full = join(dir, e.name);
    if (e.isDirectory()) filesUnder(full, out);
    else if (e.isFile()) out.push(full);
  }
  return out;
}

/** The TypeScript sources the image compiles, relative to the checkout, sorted. */
export function deviceSources(repoRoot: string): string[] {
  return SOURCE_TREES.flatMap((t) => filesUnder(join(repoRoot, t)))
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))
    .map((f) => relative(repoRoot, f))
    .sort();
}

export interface LockPackage {
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
 * Hash of the deps image: node_modules by the lockfile plus the native addons built here
 * (the rest of node_modules is what the lockfile says).
 */
export function depsInputsHash(repoRoot: string, baseRef: string, packageDirs: readonly string[]): string {
  const h = createHash('sha256');
  h.update(`device-sim-deps/1\0${baseRef}\0`).update(readFileSync(join(repoRoot, 'package-lock.json')));
  for (const dir of packageDirs) {
    for (const f of filesUnder(join(repoRoot, dir)).filter((p) => p.endsWith('.node')).sort()) h.update(`${relative(repoRoot, f)}\0`).update(readFileSync(f));
  }
  return h.digest('hex').slice(0, 16);
}

/** Hash of the app image: the sources, bin/ and package.json by content, and the compiler version. */
export function appInputsHash(repoRoot: string, depsRef: string, sources: readonly string[], ts: TypeScript): string {
  const h = createHash('sha256');
  h.update(`device-sim/3\0${depsRef}\0${ts.version}\0`);
  const files = [...sources, ...filesUnder(join(repoRoot, 'bin')).map((f) => relative(repoRoot, f)).sort(), 'package.json'];
  for (const f of files) h.update(`${f}\0`).update(readFileSync(join(repoRoot, f)));
  return h.digest('hex').slice(0, 16);
}

/** `src/x.ts` -> `<outDir>/dist/src/x.js`, ES2022 modules as tsconfig.json emits them. */
export async function transpileSources(ts: TypeScript, repoRoot: string, sources: readonly string[], outDir: string): Promise<void> {
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
