/** `fleetlab card build`: a card image to flash onto a Raspberry Pi. */
import type { Command } from 'commander';
import { action } from '../src/command/action.js';
import { fleetlabRoot } from '../src/package-root.js';
import { addOldSpelling } from './old-spelling.js';

export function addCardCommands(program: Command): void {
  const card = program.command('card').description('The card image a lab flashes onto a Raspberry Pi board');
  defineBuild(card.command('build'));
  // Its old spelling (`fleetlab image build`), one letter away from `fleetlab images`.
  addOldSpelling(program, 'image', 'card', { build: { now: 'build', define: defineBuild } });
}

function defineBuild(command: Command): Command {
  return command
    .description('Build a card image to flash (dd, or the Raspberry Pi Imager\'s "Use custom"): the Pi firmware, Debian 13 arm64 and the supervisor; fleetlab.txt on its boot partition sets the board up at first boot')
    .requiredOption('--board <model>', 'rpi4 (Pi 4 B, 400, CM4) or rpi3 (Pi 3 B/B+/A+, Zero 2 W)')
    .option('--out <file>', 'where to write the image (default ./fleetlab-<board>.img)')
    .option('--suite <name>', 'Debian suite (trixie: Debian 13; bookworm: Debian 12)', 'trixie')
    .option('--mirror <url>', 'Debian mirror', 'http://deb.debian.org/debian')
    .option('--force', 'rebuild even when cached', false)
    .action(
      action(async (opts: { board: string; out?: string; suite: string; mirror: string; force: boolean }) => {
        const { flashBoard } = await import('../device-image/card-plan.js');
        const board = flashBoard(opts.board);
        const { buildFlashImage, formatBuildProgress } = await import('../device-image/card-image.js');
        const result = await buildFlashImage({
          repoRoot: fleetlabRoot(import.meta.url),
          board,
          ...(opts.out ? { out: opts.out } : {}),
          suite: opts.suite,
          mirror: opts.mirror,
          force: opts.force,
          progress: (e) => console.error(formatBuildProgress(e)),
        });
        const gib = (result.manifest.layout.totalBytes / 1024 **3).toFixed(2);
        console.error(`${result.image}: ${gib} GiB, fleetlab ${result.manifest.version}, Debian ${result.manifest.suite} kernel ${result.manifest.kernelVersion}, firmware ${result.manifest.firmware}`);
        console.error('Edit fleetlab.txt on its boot partition (FLEETBOOT) after flashing: hostname, cloud_url + provisioning_key (or local mode), ssh_key.');
        console.error(`Flash: sudo dd if=${result.image} of=/dev/sdX bs=4M conv=fsync status=progress   (or Raspberry Pi Imager: Choose OS > Use custom)`);
        console.log(JSON.stringify({ event: 'built', image: result.image, board, key: result.manifest.key, sizeBytes: result.manifest.layout.totalBytes, built: result.built, totalMs: result.totalMs }));
      }),
    );
}
