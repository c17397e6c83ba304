/**
 * What a HIL target is to the fixtures: a driver that starts a device and says which of the
 * device protocols (device-access/protocols.ts) it provides.
 */
import type { Capability, DeviceUnderTest } from '../../device-access/protocols.js';
import type { AttemptLabel, TestAttempt } from '../lab/flake-attribution.js';

export type { AttemptLabel, TestAttempt };

/** What every driver's `start` accepts, whatever its own options add. */
export interface TargetStartOptions {
  /**
   * Register the device to this cloud's fleet instead of local mode; the target's `network`
   * protocol then cuts and heals the device's path to it.
   */
  readonly cloud?: { readonly url: string; readonly provisioningKey: string };
  /** Start the device in the state this bundle captured (`fleetlab replay`); only a driver that `startsFromBundle`. */
  readonly bundle?: string;
  /** The upstream supervisor version X.Y.Z its supervisor answers as (checked by the fixtures); absent: fleetlab's own. */
  readonly supervisorVersion?: string;
}

/** A way to reach a device. `provides` is checked against the protocols it returns at start. */
export interface TargetDriver<Options = unknown> {
  readonly name: string;
  readonly provides: readonly Capability[];
  /** Whether `start` takes `bundle`: a device in a captured state. */
  readonly startsFromBundle?: boolean;
  /**
   * Worker-level setup that may wait a long time, outside any test's timeout: the board target
   * waiting in a lab's queue for a board of its own. Called once, before the worker's first device.
   */
  prepare?(): Promise<void>;
  /** Starts (or connects to) the device; tears down what it started if it never becomes ready. */
  start(options: Options): Promise<DeviceUnderTest>;
  /**
   * Releases what the driver keeps between devices (the qemu target's board, booted once per
   * worker). Called when the worker's last device has closed.
   */
  dispose?(): Promise<void>;
  /**
   * Told how each test that started a device ended, skipped tests apart (the board target in a
   * lab keeps it against the board); a label for the test's report, if the attempts say one.
   */
  attemptEnded?(attempt: TestAttempt): Promise<AttemptLabel | undefined>;
}
