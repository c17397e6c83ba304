/**
 * `fleetlab/test`: what a device team's specs import. Documented in docs/spec-api.md; a name
 * not exported here is not part of the API.
 */
export { test, expect } from './fixtures.js';
export type { HilTestFixtures as Fixtures, HilWorkerFixtures as WorkerFixtures } from './fixtures.js';
export { defineConfig, type FleetlabConfig } from './config.js';
export { since } from './supervisor-version.js';
export { Device, type DeployOptions, type DeployedRelease, type DeviceSweepOptions, type Faults, type JournalOptions, type LedView, type PointResult, type SweepResult } from './device.js';
export type { DeviceApi, ProxyConfig, StateStatus, StatusContainer } from '../lib/device-api.js';
export type { ApiProtocol, Capability, CommandProtocol, FilesProtocol, HttpResponse, HttpStream, JournalEntryText, LedTransition, NetworkProtocol, PowerProtocol, RequestOptions } from '../../device-access/protocols.js';
export type { FleetCloud } from '../../sim/stack.js';
export type { FleetUnderTest, FleetOptions, FleetRelease, ConvergeOptions } from './fleet.js';
export type { FleetCounts } from '../../sim/fleet/fleet.js';
export type { StuckDevice } from '../../sim/fleet/unsettled.js';
export { pollUntil, scaled, sleep } from '../lib/wait.js';
export { loadCompose, parseCompose, type ComposeProject, type ComposeService } from '../release/compose.js';
