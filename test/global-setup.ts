/**
 * Builds the local test images once per run (no registry is reachable). Tests that need the
 * engine fail with the engine's own error when dockerd is not running; scripts/provision
 * starts it.
 */
import { buildTestImages } from '../sim/images/test-images.js';

export default async function setup(): Promise<void> {
  process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
  await buildTestImages(process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock');
}
