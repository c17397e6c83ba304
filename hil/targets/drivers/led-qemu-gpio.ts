/**
 * `led` on the emulated board: the GPIO controller's level register, sampled through the QEMU
 * monitor from outside the guest (qemu/gpio-probe.ts): what the pin does, not what the guest
 * says. A probe lives as long as its QMP connection, so the line's history spans the probes
 * of one board's QEMU processes.
 */
import { GpioProbe, type GpioTransition } from '../../../qemu/gpio-probe.js';
import type { HmpRunner } from '../../../qemu/qmp.js';
import type { MachineKind } from '../../../qemu/qemu-argv.js';
import { LED_LINES } from '../../../device-image/recipe.js';
import type { LedProtocol } from '../../../device-access/protocols.js';

const SAMPLE_MS = 10;
/** Transitions kept of earlier QEMU processes: a board up for a whole run blinks a lot. */
const HISTORY = 10_000;

export class QemuGpioLed {
  #probe: GpioProbe | undefined;
  #history: GpioTransition[] = [];

  constructor(private readonly machine: MachineKind) {}

  /**
   * A board booted or restored is a new device: the line's history is the earlier one's. Its
   * drop when that QEMU ended, if a blink was still running, came after the new file's start
   * and showed as the first change of the new device's LED (a spec saw 0, 1, 0, 1).
   */
  forget(): void {
    this.#history = [];
  }

  /** Sampling through `monitor` (a new QEMU process's), unless a probe already samples. */
  follow(monitor: HmpRunner): void {
    if (this.#probe?.sampling) return;
    this.retire();
    this.#probe = new GpioProbe({ monitor, machine: this.machine, line: LED_LINES[this.machine].offset });
    this.#probe.startSampling(SAMPLE_MS);
  }

  /** The probe's QEMU is ending: what it saw joins the history. */
  retire(): void {
    if (!this.#probe) return;
    this.#probe.stop();
    this.#history.push(...this.#probe.transitions(0));
    this.#probe = undefined;
    // No power, no level: the line drops with QEMU (the monitor cannot say so once it is gone).
    if (this.#history.at(-1)?.value === 1) this.#history.push({ at: Date.now(), value: 0 });
    this.#history = this.#history.slice(-HISTORY);
  }

  /**
   * The line's changes since `sinceMs`, across QEMU processes. Each probe records its first
   * sample, which is the level the line already had (off at power-on, or as a restored board
   * left it), not a change: kept, a spec file started from a saved board saw its LED go off.
   */
  transitions(sinceMs: number): GpioTransition[] {
    let level: 0 | 1 = 0;
    const changes: GpioTransition[] = [];
    for (const t of [...this.#history, ...(this.#probe?.transitions(0) ?? [])]) {
      if (t.value === level) continue;
      level = t.value;
      changes.push(t);
    }
    return changes.filter((t) => t.at >= sinceMs);
  }

  /** The protocol a device of this board offers; `off` says the board's power is cut. */
  protocol(off: () => boolean): LedProtocol {
    const line = LED_LINES[this.machine];
    return {
      line: `${line.chip} pin ${line.offset}, read from the emulated ${this.machine === 'raspi3b' ? 'BCM2835 GPLEV0' : 'PL061 data'} register through the QEMU monitor every ${SAMPLE_MS} ms`,
      level: async () => (off() || !this.#probe ? 0 : this.#probe.level()),
      transitions: async (sinceMs = 0) => this.transitions(sinceMs),
    };
  }
}
