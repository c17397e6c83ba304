/**
 * The docker CLI against the device's engine: on the device through its shell, or where the
 * target says the engine is reached from (the container target's engine is the host's dockerd,
 * and its device image has no CLI).
 */
import type { ExecResult } from '../../device-access/protocols.js';
import type { SweepDevice } from './device.js';

/** Runs `docker <args>` against the device's engine; undefined when the device gives no shell for it. */
export function dockerOnDevice(device: SweepDevice, args: readonly string[]): Promise<ExecResult> | undefined {
  const shell = device.paths?.engineShell ?? device.exec;
  if (!shell) return undefined;
  const host = device.paths?.dockerHost ? ['-H', device.paths.dockerHost] : [];
  return shell.run(['docker', ...host, ...args]);
}
