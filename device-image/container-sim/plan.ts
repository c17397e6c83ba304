/**
 * What each image of the container target is, before anything runs: the tags (hashes of their
 * inputs), the Dockerfiles, and for each layer the files its build context takes from where.
 * A checkout and an installed fleetlab differ only in the deps and app layers' plans.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import type { ToolSpec } from '../../src/tools.js';
import { sha256 } from '../recipe.js';
import { appInputsHash, depsInputsHash, deviceSources, productionPackageDirs, transpileSources, type LockPackage } from './source.js';
import { PACKAGE_APP_PATHS, layoutTopDirs, packageAppInputsHash, packageDepsInputsHash, packageLayout, productionClosure, type PackageLayout } from './package-closure.js';

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

/** The host tools a build runs (debootstrap only for the base, which is rebuilt rarely). */
export const buildTools = {
  debootstrap: { candidates: ['/usr/sbin/debootstrap', 'debootstrap'], debianPackage: 'debootstrap' },
  tar: { candidates: ['tar'], debianPackage: 'tar' },
} as const satisfies Record<string, ToolSpec>;

/** Tag of the base: the package list, suite, mirror and the Node binary's content. */
export function baseTag(inputs: { suite: string; mirror: string; packages: readonly string[]; nodeSha256: string }): string {
  return sha256('device-sim-base/1', inputs.suite, inputs.mirror, [...inputs.packages].sort().join(','), inputs.nodeSha256).slice(0, 16);
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

/** One image on top of another: its tag's hash, its Dockerfile and what its context takes from where. */
export interface LayerPlan {
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
export interface DepsPlan extends LayerPlan {
  app(depsRef: string): Promise<LayerPlan>;
}

export function checkoutDeps(repoRoot: string, baseRef: string): DepsPlan {
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

export function packageDeps(fleetlabDir: string, baseRef: string): DepsPlan {
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
