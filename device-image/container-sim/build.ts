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
 * The tree comes from a checkout or an installed fleetlab (./source.ts); ./plan.ts says what
 * each layer is, ./base.ts and ./docker-build.ts make them. This module decides which layers
 * to rebuild and removes the images a rebuild replaces.
 */
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import Docker from 'dockerode';
import { FleetlabError, errorText } from '../../src/errors.js';
import { withBuildLock } from '../../src/build-lock.js';
import { fleetlabRoot } from '../../src/package-root.js';
import { sha256 } from '../recipe.js';
import { buildBase } from './base.js';
import { buildFromContext, imageExists, imageId, pruneOtherTags } from './docker-build.js';
import { BASE_PACKAGES, DEVICE_BASE_REPO, DEVICE_DEPS_REPO, DEVICE_IMAGE_REPO, baseTag, checkoutDeps, packageDeps } from './plan.js';
import { fleetlabSource } from './source.js';

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

export async function buildDeviceImage(options: DeviceImageOptions): Promise<DeviceImage> {
  const started = Date.now();
  const report = (stage: string, detail: string) => options.progress?.({ stage, detail, elapsedMs: Date.now() - started });
  return withBuildLock('fleetlab-device-image', report, () => buildLayers(options, started, report));
}

async function buildLayers(options: DeviceImageOptions, started: number, report: (stage: string, detail: string) => void): Promise<DeviceImage> {
  const source = fleetlabSource(options.repoRoot ?? fleetlabRoot(import.meta.url));
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
