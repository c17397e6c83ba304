/** `led` on a board: the line's sysfs value, sampled on the board over SSH. */
import { FleetlabError } from '../../../src/errors.js';
import { gpioNumberFromChips, type GpioChip } from '../../../src/supervisor/adapters/led.js';
import type { SshDevice, FollowedCommand } from '../../../device-access/ssh-device.js';
import type { BoardLedGpio } from '../../lab/board-config.js';
import { sleep } from '../../lib/wait.js';
import { lineSplitter, TransitionLog, type LedObserver } from './led-transition-log.js';

const SYSFS_GPIO = '/sys/class/gpio';
/** Between attempts to start the observer again while the board reboots or is unreachable. */
const RESTART_MS = 1000;
/** How long the observer's start waits for its first sample before going on without it. */
const FIRST_SAMPLE_MS = 15_000;

/** The line's global number from the chips read on the board (the supervisor's own rule). */
export function gpioNumberOnBoard(gpio: BoardLedGpio, chips: readonly GpioChip[]): number {
  return gpioNumberFromChips(gpio, chips, 'the board\'s /sys/class/gpio');
}

/** `label\tbase\tngpio` per gpiochip directory, read in one round trip. */
export async function readGpioChips(ssh: SshDevice, sysfsGpioDir = SYSFS_GPIO): Promise<GpioChip[]> {
  const script = 'for d in "$1"/gpiochip*; do [ -d "$d" ] || continue; printf "%s\\t%s\\t%s\\n" "$(cat "$d/label")" "$(cat "$d/base")" "$(cat "$d/ngpio")"; done';
  const r = await ssh.run(['sh', '-c', script, 'fleetlab-gpiochips', sysfsGpioDir]);
  if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `cannot read GPIO chips under ${sysfsGpioDir} on ${ssh.where}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  return r.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [label = '', base = '', ngpio = ''] = line.split('\t');
      return { label, base: Number(base), ngpio: Number(ngpio) };
    });
}

/**
 * The device side of the sysfs observer, in bash so that a sample forks nothing: `read` from
 * the value file and `read -t` on stdin as the pause are builtins. (A `sleep` per sample is
 * a fork and an exec: ~120 ms on the emulated Pi under TCG, and the 200 ms blink lost
 * toggles.) Only changes are written, the first sample always. The channel's stdin stays open
 * and silent, so the pause times out (status > 128) until the harness closes the channel:
 * then it reads EOF and the loop ends; a write into a closed channel ends it too.
 */
export const SYSFS_OBSERVER_LOOP = `last=; while :; do v=; read -r v 2>/dev/null < "$1"; v=\${v:--}; if [ "$v" != "$last" ]; then echo "$v" || exit 0; last=$v; fi; read -r -t "$2" _; [ $? -gt 128 ] || exit 0; done`;

/**
 * Samples the line's sysfs value on the device every `pollMs` in one bash process streaming
 * each change (SYSFS_OBSERVER_LOOP), and the harness stamps a change on arrival with its own
 * clock (one channel, not a round trip per sample). It dies with the connection at a reboot
 * and is started again once the board answers; what the line did while SSH was down is not
 * seen. Until the supervisor exports the line there is no value file and the loop prints `-`.
 */
export async function observeSysfsLed(ssh: SshDevice, gpio: BoardLedGpio, pollMs: number, sysfsGpioDir = SYSFS_GPIO): Promise<LedObserver> {
  const number = gpioNumberOnBoard(gpio, typeof gpio === 'number' ? [] : await readGpioChips(ssh, sysfsGpioDir));
  const valueFile = `${sysfsGpioDir}/gpio${number}/value`;
  const hasBash = await ssh.run(['bash', '-c', 'exit 0']);
  if (hasBash.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `the sysfs LED observer runs bash on the board, and ${ssh.where} has none (exit ${hasBash.exitCode}); install bash there or observe the LED with a lab command ("led.observe": {"command": ...})`);
  const log = new TransitionLog();
  const pause = (pollMs / 1000).toFixed(3);
  let stopped = false;
  let current: FollowedCommand | undefined;
  let sampling: () => void = () => undefined;
  const firstSample = new Promise<void>((r) => (sampling = r));
  const onSample = lineSplitter((v) => log.record(v));
  const running = (async () => {
    while (!stopped) {
      try {
        current = await ssh.follow(['bash', '-c', SYSFS_OBSERVER_LOOP, 'fleetlab-led', valueFile, pause], (chunk) => {
          sampling();
          onSample(chunk);
        });
        if (stopped) current.stop();
        await current.done;
      } catch {
        // Board rebooting or unreachable: try again below.
      }
      if (!stopped) await sleep(RESTART_MS);
    }
  })();
  // Observing means sampling: a transition right after start must not be missed.
  const startWait = setTimeout(() => sampling(), FIRST_SAMPLE_MS);
  await firstSample;
  clearTimeout(startWait);
  const line = typeof gpio === 'number' ? `gpio ${number}` : `gpio ${number}, ${gpio.chip} pin ${gpio.offset}`;
  return {
    line: `${line} (sysfs sampled every ${pollMs} ms over SSH)`,
    level: async () => {
      const r = await ssh.run(['cat', valueFile]);
      // Not exported yet: the supervisor has never driven it, so it is low.
      return r.exitCode === 0 && r.stdout.trim() === '1' ? 1 : 0;
    },
    transitions: async (sinceMs = 0) => log.since(sinceMs),
    stop: async () => {
      stopped = true;
      current?.stop();
      await running;
    },
  };
}
