/**
 * The supervisor network of a device on an engine other devices share (the harness machine's
 * dockerd): balena's fixed `supervisor0` on 10.114.104.0/25 would be one network for them all.
 *
 * Each device gets a name of its own, and its subnet is left to the engine: dockerd hands out
 * subnets from its address pools one create at a time, so two devices, whichever worker or
 * container or machine run started them, never get overlapping ones, with no claim of ours to
 * keep or to clean. The claim is the network itself: it carries the device's label, so it goes
 * with the device's other networks, at its stop or when a killed run's leftovers are removed
 * (device-leftovers.ts). Each one takes one of dockerd's pools (default-address-pools in
 * daemon.json; about 30 by default) while the device lives.
 */
import { randomBytes } from 'node:crypto';

export interface SharedEngineNetwork {
  supervisorNetwork: string;
  supervisorSubnet: '';
}

export function sharedEngineNetwork(): SharedEngineNetwork {
  // Longer than an interface name, so the bridge is dockerd's br-<id>, which the device's own address list leaves out (host-addresses.ts).
  return { supervisorNetwork: `fleetlab-supervisor-${randomBytes(4).toString('hex')}`, supervisorSubnet: '' };
}

/** The same as supervisor command-line flags. */
export function sharedEngineNetworkArgs(network: SharedEngineNetwork): string[] {
  return ['--supervisor-network', network.supervisorNetwork, '--supervisor-subnet', network.supervisorSubnet];
}
