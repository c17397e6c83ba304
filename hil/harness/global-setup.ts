/**
 * The global setup of a device team's run: the harness's own (images each selected target
 * needs), plus the local base image `fleetlab/busybox:latest` when the app's Dockerfiles
 * build FROM it (no outside registry is reachable to pull a base from).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FullConfig } from '@playwright/test';
import { BASE_IMAGE, ensureBaseImage } from '../../sim/images/test-images.js';
import { prepareTargets } from '../global-setup.js';
import { loadCompose } from '../release/compose.js';

/** Whether any Dockerfile of the app builds FROM the local base image. */
function usesBaseImage(app: string): boolean {
  const project = loadCompose(app);
  return project.services.some((s) => {
    if (!s.build) return false;
    const dockerfile = join(s.build.context, s.build.dockerfile);
    return existsSync(dockerfile) && readFileSync(dockerfile, 'utf8').includes(BASE_IMAGE.split(':')[0]!);
  });
}

export default async function globalSetup(config: FullConfig): Promise<void> {
  await prepareTargets(config, { testImages: false });
  const app = config.projects.map((p) => (p.use as { app?: string }).app).find((a) => a !== undefined);
  if (app && usesBaseImage(app)) await ensureBaseImage(process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock');
}
