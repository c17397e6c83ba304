/**
 * The global setup of a device team's run: the harness's own (images each selected target
 * needs), plus the local base image `fleetlab/busybox:latest` when the app's Dockerfiles
 * build FROM it (no outside registry is reachable to pull a base from). The app's compose
 * file is read here first, so what fleetlab cannot run is said once, before any device
 * starts, and each key the config's `ignoreComposeKeys` leaves out is warned about at every run.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FullConfig } from '@playwright/test';
import { BASE_IMAGE, ensureBaseImage } from '../../sim/images/base-image.js';
import { cacheRoot } from '../../device-image/tools.js';
import { prepareTargets } from '../suite-setup.js';
import { ignoredWarning, loadCompose, type ComposeProject } from '../release/compose.js';

/** Whether any Dockerfile of the app builds FROM the local base image. */
function usesBaseImage(project: ComposeProject): boolean {
  return project.services.some((s) => {
    if (!s.build) return false;
    const dockerfile = join(s.build.context, s.build.dockerfile);
    return existsSync(dockerfile) && readFileSync(dockerfile, 'utf8').includes(BASE_IMAGE.split(':')[0]!);
  });
}

/** What a run's config says of its app (each project's `use`). */
export interface RunApp {
  app?: string;
  ignoreComposeKeys?: string[];
}

/** The run's compose project, and a warning for each key its ignore list leaves out and each entry that names none. */
export function readRunApp(use: RunApp & { app: string }): { project: ComposeProject; warnings: string[] } {
  const project = loadCompose(use.app, { ignore: use.ignoreComposeKeys ?? [] });
  return {
    project,
    warnings: [
      ...project.ignored.map((key) => ignoredWarning(project.file, key)),
      ...project.unusedIgnores.map((entry) => `ignoreComposeKeys: "${entry}" names no key fleetlab refuses in ${project.file}; remove it from fleetlab.config`),
    ],
  };
}

export default async function globalSetup(config: FullConfig): Promise<void> {
  await prepareTargets(config, { testImages: false });
  const use = config.projects.map((p) => p.use as RunApp).find((u) => u.app !== undefined);
  if (!use?.app) return;
  const { project, warnings } = readRunApp({ ...use, app: use.app });
  for (const line of warnings) console.warn(`fleetlab: warning: ${line}`);
  if (usesBaseImage(project)) await ensureBaseImage(process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock', undefined, { cacheDir: cacheRoot() });
}
