/**
 * Reads a GPIO output level of the emulated board from outside the guest: the LED line the
 * supervisor blinks, observed the way a logic probe on a real board would, without trusting
 * anything running in the guest. QEMU has no QMP command for GPIO state, so the level comes
 * from the controller's level register through the monitor's `xp` (physical memory read;
 * reading these registers has no side effects on either controller).
 */
import { FleetlabError, errorText } from '../src/errors.js';
import type { HmpRunner } from './qmp.js';

export type MachineKind = 'raspi3b' | 'virt';

export interface GpioRegister {
  /** Physical address of the 32-bit register that holds the line's level. */
  address: number;
  /** Bit of that register for the line. */
  bit: number;
}

/**
 * Where a line's level lives. raspi3b: BCM2835 GPLEV0 (0x3f200034) for GPIO 0-31 and GPLEV1
 * for 32-53. virt: the PL061 at 0x09030000; its data register is address-masked (bits [9:2]
 * of the offset select which lines a read returns), so offset 0x3fc reads all 8 lines.
 */
export function gpioRegister(machine: MachineKind, line: number): GpioRegister {
  if (!Number.isInteger(line) || line < 0) {
    throw new FleetlabError('SUP_ERR_BAD_REQUEST', `GPIO line must be a non-negative integer, got ${line}`);
  }
  if (machine === 'raspi3b') {
    if (line > 53) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `raspi3b has GPIO 0-53, got ${line}`);
    return line < 32 ? { address: 0x3f200034, bit: line } : { address: 0x3f200038, bit: line - 32 };
  }
  if (line > 7) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `the virt PL061 has lines 0-7, got ${line}`);
  return { address: 0x09030000 + 0x3fc, bit: line };
}

/** The monitor command that reads one 32-bit word at a physical address. */
export function xpCommand(address: number): string {
  return `xp /1wx 0x${address.toString(16)}`;
}

/**
 * Parses the output of `xp /1wx ADDR` (`000000003f200034: 0x00020000`) into the word.
 * When `address` is given, the line must be for that address. Anything else (`Cannot access
 * memory`, `unknown command`) is an error quoting what the monitor said: HMP reports
 * failures as ordinary text, not as QMP errors.
 */
export function parseXpWord(output: string, address?: number): number {
  const match = /^\s*([0-9a-fA-F]+):\s+0x([0-9a-fA-F]{1,8})\s*$/m.exec(output);
  if (!match) {
    throw new FleetlabError('SUP_ERR_HOST', `unexpected monitor output for xp: ${JSON.stringify(output.trim())}`);
  }
  const at = Number.parseInt(match[1]!, 16);
  if (address !== undefined && at !== address) {
    throw new FleetlabError(
      'SUP_ERR_HOST',
      `xp answered for 0x${at.toString(16)}, expected 0x${address.toString(16)}: ${JSON.stringify(output.trim())}`,
    );
  }
  return Number.parseInt(match[2]!, 16);
}

export interface GpioTransition {
  /** Host time of the sample that saw the new value, epoch ms. */
  at: number;
  value: 0 | 1;
}

export interface GpioProbeOptions {
  monitor: HmpRunner;
  machine: MachineKind;
  line: number;
  /** Transitions kept; the oldest are dropped past it so a forgotten sampler cannot grow without bound. */
  maxTransitions?: number;
  now?: () => number;
}

export class GpioProbe {
  /** Why sampling stopped on its own (QMP gone, unexpected monitor output); undefined while healthy. */
  lastError: Error | undefined;
  /** Transitions dropped because the cap was reached. */
  dropped = 0;

  private readonly monitor: HmpRunner;
  private readonly register: GpioRegister;
  private readonly maxTransitions: number;
  private readonly now: () => number;
  private readonly recorded: GpioTransition[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** Bumped by start/stop so a sample already in flight from an old run records nothing. */
  private generation = 0;
  private running = false;
  /** Last value seen in the current run; undefined forces the run's first sample to be recorded. */
  private lastSample: 0 | 1 | undefined;

  constructor(options: GpioProbeOptions) {
    this.monitor = options.monitor;
    this.register = gpioRegister(options.machine, options.line);
    this.maxTransitions = options.maxTransitions ?? 10_000;
    this.now = options.now ?? Date.now;
  }

  get sampling(): boolean {
    return this.running;
  }

  async level(): Promise<0 | 1> {
    const out = await this.monitor.hmp(xpCommand(this.register.address));
    const word = parseXpWord(out, this.register.address);
    return ((word >>> this.register.bit) & 1) as 0 | 1;
  }

  /**
   * Samples every intervalMs and records each change, the first sample included so a reader
   * knows the level the window started with. Samples never overlap: the next one is scheduled
   * when the previous read returns. A guest reset needs nothing special (the register just
   * reads the reset level); a failed read stops sampling and is kept in lastError.
   */
  startSampling(intervalMs: number): void {
    if (!(intervalMs > 0)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `sampling interval must be > 0 ms, got ${intervalMs}`);
    this.stop();
    this.lastError = undefined;
    this.lastSample = undefined;
    this.running = true;
    const generation = ++this.generation;
    const tick = async () => {
      try {
        const value = await this.level();
        if (generation !== this.generation) return;
        this.record(value);
        this.timer = setTimeout(() => void tick(), intervalMs);
      } catch (err) {
        if (generation !== this.generation) return;
        this.lastError = err instanceof Error ? err : new Error(errorText(err));
        this.running = false;
      }
    };
    void tick();
  }

  stop(): void {
    this.generation++;
    this.running = false;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Transitions at or after sinceMs (all when omitted), oldest first. */
  transitions(sinceMs = 0): GpioTransition[] {
    return this.recorded.filter((t) => t.at >= sinceMs);
  }

  private record(value: 0 | 1): void {
    if (this.lastSample === value) return;
    this.lastSample = value;
    this.recorded.push({ at: this.now(), value });
    if (this.recorded.length > this.maxTransitions) {
      const excess = this.recorded.length - this.maxTransitions;
      this.recorded.splice(0, excess);
      this.dropped += excess;
    }
  }
}
