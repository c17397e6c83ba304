/**
 * Runs once before the suite, for the targets of the selected projects: the sim target on
 * dockerd needs the local test images (no registry is reachable); the container target
 * builds its device image once and hands it to the workers (targets/container-setup.ts); the
 * qemu target builds (or finds cached) its board image (device-image/build.ts).
 * The global teardown (suite-teardown.ts) removes what a crashed container run left.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { FullConfig } from '@playwright/test';
import { errorText } from '../src/errors.js';
import { makeOwnerDir, startLeftoverCheck } from './lib/run-leftovers.js';
import { ensureBaseImage } from '../sim/images/base-image.js';
import { buildTestImages } from '../sim/images/test-images.js';
import { cacheRoot } from '../device-image/tools.js';
import { fleetlabRoot } from '../src/package-root.js';
import { defaultEngine } from './targets/sim.js';
import { LAB_RUN_VARIABLE } from './lab/flake-attribution.js';

/**
 * Targets of the projects this run selected. Playwright hands global setup every project of
 * the config, so the selection is read from the command line (`--project=a`, `--project a b`);
 * without one, every project runs.
 */
export function selectedTargets(config: FullConfig, argv: readonly string[] = process.argv): string[] {
  const names = new Set(config.projects.map((p) => p.name));
  const chosen: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg.startsWith('--project=')) chosen.push(arg.slice('--project='.length));
    else if (arg === '--project') for (let j = i + 1; j < argv.length && !argv[j]!.startsWith('-') && names.has(argv[j]!); j++) chosen.push(argv[j]!);
  }
  const projects = chosen.length ? config.projects.filter((p) => chosen.includes(p.name)) : config.projects;
  return [...new Set(projects.map((p) => (p.use as { target?: string }).target ?? p.name))];
}

/**
 * Also holds the run to leaving nothing behind (hil/lib/run-leftovers.ts) where it shares the
 * machine's dockerd: the workers' TMPDIR is a directory of the run's, the engine objects of
 * the devices they start are followed, and the teardown this returns fails the run naming
 * every container, volume, network and directory of it still there.
 */
export default async function globalSetup(config: FullConfig): Promise<(() => Promise<void>) | void> {
  const dockerSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
  // Only the sim and container targets put devices on the machine's dockerd; a run on QEMU or
  // lab boards alone (whose devices have engines of their own) may have no dockerd to follow.
  const onMachineEngine = selectedTargets(config).some((t) => t === 'sim' || t === 'container');
  if (!onMachineEngine || !existsSync(dockerSocket)) return prepareTargets(config, { testImages: true });
  const check = await startLeftoverCheck(dockerSocket);
  // Set before the workers start, which inherit it.
  process.env.TMPDIR = makeOwnerDir(check.runDir, 'the HIL run');
  try {
    await prepareTargets(config, { testImages: true });
  } catch (err) {
    // The setup's own error says what went wrong; what it left is still removed, and named.
    await check.finish().catch((left: unknown) => console.error(`fleetlab: ${errorText(left)}`));
    throw err;
  }
  return () => check.finish();
}

/**
 * What the selected targets need before any worker starts. `testImages`: fleetlab's own
 * test-app images, which our specs deploy on the sim target; a team's run builds its own.
 */
export async function prepareTargets(config: FullConfig, options: { testImages: boolean }): Promise<void> {
  await prepareTargetsNamed(selectedTargets(config), options);
}

/** What the named targets need before a device of theirs starts (images, the base image); `fleetlab sweep` starts its own. */
export async function prepareTargetsNamed(targets: readonly string[], options: { testImages: boolean }): Promise<void> {
  process.env.TESTCONTAINERS_RYUK_DISABLED ??= 'true';
  // Every worker's attempts on lab boards are this run's: a retry finds where its test failed.
  if (targets.includes('board')) process.env[LAB_RUN_VARIABLE] ??= randomUUID();
  const dockerSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
  if (targets.includes('sim') && defaultEngine() === 'docker' && options.testImages) await buildTestImages(dockerSocket);
  // The release spec's app builds FROM it on the engine the sim and container devices share.
  if (options.testImages && ((targets.includes('sim') && defaultEngine() === 'docker') || targets.includes('container'))) await ensureBaseImage(dockerSocket, undefined, { cacheDir: cacheRoot() });
  if (targets.includes('qemu') && !process.env.FLEETLAB_QEMU_IMAGE_DIR && !process.env.FLEETLAB_QEMU_FLASH_IMAGE) {
    // Built (or found cached) once here, not in a worker's first test: a cold build takes minutes.
    const { buildImage, formatBuildProgress } = await import('../device-image/build.js');
    const { image } = await buildImage({
      repoRoot: fleetlabRoot(import.meta.url),
      ...(process.env.FLEETLAB_QEMU_SUITE ? { suite: process.env.FLEETLAB_QEMU_SUITE } : {}),
      progress: (e) => process.stderr.write(`qemu image ${formatBuildProgress(e)}\n`),
    });
    process.env.FLEETLAB_QEMU_IMAGE_DIR = image.dir;
  }
  if (targets.includes('container')) {
    const { prepareContainerTarget } = await import('./targets/container-setup.js');
    await prepareContainerTarget({ dockerSocket });
  }
}
