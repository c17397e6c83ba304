/**
 * The device's own addresses as `/v1/device` and the cloud report show them: every external
 * IPv4 address and MAC, leaving out loopback and the engine's and VPN's virtual interfaces.
 */
import { networkInterfaces } from 'node:os';

const ignoredInterface = /^(lo|docker|veth|br-|supervisor0|balena|resin-vpn|tun|flvpn)/;

export function hostAddresses(): { ip: string; mac: string } {
  const ips: string[] = [];
  const macs = new Set<string>();
  for (const [name, entries] of Object.entries(networkInterfaces())) {
    if (ignoredInterface.test(name)) continue;
    for (const e of entries ?? []) {
      if (e.internal) continue;
      if (e.family === 'IPv4') ips.push(e.address);
      if (e.mac && e.mac !== '00:00:00:00:00:00') macs.add(e.mac.toUpperCase());
    }
  }
  return { ip: ips.join(' '), mac: [...macs].join(' ') };
}

/**
 * `read` (the host's interfaces by default) at most once per `maxAgeMs`. Node has no event
 * for an address change, and listing the interfaces is a tenth of what a `/v1/device`
 * answer costs; an address a second old is as good as the cloud report's own interval.
 */
export function cachedAddresses(maxAgeMs = 1_000, read: () => { ip: string; mac: string } = hostAddresses, now: () => number = () => performance.now()): () => { ip: string; mac: string } {
  let kept: { at: number; value: { ip: string; mac: string } } | null = null;
  return () => {
    const at = now();
    if (!kept || at - kept.at >= maxAgeMs) kept = { at, value: read() };
    return kept.value;
  };
}
