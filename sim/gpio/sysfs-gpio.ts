/**
 * Simulated GPIO peer: a sysfs-shaped tree (`<dir>/class/gpio/...`) that the unmodified onoff
 * adapter drives once `<dir>/class` is bind-mounted over `/sys/class` (see ./namespace.ts).
 *
 * The kernel side is emulated by inotify watchers (fs.watch): a write to `export` makes
 * `gpioN/` appear, a write to `unexport` removes it, and writes to `gpioN/value` become
 * transitions of the simulated line. Because inotify is inode-based, the watchers see writes
 * made through the bind mount in another mount namespace.
 *
 * Limits, inherent to plain files standing in for sysfs attributes:
 * - inotify merges identical queued events, so two writes to one `value` file that land
 *   before the watcher runs show up as one (only the final level is seen). Fine for an LED
 *   toggled every few hundred ms, not for bit-banging.
 * - Writes cannot fail: an export outside every chip's range is ignored (the client's wait
 *   for `gpioN/value` then times out, as a kernel EINVAL would also make it fail).
 * - The sim never writes a file a client may be writing concurrently, so writing `high`/`low`
 *   to `direction` does not drive the line, and a write to `active_low` alone flips the
 *   simulated level (level = value XOR active_low; the kernel would keep the pin). onoff sets
 *   active_low right after export and the adapter writes `value` next, so an active-low LED
 *   shows one brief extra edge at export.
 * - The mirror of the other /sys/class entries is a snapshot taken at start.
 */
import { mkdirSync, readFileSync, renameSync, rmSync, watch, writeFileSync, type FSWatcher } from 'node:fs';
import { mkdir, mkdtemp, readdir, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { FleetlabError } from '../../src/errors.js';

export interface GpioChipSpec {
  label: string;
  base: number;
  ngpio: number;
}

export interface GpioTransition {
  gpio: number;
  /** Physical line level after the change (the `value` file XOR `active_low`). */
  value: 0 | 1;
  /** When the sim saw the write, ms since the epoch (performance.timeOrigin-based). */
  at: number;
}

export interface SysfsGpioOptions {
  /** Directory that receives `class/`; the caller owns it and removes it. */
  dir: string;
  /** Default: one `pinctrl-bcm2835` chip at base 512 with 54 lines (Raspberry Pi, kernel 6.6+). */
  chips?: GpioChipSpec[];
  /** The real class directory mirrored next to `gpio`; default `/sys/class`. */
  realClassDir?: string;
}

export interface SysfsGpio {
  /** `<dir>/class`: bind-mount this over `/sys/class`. */
  readonly classDir: string;
  /** `<dir>/class/gpio`. */
  readonly gpioDir: string;
  /** Transitions seen so far, oldest first; only those of `gpio` when given. */
  transitions(gpio?: number): GpioTransition[];
  /** Calls `cb` for every transition from now on; returns the unsubscribe function. */
  onTransition(cb: (t: GpioTransition) => void): () => void;
  /** Current physical level of the line (0 for a line never driven). */
  value(gpio: number): 0 | 1;
  /** Numbers currently exported. */
  exported(): number[];
  clearTransitions(): void;
  /** Stops the watchers; the tree stays on disk. */
  close(): Promise<void>;
}

export const defaultGpioChips: readonly GpioChipSpec[] = [{ label: 'pinctrl-bcm2835', base: 512, ngpio: 54 }];

/** Builds the tree and starts emulating the kernel. */
export async function startSysfsGpio(options: SysfsGpioOptions): Promise<SysfsGpio> {
  const chips = options.chips ?? defaultGpioChips;
  checkChips(chips);
  const dir = resolve(options.dir);
  const classDir = join(dir, 'class');
  const gpioDir = join(classDir, 'gpio');
  await mkdir(gpioDir, { recursive: true });
  await mirrorClasses(options.realClassDir ?? '/sys/class', classDir);
  await writeFile(join(gpioDir, 'export'), '');
  await writeFile(join(gpioDir, 'unexport'), '');
  for (const chip of chips) {
    const chipDir = join(gpioDir, `gpiochip${chip.base}`);
    await mkdir(chipDir, { recursive: true });
    await writeFile(join(chipDir, 'base'), `${chip.base}\n`);
    await writeFile(join(chipDir, 'label'), `${chip.label}\n`);
    await writeFile(join(chipDir, 'ngpio'), `${chip.ngpio}\n`);
  }
  // Lines are assembled outside the tree and renamed in, so a client never sees a
  // half-built gpioN/; it must sit on the same filesystem for rename to work.
  const stagingDir = await mkdtemp(join(dir, '.gpio-staging-'));
  return new SimulatedSysfsGpio(classDir, gpioDir, stagingDir, chips);
}

function checkChips(chips: readonly GpioChipSpec[]): void {
  const sorted = [...chips].sort((a, b) => a.base - b.base);
  for (const [i, chip] of sorted.entries()) {
    if (!Number.isInteger(chip.base) || chip.base < 0 || !Number.isInteger(chip.ngpio) || chip.ngpio < 1) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `simulated gpio chip ${chip.label}: base and ngpio must be non-negative integers, ngpio at least 1`);
    }
    const next = sorted[i + 1];
    if (next && chip.base + chip.ngpio > next.base) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `simulated gpio chips ${chip.label} and ${next.label} overlap`);
    }
  }
}

/**
 * Copies the shape of every other class so the bind mount hides nothing: symlinks keep their
 * (relative, `../../devices/...`) targets and resolve to the live devices under the mount.
 * Entries that are not symlinks (e.g. `firmware/timeout`) have no other path in sysfs, so
 * they get an empty placeholder that namespace.ts binds the real entry over.
 */
async function mirrorClasses(realClassDir: string, classDir: string): Promise<void> {
  let classes;
  try {
    classes = await readdir(realClassDir, { withFileTypes: true });
  } catch {
    return; // no sysfs here (a container without /sys): nothing to keep visible
  }
  for (const cls of classes) {
    if (cls.name === 'gpio' || !cls.isDirectory()) continue;
    const target = join(classDir, cls.name);
    await mkdir(target, { recursive: true });
    let entries;
    try {
      entries = await readdir(join(realClassDir, cls.name), { withFileTypes: true });
    } catch {
      continue;
    }
    for (const entry of entries) {
      const from = join(realClassDir, cls.name, entry.name);
      const to = join(target, entry.name);
      if (entry.isSymbolicLink()) {
        // An interface can vanish between readdir and readlink (the engine removes a veth).
        const link = await readlink(from).catch((err: NodeJS.ErrnoException) => {
          if (err.code === 'ENOENT') return undefined;
          throw err;
        });
        if (link !== undefined) await symlink(link, to);
      } else if (entry.isDirectory()) await mkdir(to, { recursive: true });
      else await writeFile(to, '');
    }
  }
}

interface LineState {
  /** Physical level; survives unexport, as the pin keeps driving. */
  level: 0 | 1;
  watcher?: FSWatcher;
}

class SimulatedSysfsGpio implements SysfsGpio {
  readonly #listeners = new Set<(t: GpioTransition) => void>();
  readonly #lines = new Map<number, LineState>();
  readonly #watcher: FSWatcher;
  #log: GpioTransition[] = [];
  #closed = false;

  constructor(
    readonly classDir: string,
    readonly gpioDir: string,
    private readonly stagingDir: string,
    private readonly chips: readonly GpioChipSpec[],
  ) {
    this.#watcher = watch(gpioDir, (_event, name) => {
      // The handlers are synchronous on purpose: onoff busy-waits (10000 open attempts,
      // tens of ms) for gpioN/value right after its export write, so the line must appear
      // without waiting on the thread pool.
      if (name === 'export') this.#onExport();
      else if (name === 'unexport') this.#onUnexport();
    });
    this.#watcher.on('error', () => {});
  }

  transitions(gpio?: number): GpioTransition[] {
    return this.#log.filter((t) => gpio === undefined || t.gpio === gpio);
  }

  onTransition(cb: (t: GpioTransition) => void): () => void {
    this.#listeners.add(cb);
    return () => this.#listeners.delete(cb);
  }

  value(gpio: number): 0 | 1 {
    const line = this.#lines.get(gpio);
    if (line?.watcher) this.#sample(gpio, line); // a write whose event is still queued
    return line?.level ?? 0;
  }

  exported(): number[] {
    return [...this.#lines].filter(([, line]) => line.watcher).map(([gpio]) => gpio).sort((a, b) => a - b);
  }

  clearTransitions(): void {
    this.#log = [];
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#watcher.close();
    for (const [gpio, line] of this.#lines) {
      if (line.watcher) this.#sample(gpio, line);
      line.watcher?.close();
      line.watcher = undefined;
    }
    this.#listeners.clear();
    await rm(this.stagingDir, { recursive: true, force: true });
  }

  #inRange(gpio: number): boolean {
    return this.chips.some((chip) => gpio >= chip.base && gpio < chip.base + chip.ngpio);
  }

  #readNumber(file: string): number | undefined {
    let text: string;
    try {
      text = readFileSync(join(this.gpioDir, file), 'utf8').trim();
    } catch {
      return undefined;
    }
    // The truncate of a write shows up as its own event with an empty file.
    return /^\d+$/.test(text) ? Number(text) : undefined;
  }

  #onExport(): void {
    const gpio = this.#readNumber('export');
    if (gpio === undefined || this.#closed || !this.#inRange(gpio)) return;
    const line = this.#lines.get(gpio) ?? { level: 0 };
    if (line.watcher) return; // already exported: the kernel answers EBUSY
    const name = `gpio${gpio}`;
    const staged = join(this.stagingDir, name);
    try {
      rmSync(staged, { recursive: true, force: true });
      writeLineFiles(staged, line.level);
      // Watching before the rename: the watch follows the inode, so no write is missed.
      line.watcher = watch(staged, (_event, file) => {
        if (file === 'value' || file === 'active_low') this.#sample(gpio, line);
      });
      line.watcher.on('error', () => {});
      renameSync(staged, join(this.gpioDir, name));
      this.#lines.set(gpio, line);
    } catch {
      line.watcher?.close();
      line.watcher = undefined;
    }
  }

  #onUnexport(): void {
    const gpio = this.#readNumber('unexport');
    if (gpio === undefined) return;
    const line = this.#lines.get(gpio);
    if (!line?.watcher) return;
    this.#sample(gpio, line); // the last value write may still be queued behind this event
    line.watcher.close();
    line.watcher = undefined;
    rmSync(join(this.gpioDir, `gpio${gpio}`), { recursive: true, force: true });
  }

  #sample(gpio: number, line: LineState): void {
    const dir = join(this.gpioDir, `gpio${gpio}`);
    let value: string;
    let activeLow: string;
    try {
      value = readFileSync(join(dir, 'value'), 'utf8');
      activeLow = readFileSync(join(dir, 'active_low'), 'utf8');
    } catch {
      return;
    }
    const level = ((value.trim().startsWith('1') ? 1 : 0) ^ (activeLow.trim().startsWith('1') ? 1 : 0)) as 0 | 1;
    if (level === line.level) return;
    line.level = level;
    const transition: GpioTransition = { gpio, value: level, at: performance.timeOrigin + performance.now() };
    this.#log.push(transition);
    for (const cb of this.#listeners) cb(transition);
  }
}

function writeLineFiles(dir: string, level: 0 | 1): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'value'), `${level}\n`);
  writeFileSync(join(dir, 'direction'), 'in\n');
  writeFileSync(join(dir, 'edge'), 'none\n');
  writeFileSync(join(dir, 'active_low'), '0\n');
}
