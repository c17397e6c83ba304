/**
 * The `fleetlab` command: the top floor, which may import every room below it and which nothing
 * imports; bin/fleetlab.js only starts it. Each command group is a module of its own beside this
 * one. They reach the other rooms (hil, qemu, board, device-image, device-access, heavy sim
 * modules) only with `await import` inside an action: the container target's image holds only
 * cli/, src/ and sim/, and starting the CLI must stay cheap. Each subcommand parses its flags and
 * hands a plain options object to a library function; nothing here holds state.
 */
import { Command } from 'commander';
import { addSupervisorCommand } from '../src/supervisor/command.js';
import { pointUsageErrorsAtHelp } from '../src/command/usage-hint.js';
import { errorText } from '../src/errors.js';
import { requireNativeModules, type NativeModule } from '../src/native-modules.js';
import { addBoardCommands } from './board.js';
import { addCaptureCommands } from './capture.js';
import { addCardCommands } from './card.js';
import { addCloudCommands } from './cloud.js';
import { addHarnessCommands } from './harness.js';
import { addLabCommands } from './lab.js';
import { addQemuCommands } from './qemu.js';
import { addSimCommands } from './sim.js';
import { addSweepCommands } from './sweep.js';
import { addTestImagesCommands } from './test-images.js';

const program = new Command('fleetlab').description('Device supervisor, cloud API and HIL harness for Linux boards');

/**
 * The native addons each command loads, checked before it runs: an addon npm left unbuilt is
 * one sentence naming it and the fix, not a loader's list of binding paths. (`test` checks
 * what its target needs itself.)
 */
const NATIVE_NEEDS: Record<string, NativeModule[]> = {
  supervisor: ['epoll'],
  'sim device': ['epoll'],
  'sim stack': ['epoll', 'better-sqlite3'],
  cloud: ['better-sqlite3'],
  // The lease store of a lab file is SQLite unless it names PostgreSQL.
  'lab status': ['better-sqlite3'],
  'lab log': ['better-sqlite3'],
  'lab release': ['better-sqlite3'],
  'lab run': ['better-sqlite3'],
};
program.hook('preAction', (_root, command) => {
  const name = [command.parent?.parent ? command.parent.name() : '', command.name()].filter(Boolean).join(' ');
  const needs = NATIVE_NEEDS[name];
  if (!needs) return;
  try {
    requireNativeModules(needs);
  } catch (err) {
    console.error(`fleetlab: ${errorText(err)}`);
    process.exit(1);
  }
});

addSupervisorCommand(program);
// The order here is the order of `fleetlab --help`.
addSimCommands(program);
addCloudCommands(program);
addHarnessCommands(program);
addCaptureCommands(program);
addSweepCommands(program);
addTestImagesCommands(program);
addLabCommands(program);
addBoardCommands(program);
addCardCommands(program);
addQemuCommands(program);

pointUsageErrorsAtHelp(program);
await program.parseAsync(process.argv);
