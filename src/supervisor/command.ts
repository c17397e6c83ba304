/**
 * `fleetlab supervisor`: shared by the full CLI and the device entry (./device.ts), which is
 * what a board runs, bundled without the cloud, the sim or the harness.
 */
import module from 'node:module';
import { Option, type Command } from 'commander';
import { describeSettings, flagName, loadConfig, settings, type SupervisorConfig } from './config.js';
import { action } from '../command/action.js';

export function addSupervisorCommand(program: Command): void {
  const supervisor = program
    .command('supervisor')
    .description('Run the device supervisor (the device API on port 48484)')
    .option('--config <file>', 'JSON config file with any of the settings below')
    .addHelpText('after', `\nSettings (flag, environment variable, default, meaning):\n${describeSettings()}\n\nPrecedence: flag > environment > config file > default.`);
  for (const s of settings) {
    const flag = s.kind === 'boolean' ? `${flagName(s.key)} [bool]` : `${flagName(s.key)} <value>`;
    supervisor.addOption(new Option(flag, s.description).hideHelp());
  }
  supervisor.action(
    action(async (opts: Record<string, unknown>) => {
      const flags: Partial<Record<keyof SupervisorConfig, unknown>> = {};
      for (const s of settings) if (opts[s.key] !== undefined) flags[s.key] = opts[s.key] === true ? 'true' : opts[s.key];
      const config = loadConfig({ file: opts.config as string | undefined, env: process.env, flags });
      const { runSupervisor } = await import('./main.js');
      const { stopped } = await runSupervisor(config);
      // With NODE_COMPILE_CACHE set (the QEMU board's unit sets it), V8 keeps compiled code on
      // disk, but Node writes it only at exit; write it now that the start has compiled what
      // starting needs, so the next start skips that (most of a minute under emulation).
      (module as { flushCompileCache?: () => void }).flushCompileCache?.();
      await stopped;
    }),
  );
}
