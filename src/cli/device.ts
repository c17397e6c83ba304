/**
 * The device's own command: only `fleetlab supervisor`. The QEMU image (and a board install)
 * bundles this entry, so the cloud, the simulator and their native addons stay off the device.
 */
import { Command } from 'commander';
import { addSupervisorCommand } from './supervisor-command.js';
import { pointUsageErrorsAtHelp } from './usage-hint.js';

const program = new Command('fleetlab').description('fleetlab device supervisor');
addSupervisorCommand(program);
pointUsageErrorsAtHelp(program);
await program.parseAsync(process.argv);
