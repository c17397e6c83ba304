/**
 * Builds the local test images and imports the base image for team Dockerfiles once per run
 * (no registry is reachable), so no test file depends on another having imported them first.
 * Tests that need the engine fail with the engine's own error when dockerd is not running;
 * scripts/provision starts it.
 *
 * It also holds the run to leaving nothing behind (hil/lib/run-leftovers.ts): each test file's
 * processes get a TMPDIR of their own in the run's directory (test/leftovers-setup.ts), and
 * the engine objects of the devices they start are followed. The teardown fails the run
 * naming every container, volume, network and directory of it still there, with the test
 * file that made it.
 */
import type { TestProject } from 'vitest/node';
import { cacheRoot } from '../device-image/tools.js';
import { ensureBaseImage } from '../sim/images/base-image.js';
import { buildTestImages } from '../sim/images/test-images.js';
import { startLeftoverCheck } from '../hil/lib/run-leftovers.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The run's directory, where each test file makes its TMPDIR. */
    fleetlabRunDir: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  process.env.TESTCONTAINERS_RYUK_DISABLED = 'true';
  const socket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
  const check = await startLeftoverCheck(socket);
  project.provide('fleetlabRunDir', check.runDir);
  await buildTestImages(socket);
  await ensureBaseImage(socket, undefined, { cacheDir: cacheRoot() });
  return async () => {
    try {
      await check.finish();
    } catch (err) {
      // Vitest prints a teardown's error but keeps the exit status the tests gave.
      process.exitCode = 1;
      throw err;
    }
  };
}
