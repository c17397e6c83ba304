/**
 * A board target config (./board-config.ts) for a running QEMU board: the proof that
 * the `board` target works is the same specs passing against the emulated Pi over SSH.
 */
import { shellQuote } from '../../src/shell-quote.js';
import type { ReadyInfo } from '../../qemu/boot.js';
import { LED_LINES } from '../../device-image/recipe.js';

/** `cli` is how to run this fleetlab CLI (argv before the subcommand), for the power switch. */
export function boardConfigFor(ready: ReadyInfo, cli: readonly string[], bootDir?: string): Record<string, unknown> {
  const line = LED_LINES[ready.machine];
  return {
    // A card image keeps config.txt on its boot partition; the emulated Pi's image under GUEST.bootDir (the target's default).
    ...(bootDir ? { hostPaths: { bootConfig: `${bootDir}/config.txt`, proxyConfigDir: `${bootDir}/system-proxy` } } : {}),
    host: '127.0.0.1',
    sshPort: ready.sshPort,
    user: 'root',
    privateKey: ready.sshKey,
    apiUrl: ready.apiUrl,
    // Observed the way a lab without a logic analyser does it: the line's sysfs value over SSH.
    led: { gpio: `${line.chip}:${line.offset}`, observe: 'sysfs' },
    // TCG: the same deadlines as the qemu target.
    timeScale: ready.machine === 'raspi3b' ? 8 : 4,
    power: { cycle: shellQuote([...cli, 'qemu', 'power', 'cycle', '--qmp', ready.qmpSocket]) },
    // The console's pseudo-terminal (qemu boot --serial-pty), read as a lab reads a board's USB serial adapter.
    ...(ready.serialPty ? { serial: ready.serialPty } : {}),
  };
}
