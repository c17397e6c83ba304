/**
 * The device's own commands: `fleetlab supervisor`, and `first-boot` for a flashed card
 * (device-image/first-boot.ts). The QEMU image, a board install and a card image bundle this entry,
 * so the cloud, the simulator and their native addons stay off the device.
 */
import { Command } from 'commander';
import { addSupervisorCommand } from '../src/supervisor/command.js';
import { pointUsageErrorsAtHelp } from '../src/command/usage-hint.js';

const program = new Command('fleetlab').description('fleetlab device supervisor');
addSupervisorCommand(program);
program
  .command('first-boot')
  .description('On a flashed fleetlab card: grow the root partition once, apply fleetlab.txt from the boot partition')
  .action(async () => {
    const { firstBoot } = await import('./first-boot.js');
    const result = await firstBoot({ growRoot: true });
    if (result === 'failed') process.exitCode = 1;
  });
pointUsageErrorsAtHelp(program);
await program.parseAsync(process.argv);
