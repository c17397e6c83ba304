/**
 * Global setup for the `container` target: builds the device image once per run (cached by
 * its inputs: under a second when nothing changed) and hands its ref to the workers through
 * FLEETLAB_DEVICE_IMAGE, so they do not each build it; makes sure the test app images are on
 * the host's dockerd, where the device's containers run. Call it from the suite's global
 * setup when a selected project uses the container target.
 */
import { buildDeviceImage, type DeviceImage } from '../../device-image/container-sim/build.js';
import { ensureTestImages } from '../../sim/images/test-images.js';

export async function prepareContainerTarget(options: { dockerSocket?: string; log?: (line: string) => void } = {}): Promise<DeviceImage> {
  process.env.TESTCONTAINERS_RYUK_DISABLED ??= 'true';
  process.env.TESTCONTAINERS_HOST_OVERRIDE ??= 'localhost';
  const dockerSocket = options.dockerSocket ?? process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  // No repoRoot: the builder finds its own fleetlab, a checkout or the installed package
  // (a lockfile above an installed one is the team's, not fleetlab's).
  const image = await buildDeviceImage({
    dockerSocket,
    progress: (e) => log(`container target image [${(e.elapsedMs / 1000).toFixed(1)} s] ${e.stage}: ${e.detail}`),
  });
  await ensureTestImages(dockerSocket);
  process.env.FLEETLAB_DEVICE_IMAGE = image.ref;
  return image;
}
