/**
 * A device the harness made, as a bundle `fleetlab replay` starts from: its store, containers,
 * lock files and volumes. A test device's volumes hold test data, so they are kept (up to a
 * size) though volumes are not redacted; the device's key stays out as in every capture.
 */
import type { DeviceUnderTest } from '../../device-access/protocols.js';
import { fleetlabVersion } from '../../src/package-root.js';
import { captureDevice } from './capture.js';

export async function captureTestDevice(device: Pick<DeviceUnderTest, 'api' | 'exec' | 'paths'>, out: string, o: { journalEntries: number; volumeBytes: number }): Promise<void> {
  const { identity } = device.api;
  await captureDevice({
    out,
    source: { kind: 'api', address: identity.url, ...(identity.uuid ? { uuid: identity.uuid } : {}) },
    api: device.api,
    key: identity.apiKey,
    ...(device.exec ? { exec: device.exec } : {}),
    ...(device.paths ? { paths: device.paths } : {}),
    redaction: 'default',
    journalEntries: o.journalEntries,
    volumeBytes: o.volumeBytes,
    fleetlab: fleetlabVersion(import.meta.url),
    force: true,
  });
}
