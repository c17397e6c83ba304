/** `fleetlab test-images`: container images tests use where no registry is reachable. */
import type { Command } from 'commander';
import { action } from '../src/command/action.js';
import { fleetlabRoot } from '../src/package-root.js';
import { addOldSpelling } from './old-spelling.js';

export function addTestImagesCommands(program: Command): void {
  const images = program.command('test-images').description('Local container images for tests (no registry needed)');
  defineBuild(images.command('build'));
  defineBase(images.command('base'));
  defineDeviceSim(images.command('device-sim'));
  // The old spelling (`fleetlab images`), one letter away from the card's `fleetlab image`.
  addOldSpelling(program, 'images', 'test-images', {
    build: { now: 'build', define: defineBuild },
    base: { now: 'base', define: defineBase },
    'build-device': { now: 'device-sim', define: defineDeviceSim },
  });
}

function defineBuild(command: Command): Command {
  return command
    .description('Build the test images (fleetlab/test-app:1 and :2) from Debian\'s busybox-static with an engine import')
    .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
    .action(
      action(async (opts: { dockerSocket: string }) => {
        const { buildTestImages } = await import('../sim/images/test-images.js');
        const refs = await buildTestImages(opts.dockerSocket, (e) => console.error(`${e.image}: ${e.step}`));
        for (const ref of refs) console.log(ref);
      }),
    );
}

function defineBase(command: Command): Command {
  return command
    .description("Make fleetlab/busybox:latest (Debian trixie's busybox with every applet and the C library it links, CMD sh), a base image for your Dockerfiles where no registry is reachable; replaces one of an older recipe")
    .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
    .action(
      action(async (opts: { dockerSocket: string }) => {
        const { BASE_IMAGE, ensureBaseImage } = await import('../sim/images/base-image.js');
        const { cacheRoot } = await import('../device-image/tools.js');
        const imported = await ensureBaseImage(opts.dockerSocket, (e) => console.error(`${e.image}: ${e.step}`), { cacheDir: cacheRoot() });
        console.log(imported ? BASE_IMAGE : `${BASE_IMAGE} (already there)`);
      }),
    );
}

function defineDeviceSim(command: Command): Command {
  return command
    .description('Build the HIL container target\'s image fleetlab/device-sim:<hash> (debootstrap base, cached by its inputs, plus the compiled app)')
    .option('--docker-socket <path>', 'engine API socket', '/var/run/docker.sock')
    .option('--force', 'rebuild even when the tags exist', false)
    .action(
      action(async (opts: { dockerSocket: string; force: boolean }) => {
        const { buildDeviceImage } = await import('../device-image/container-sim/build.js');
        const repoRoot = fleetlabRoot(import.meta.url);
        const image = await buildDeviceImage({
          repoRoot,
          dockerSocket: opts.dockerSocket,
          force: opts.force,
          progress: (e) => console.error(`[${(e.elapsedMs / 1000).toFixed(1)} s] ${e.stage}: ${e.detail}`),
        });
        console.log(image.ref);
      }),
    );
}
