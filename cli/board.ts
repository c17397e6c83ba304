/** `fleetlab board`: the supervisor put on (or taken off) a real board over SSH. */
import { Option, type Command } from 'commander';
import { action } from '../src/command/action.js';
import { UsageError } from '../src/command/usage-hint.js';
import { fleetlabRoot } from '../src/package-root.js';

const identityOption = () => new Option('--identity <file>', 'the SSH private key the board accepts (default ~/.ssh/id_ed25519, id_ecdsa or id_rsa)');

export function addBoardCommands(program: Command): void {
  const board = program.command('board').description('A Raspberry Pi (or any Debian arm64 board) over SSH: put the supervisor on it as a systemd service, or take it off');
  board
    .command('install <ssh-url>')
    .description('Install Node 24, the supervisor, its config and systemd unit on the board at ssh://user@host[:port] (root, or a user with passwordless sudo), adding docker.io and redsocks with its apt when missing; idempotent; prints each step')
    .addOption(identityOption())
    .option('--upgrade', 'replace a supervisor of another build, keeping its data (device identity, cloud link)', false)
    .option('--led <line>', 'the LED line "<chip label>:<offset>" (or a GPIO number, or none); default the Raspberry Pi\'s ACT LED by model')
    .option('--no-apt', 'do not install missing packages with the board\'s apt: say what to run instead')
    .action(
      action(async (address: string, opts: { identity?: string; upgrade: boolean; led?: string; apt: boolean }) => {
        const { boardInstallCommand } = await import('../board/board-command.js');
        if (opts.led !== undefined && opts.led !== 'none') {
          const { parseLedGpio } = await import('../src/supervisor/adapters/led.js');
          try {
            parseLedGpio(opts.led);
          } catch {
            throw new UsageError(`--led must be "<chip label>:<offset>" (e.g. pinctrl-bcm2711:42), a GPIO number, or none; got ${JSON.stringify(opts.led)}`);
          }
        }
        await boardInstallCommand(address, {
          repoRoot: fleetlabRoot(import.meta.url),
          upgrade: opts.upgrade,
          apt: opts.apt,
          ...(opts.identity ? { identity: opts.identity } : {}),
          ...(opts.led !== undefined ? { led: opts.led } : {}),
          progress: (line) => console.error(`fleetlab board: ${line}`),
        });
      }),
    );
  board
    .command('uninstall <ssh-url>')
    .description('Remove everything fleetlab board install put on the board: the service, the supervisor\'s containers and data, the images that came after the install, the packages it added, dockerd\'s config as it was')
    .addOption(identityOption())
    .option('--keep-images', 'keep the engine images that came after the install', false)
    .option('--keep-packages', 'keep the Debian packages the install added', false)
    .action(
      action(async (address: string, opts: { identity?: string; keepImages: boolean; keepPackages: boolean }) => {
        const { boardUninstallCommand } = await import('../board/board-command.js');
        await boardUninstallCommand(address, {
          keepImages: opts.keepImages,
          keepPackages: opts.keepPackages,
          ...(opts.identity ? { identity: opts.identity } : {}),
          progress: (line) => console.error(`fleetlab board: ${line}`),
        });
      }),
    );
}
