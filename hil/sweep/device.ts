/**
 * What a sweep needs of a device: the part of `fleetlab/test`'s `Device` it uses, so the
 * harness can hand a sweep its devices without this folder importing the harness.
 */
import type { ApiProtocol, Capability, CommandProtocol, DevicePaths, FilesProtocol } from '../../device-access/protocols.js';
import type { StateStatus } from '../lib/device-api.js';
import type { DeployedRelease, DeployOptions } from '../release/local-deploy.js';

/** The faults a sweep injects, as `fleetlab/test`'s `device.faults` gives them. */
export interface SweepFaults {
  partition(): Promise<void>;
  heal(): Promise<void>;
  restartEngine(): Promise<void>;
  fillDisk(): Promise<void>;
  freeDisk(): Promise<void>;
}

export interface SweepDevice {
  readonly target: string;
  readonly capabilities: ReadonlySet<Capability>;
  readonly api: ApiProtocol;
  readonly exec: CommandProtocol | undefined;
  readonly files: FilesProtocol | undefined;
  readonly paths: DevicePaths | undefined;
  deploy(composeFileOrDir: string, options?: DeployOptions): Promise<DeployedRelease>;
  status(): Promise<StateStatus>;
  powerCycle(): Promise<void>;
  killSupervisor(): Promise<void>;
  readonly faults: SweepFaults;
  waitForRelease(release: Pick<DeployedRelease, 'releaseId' | 'services'>, options?: { timeoutMs?: number }): Promise<void>;
}

/** A fresh device for each point (the target's own reset between spec files); the one before is retired by it. */
export interface DeviceSource {
  fresh(): Promise<SweepDevice>;
  /** Starts recording the device `fresh()` gave last, for its point's timeline; absent where nothing records. */
  record?(): PointRecording;
}

/** One point's device timeline, recorded from its start; the harness draws and keeps it (this folder draws nothing). */
export interface PointRecording {
  /** Ends the recording; with a failure (a broken point), keeps the page and resolves with where it is. Calls after the first do nothing. */
  finish(point: { readonly id: string; readonly failure?: { readonly at: number; readonly error: string } }): Promise<string | undefined>;
}
