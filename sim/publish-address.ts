/**
 * The address a simulated device's published ports bind to on an engine other devices share
 * (the harness machine's dockerd). On a board each device has its own address, so two devices
 * both publish 8080; on one dockerd they would both ask for 8080 on all interfaces, and the
 * second would fail. Each device gets a loopback address of its own instead: Linux routes all
 * of 127.0.0.0/8 to lo, so dockerd binds there with no setup, and the port keeps its number.
 *
 * Drawn at random from 127.64.0.0/10 (4 million addresses, away from 127.0.0.1 and the low
 * 127.0.x.y that /etc/hosts and resolvers use), never a .0 or .255: no claim to keep or to
 * clean, and two devices of any workers or concurrent runs meet with odds of about n²/8e6.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { writeFileAtomicSync } from '../src/atomic-file.js';

/** `random`: 3 bytes; the default draws them. */
export function devicePublishAddress(random: Buffer = randomBytes(3)): string {
  // 127.64.0.0/10: the second octet's top two bits are 01, the other 22 bits are the device's.
  const second = 64 | (random[0]! & 0x3f);
  const third = random[1]!;
  // 1..254: neither the network's nor the broadcast form, which some tools refuse or treat apart.
  const fourth = 1 + (random[2]! % 254);
  return `127.${second}.${third}.${fourth}`;
}

/**
 * The device's address, kept in its data directory: a device started again on the same data
 * (`fleetlab sim device --data-dir`) keeps it, as a board keeps its own, so the supervisor does
 * not see a changed setting and recreate every service that publishes a port.
 */
export function keptPublishAddress(dataDir: string, draw: () => string = devicePublishAddress): string {
  const file = join(dataDir, 'publish-address');
  let kept = '';
  try {
    kept = readFileSync(file, 'utf8').trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  if (isIP(kept)) return kept;
  const address = draw();
  writeFileAtomicSync(file, `${address}\n`, 0o644);
  return address;
}
