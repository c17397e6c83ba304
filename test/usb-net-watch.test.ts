/**
 * The dead-USB-network watch of the emulated raspi3b (qemu/usb-net-watch.ts), on consoles
 * captured from real boots here: one whose usb-net never enumerated (SSH and the API silent
 * until the boot deadline) and a good one.
 */
import { mkdtemp, rm, writeFile, appendFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { usbNetConsole, watchUsbNet } from '../qemu/usb-net-watch.js';

const DEAD = `[   87.808252] hub 1-0:1.0: 1 port detected
[   88.232550] usb 1-1: new full-speed USB device number 2 using dwc2
[   88.259559] dwc2 3f980000.usb: Not connected
[   89.104130] usb 1-1: new full-speed USB device number 3 using dwc2
[   89.419622] dwc2 3f980000.usb: Not connected
[   89.716605] usb usb1-port1: attempt power cycle
[   89.945636] usb 1-1: new full-speed USB device number 4 using dwc2
[   90.558975] usb 1-1: new full-speed USB device number 5 using dwc2
[   90.766973] dwc2 3f980000.usb: Not connected
[  118.684113] Initializing XFRM netlink socket
`;

const GOOD = `[  116.724050] usb 1-1: new full-speed USB device number 2 using dwc2
[  117.241888] usb 1-1: Product: QEMU USB Hub
[  117.774795] usb 1-1.1: new full-speed USB device number 3 using dwc2
[  118.019817] usb 1-1.1: Product: RNDIS/QEMU USB Network Device
[  119.898280] cdc_ether 1-1.1:1.0 usb0: register 'cdc_ether' at usb-3f980000.usb-1.1, CDC Ethernet Device, 52:54:00:12:34:57
[  119.929937] usbcore: registered new interface driver cdc_ether
`;

describe('usbNetConsole', () => {
  it('reads a captured dead boot as retrying, a good one as registered, an early one as pending', () => {
    expect(usbNetConsole(DEAD)).toBe('retrying');
    expect(usbNetConsole(GOOD)).toBe('registered');
    expect(usbNetConsole(GOOD.split('\n').slice(0, 3).join('\n'))).toBe('pending');
    expect(usbNetConsole('')).toBe('pending');
  });

  it('a retry the kernel recovers from is registered, not dead', () => {
    expect(usbNetConsole(`${DEAD}${GOOD}`)).toBe('registered');
  });
});

describe('watchUsbNet', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-usbnet-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const waitFor = async (check: () => boolean, ms = 3000) => {
    for (let t = 0; t < ms && !check(); t += 20) await new Promise((r) => setTimeout(r, 20));
  };

  it('calls onDead once the console has shown the retry for the grace period', async () => {
    const log = join(dir, 'dead.log');
    await writeFile(log, '');
    const calls: string[] = [];
    const stop = watchUsbNet({ serialLog: log, graceMs: 200, pollMs: 20, onDead: (why) => calls.push(why) });
    try {
      await new Promise((r) => setTimeout(r, 100));
      expect(calls).toEqual([]);
      await appendFile(log, DEAD);
      await waitFor(() => calls.length > 0);
      expect(calls).toHaveLength(1);
      expect(calls[0]).toMatch(/USB network adapter did not enumerate/);
      await new Promise((r) => setTimeout(r, 300));
      expect(calls).toHaveLength(1);
    } finally {
      stop();
    }
  });

  it('leaves a board alone whose adapter registers within the grace period', async () => {
    const log = join(dir, 'recovers.log');
    await writeFile(log, DEAD);
    const calls: string[] = [];
    const stop = watchUsbNet({ serialLog: log, graceMs: 400, pollMs: 20, onDead: (why) => calls.push(why) });
    try {
      await new Promise((r) => setTimeout(r, 100));
      await appendFile(log, GOOD);
      await new Promise((r) => setTimeout(r, 600));
      expect(calls).toEqual([]);
    } finally {
      stop();
    }
  });
});
