/**
 * Declared bindings, checked at load (labgrid `Driver.bindings`): what a driver says it
 * provides must be there on the device it returns, or the run stops naming the gap before
 * any spec runs against a half-built device.
 */
import { FleetlabError } from '../../src/errors.js';
import type { Capability, DeviceUnderTest } from '../../device-access/protocols.js';
import type { TargetDriver } from './target-driver.js';

/** The protocol member (and method) that backs each capability. */
const BACKING: Record<Capability, (d: DeviceUnderTest) => boolean> = {
  api: (d) => typeof d.api?.request === 'function' && typeof d.api?.stream === 'function',
  exec: (d) => typeof d.exec?.run === 'function',
  led: (d) => typeof d.led?.transitions === 'function' && typeof d.led?.level === 'function',
  'power.reboot': (d) => typeof d.power?.reboot === 'function',
  'power.cycle': (d) => typeof d.power?.cycle === 'function',
  'power.cut': (d) => typeof d.power?.off === 'function' && typeof d.power?.on === 'function',
  network: (d) => typeof d.network?.partition === 'function' && typeof d.network?.heal === 'function',
  'network.registry': (d) => typeof d.network?.partition === 'function' && typeof d.network?.heal === 'function',
  'engine.restart': (d) => typeof d.engine?.restart === 'function',
  'disk.fill': (d) => typeof d.disk?.fill === 'function' && typeof d.disk?.free === 'function',
  journal: (d) => typeof d.journal?.entries === 'function',
  files: (d) => typeof d.files?.read === 'function' && typeof d.files?.write === 'function',
  'files.volumes': (d) => typeof d.files?.volumePath === 'function',
  images: (d) => typeof d.images?.prepare === 'function',
  ports: (d) => typeof d.ports?.published === 'function',
  'supervisor.kill': (d) => typeof d.supervisor?.kill === 'function',
};

/** Throws an error naming every capability `driver` declares but `device` lacks. */
export function checkBindings(driver: TargetDriver, device: DeviceUnderTest): void {
  const missing = driver.provides.filter((cap) => !device.capabilities.has(cap) || !BACKING[cap](device));
  if (missing.length) {
    throw new FleetlabError('HIL_ERR_CAPABILITY', `target ${driver.name} declares ${missing.map((c) => `"${c}"`).join(', ')} in provides, but the device it started lacks ${missing.length === 1 ? 'it' : 'them'}`);
  }
}
