/**
 * Production LED adapter: one sysfs GPIO output driven with onoff. On a board the peer is the
 * kernel's GPIO sysfs; on a simulated device it is sim/gpio's tree bind-mounted at /sys/class.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Gpio } from 'onoff';
import { errorText, FleetlabError } from '../../errors.js';
import type { LedPort } from './ports.js';

/** A global GPIO number, or a line of a chip named by its label (docs/decisions.md item 11). */
export type LedGpio = number | { chip: string; offset: number };

export interface LedAdapterOptions {
  gpio: LedGpio;
  activeLow?: boolean;
  /**
   * Where the gpiochip directories are read to find a chip's base; default /sys/class/gpio.
   * onoff itself always uses /sys/class/gpio, so this only moves the lookup.
   */
  sysfsGpioDir?: string;
}

const defaultSysfsGpioDir = '/sys/class/gpio';

/** The `ledGpio` setting: `"<chip label>:<offset>"`, a global number, or empty for no LED. */
export function parseLedGpio(value: string): LedGpio | undefined {
  if (value === '') return undefined;
  if (/^[0-9]+$/.test(value)) return Number(value);
  const match = /^(.+):([0-9]+)$/.exec(value);
  if (!match) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `ledGpio must be "<chip label>:<offset>" or a GPIO number, got "${value}"`);
  return { chip: match[1]!, offset: Number(match[2]) };
}


function hostError(message: string, cause?: unknown): FleetlabError {
  return new FleetlabError('SUP_ERR_HOST', message, cause === undefined ? undefined : { cause });
}

async function readChips(sysfsGpioDir: string): Promise<GpioChip[]> {
  let names: string[];
  try {
    names = await readdir(sysfsGpioDir);
  } catch (err) {
    throw hostError(
      `GPIO sysfs is absent: ${sysfsGpioDir} cannot be read (${errorText(err)}); the kernel needs CONFIG_GPIO_SYSFS`,
      err,
    );
  }
  const chips: GpioChip[] = [];
  for (const name of names.filter((n) => n.startsWith('gpiochip')).sort()) {
    const dir = join(sysfsGpioDir, name);
    try {
      const [label, base, ngpio] = await Promise.all(
        ['label', 'base', 'ngpio'].map(async (file) => (await readFile(join(dir, file), 'utf8')).trim()),
      );
      chips.push({ label: label!, base: Number(base), ngpio: Number(ngpio) });
    } catch {
      // A chip going away between readdir and read is not ours to report.
    }
  }
  return chips;
}

/** A gpiochip as sysfs describes it. */
export interface GpioChip {
  readonly label: string;
  readonly base: number;
  readonly ngpio: number;
}

/**
 * The global sysfs number of the line: base + offset, the base read from the gpiochip whose
 * label matches. Bases moved (0 to 512 on a Raspberry Pi with kernel 6.6), so never assumed.
 * Pure: `where` names the chips' source in errors (the HIL board target reads them over SSH).
 */
export function gpioNumberFromChips(gpio: LedGpio, chips: readonly GpioChip[], where: string): number {
  if (typeof gpio === 'number') {
    if (!Number.isInteger(gpio) || gpio < 0) throw hostError(`LED GPIO number ${gpio} is not a non-negative integer`);
    return gpio;
  }
  const matches = chips.filter((c) => c.label === gpio.chip);
  if (matches.length === 0) {
    const labels = chips.map((c) => `${c.label} (base ${c.base})`).join(', ') || 'none';
    throw hostError(`LED GPIO chip "${gpio.chip}" not found in ${where}; chips present: ${labels}`);
  }
  if (matches.length > 1) {
    throw hostError(`LED GPIO chip label "${gpio.chip}" is ambiguous: bases ${matches.map((c) => c.base).join(', ')}`);
  }
  const chip = matches[0]!;
  if (!Number.isInteger(gpio.offset) || gpio.offset < 0 || gpio.offset >= chip.ngpio) {
    throw hostError(`LED GPIO offset ${gpio.offset} is outside chip "${chip.label}" (${chip.ngpio} lines)`);
  }
  return chip.base + gpio.offset;
}

/** The line's global number, reading the chips from `sysfsGpioDir` when it is named by label. */
export async function resolveGpioNumber(gpio: LedGpio, sysfsGpioDir = defaultSysfsGpioDir): Promise<number> {
  return gpioNumberFromChips(gpio, typeof gpio === 'number' ? [] : await readChips(sysfsGpioDir), sysfsGpioDir);
}

/** The LED on a sysfs GPIO line; the line is exported on first use, not at construction. */
export function createLedAdapter(options: LedAdapterOptions): LedPort {
  return new OnoffLed(options);
}

class OnoffLed implements LedPort {
  #line: Gpio | undefined;
  // Calls run one at a time so the lazy export happens once and writes land in call order.
  #queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly options: LedAdapterOptions) {}

  set(on: boolean): Promise<void> {
    return this.#enqueue(async () => {
      const line = this.#line ?? (await this.#open());
      try {
        await line.write(on ? 1 : 0);
      } catch (err) {
        throw hostError(`cannot drive the LED GPIO: ${errorText(err)}`, err);
      }
    });
  }

  close(): Promise<void> {
    return this.#enqueue(async () => {
      const line = this.#line;
      this.#line = undefined;
      if (!line) return;
      try {
        line.unexport();
      } catch (err) {
        throw hostError(`cannot release the LED GPIO: ${errorText(err)}`, err);
      }
    });
  }

  #enqueue<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(task);
    this.#queue = run.catch(() => {});
    return run;
  }

  async #open(): Promise<Gpio> {
    const number = await resolveGpioNumber(this.options.gpio, this.options.sysfsGpioDir);
    // Loaded here so that a supervisor without an LED never loads the native epoll addon.
    const { Gpio } = await import('onoff');
    if (!Gpio.accessible) {
      throw hostError('GPIO sysfs is absent or not writable: /sys/class/gpio/export cannot be opened for writing');
    }
    try {
      // onoff exports, then busy-waits for the new files, then sets active_low and direction.
      this.#line = new Gpio(number, 'out', 'none', { activeLow: this.options.activeLow ?? false });
    } catch (err) {
      throw hostError(`cannot export LED GPIO ${number}: ${errorText(err)}`, err);
    }
    return this.#line;
  }
}
