/**
 * Builds the local test images and imports the base image for team Dockerfiles once per run
 * (no registry is reachable), so no test file depends on another having imported them first.
 * Tests that need the engine fail with the engine's own error when dockerd is not running;
 * scripts/provision starts it.
 */
import { buildTestImages, ensureBaseImage } from '../sim/images/test-images.js';

export default async function setup(): Promise<void> {
  process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
  const socket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
  await buildTestImages(socket);
  await ensureBaseImage(socket);
}
