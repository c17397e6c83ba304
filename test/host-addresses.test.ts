/**
 * The device's addresses as `/v1/device` shows them: read from the host's interfaces, and
 * read again at most once a second (src/supervisor/host-addresses.ts).
 */
import { networkInterfaces } from 'node:os';
import { expect, it } from 'vitest';
import { cachedAddresses, hostAddresses } from '../src/supervisor/host-addresses.js';

it("shows this host's external IPv4 addresses, never loopback", () => {
  const { ip } = hostAddresses();
  const external = Object.values(networkInterfaces()).flat().filter((e) => e && !e.internal && e.family === 'IPv4').map((e) => e!.address);
  for (const address of ip ? ip.split(' ') : []) expect(external).toContain(address);
  expect(ip.split(' ')).not.toContain('127.0.0.1');
});

it('reads again only once maxAgeMs has passed', () => {
  let clock = 0;
  let reads = 0;
  const addresses = cachedAddresses(1_000, () => ({ ip: `10.0.0.${++reads}`, mac: '' }), () => clock);
  expect(addresses().ip).toBe('10.0.0.1');
  clock = 999;
  expect(addresses().ip).toBe('10.0.0.1');
  clock = 1_000;
  expect(addresses().ip).toBe('10.0.0.2');
  expect(addresses().ip).toBe('10.0.0.2');
  expect(reads).toBe(2);
});
