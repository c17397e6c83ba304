/**
 * `power.reboot` through the device's OS, as a user of the board would: login1's Reboot on
 * its system bus, then the device seen going down and coming back.
 */
import { FleetlabError } from '../../../src/errors.js';
import type { ExecResult } from '../../../device-access/protocols.js';

const LOGIN1 = { dest: 'org.freedesktop.login1', path: '/org/freedesktop/login1', method: 'org.freedesktop.login1.Manager.Reboot' };

/** For the call over SSH: busctl answers at once, or the bus (or the session) is gone. */
export const LOGIN1_CALL_MS = 30_000;

/** On a board's (or the emulated board's) systemd, whose bus busctl finds by itself. */
export const LOGIN1_BUSCTL: readonly string[] = ['busctl', 'call', LOGIN1.dest, LOGIN1.path, 'org.freedesktop.login1.Manager', 'Reboot', 'b', 'false'];

/** On a simulated bus at `busAddress` (sim/dbus/), which busctl cannot be pointed at without systemd's libraries. */
export function login1DbusSend(busAddress: string): readonly string[] {
  return ['dbus-send', `--bus=${busAddress}`, '--print-reply', `--dest=${LOGIN1.dest}`, LOGIN1.path, LOGIN1.method, 'boolean:false'];
}

export interface Login1RebootOptions {
  /** Runs argv where the bus is: over SSH, in the device's container, on this host. */
  readonly run: (argv: readonly string[]) => Promise<ExecResult>;
  readonly argv: readonly string[];
  /** For the error: `on the board`. */
  readonly where?: string;
  /**
   * Whether a call that rejected still reached the device: a board going down can take the
   * SSH session with it before the answer comes back.
   */
  readonly callLost?: (err: unknown) => boolean;
  /**
   * Arms a watch for the device going down and returns its wait. Armed before the call, so a
   * watch that listens (the sim's reboot event) cannot miss a device quicker than the answer.
   */
  readonly watchDown: () => () => Promise<void>;
  /** Resolves when the device is back (its API answers, and whatever else the target needs). */
  readonly up: () => Promise<void>;
}

export function login1Reboot(options: Login1RebootOptions): () => Promise<void> {
  return async () => {
    const down = options.watchDown();
    let r: ExecResult | undefined;
    try {
      r = await options.run(options.argv);
    } catch (err) {
      if (!options.callLost?.(err)) throw err;
    }
    if (r && r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `login1 Reboot${options.where ? ` ${options.where}` : ''} failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
    await down();
    await options.up();
  };
}
