/**
 * The device's own command: only `fleetlab supervisor`. The QEMU image (and a board install)
 * bundles this entry, so the cloud, the simulator and their native addons stay off the device.
 */
import module from 'node:module';
import { Command } from 'commander';
import { addSupervisorCommand } from './supervisor-command.js';

// With NODE_COMPILE_CACHE set (the board's unit sets it), V8 keeps the compiled bundle on
// disk; Node writes it only at exit, and the supervisor runs until shutdown, so write it once
// the start is over: the next boot skips ~most of the compile time under emulation.
setTimeout(() => (module as { flushCompileCache?: () => void }).flushCompileCache?.(), 120_000).unref();

const program = new Command('fleetlab').description('fleetlab device supervisor');
addSupervisorCommand(program);
await program.parseAsync(process.argv);
