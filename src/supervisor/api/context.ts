/**
 * What the device API's routes use of a supervisor. The routes depend on this shape, not on
 * the Supervisor class, so the composition root can build the API without the two importing
 * each other; `Supervisor` implements it.
 */
import type { CloudLink } from '../adapters/cloud/cloud-link.js';
import type { Engine } from '../adapters/engine.js';
import type { HostPort, JournalPort } from '../adapters/ports.js';
import type { Blinker } from '../blink.js';
import type { SupervisorConfig } from '../config.js';
import type { LogBus } from '../log-bus.js';
import type { AppActions } from '../state/app-actions.js';
import type { ApiKeys } from '../state/keys.js';
import type { Logger, StateEngine } from '../state/state-engine.js';
import type { DeviceStore } from '../state/store.js';
import type { CheckedTarget } from '../../protocol/checked-target.js';
import type { SupervisorApi } from '../versions.js';

export interface SupervisorContext {
  readonly config: SupervisorConfig;
  readonly store: DeviceStore;
  readonly keys: ApiKeys;
  readonly engine: Engine;
  readonly state: StateEngine;
  readonly actions: AppActions;
  readonly host: HostPort;
  readonly journal: JournalPort;
  readonly blinker: Blinker;
  readonly logs: LogBus;
  readonly log: Logger;
  readonly version: string;
  /** The upstream version's endpoints and behaviours (the `supervisorVersion` setting). */
  readonly supervisorApi: SupervisorApi;
  readonly osVersion: string;
  readonly cloud: CloudLink | null;
  readonly uuid: string;
  readonly deviceName: string;
  readonly arch: string;
  /** The device's IP and MAC addresses, as `/v1/device` and the cloud report show them. */
  addresses(): { ip: string; mac: string };
  /** The device's wall clock, ms since the epoch (log times). */
  now(): number;
  localMode(): boolean;
  /** Takes a target the route checked (protocol/checked-target.ts): the supervisor does not parse it again. */
  setLocalTarget(target: CheckedTarget): Promise<void>;
  schedulePower(action: 'reboot' | 'poweroff', force: boolean): void;
  healthy(): Promise<{ ok: boolean; reason?: string }>;
}
