/**
 * raspi3b's network is QEMU's `usb-net` on the emulated DWC2 USB host. Now and then the
 * controller never enumerates it: the console shows the root port retrying ("usb usb1-port1:
 * attempt power cycle", "new full-speed USB device number 2..5", "dwc2 ...: Not connected")
 * and no cdc_ether interface ever registers, so the guest comes up whole but with no network:
 * SSH and the API stay silent until the boot deadline. A lab rack powers such a board on
 * again; so does the launcher (./boot.ts), when the console has shown the retry for a while
 * and the adapter has still not registered. The kernel's own retries come first: the grace
 * period leaves them their chance.
 */
import { readFileSync } from 'node:fs';

/** What a boot's console says about the USB network adapter so far. */
export type UsbNetConsole = 'registered' | 'retrying' | 'pending';

export function usbNetConsole(text: string): UsbNetConsole {
  if (/cdc_ether \S+ \S+: register 'cdc_ether'/.test(text)) return 'registered';
  if (/usb usb1-port1: (attempt power cycle|unable to enumerate USB device)/.test(text)) return 'retrying';
  return 'pending';
}

export interface UsbNetWatchOptions {
  readonly serialLog: string;
  /** Called once, when the adapter has been retrying for `graceMs` without registering. */
  readonly onDead: (why: string) => void;
  readonly graceMs?: number;
  readonly pollMs?: number;
  /** The watch ends by itself this long after it started (a boot is over by then). */
  readonly maxWatchMs?: number;
}

/** Watches one boot's console (QEMU truncates it at each start); returns the stop function. */
export function watchUsbNet(o: UsbNetWatchOptions): () => void {
  const graceMs = o.graceMs ?? 120_000;
  const started = Date.now();
  let retryingSince: number | undefined;
  const timer = setInterval(() => {
    let text = '';
    try {
      text = readFileSync(o.serialLog, 'utf8');
    } catch {
      // not written yet
    }
    const state = usbNetConsole(text);
    if (state === 'registered' || Date.now() - started > (o.maxWatchMs ?? 900_000)) return stop();
    if (state !== 'retrying') return;
    retryingSince ??= Date.now();
    if (Date.now() - retryingSince < graceMs) return;
    stop();
    o.onDead(`the USB network adapter did not enumerate (console: "usb usb1-port1: attempt power cycle", no cdc_ether for ${Math.round(graceMs / 1000)} s)`);
  }, o.pollMs ?? 2_000);
  timer.unref();
  function stop(): void {
    clearInterval(timer);
  }
  return stop;
}
