import { mkdtemp, readdir, readlink, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { gpioNamespaceCommand } from '../sim/gpio/namespace.js';
import { startSysfsGpio, type SysfsGpio } from '../sim/gpio/sysfs-gpio.js';
import { FleetlabError } from '../src/errors.js';
import type { LedPort } from '../src/supervisor/adapters/ports.js';
import { createLedAdapter, resolveGpioNumber } from '../src/supervisor/adapters/led.js';
import { Blinker } from '../src/supervisor/blink.js';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const childScript = fileURLToPath(new URL('./helpers/led-blink-child.ts', import.meta.url));

/** Records what the Blinker asks for: a double for the timing logic only, not for GPIO. */
class RecordingLed implements LedPort {
  readonly writes: { on: boolean; at: number }[] = [];
  failWith: Error | undefined;
  async set(on: boolean): Promise<void> {
    this.writes.push({ on, at: Date.now() });
    if (this.failWith) throw this.failWith;
  }
  async close(): Promise<void> {}
}

function expectedSequence(fromMs: number, untilMs: number): { on: boolean; at: number }[] {
  const writes: { on: boolean; at: number }[] = [];
  for (let at = fromMs, on = true; at < untilMs; at += 200, on = !on) writes.push({ on, at });
  writes.push({ on: false, at: untilMs });
  return writes;
}

describe('Blinker timing (fake timers)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('toggles 200/200 ms for 15 s and ends off', async () => {
    const led = new RecordingLed();
    const blinker = new Blinker({ led });
    blinker.blink();
    expect(blinker.isBlinking).toBe(true);
    await vi.advanceTimersByTimeAsync(20_000);
    expect(led.writes).toEqual(expectedSequence(0, 15_000));
    expect(led.writes).toHaveLength(76);
    expect(blinker.isBlinking).toBe(false);
  });

  it('a blink during a blink restarts the window without a second loop', async () => {
    const led = new RecordingLed();
    const blinker = new Blinker({ led });
    blinker.blink();
    await vi.advanceTimersByTimeAsync(10_100);
    blinker.blink();
    await vi.advanceTimersByTimeAsync(20_000);
    expect(led.writes).toEqual(expectedSequence(0, 25_100));
    expect(led.writes.at(-1)).toEqual({ on: false, at: 25_100 });
    expect(blinker.isBlinking).toBe(false);
  });

  it('uses injected timers, and stop() turns the LED off at once', async () => {
    const led = new RecordingLed();
    const timers = { setTimeout: vi.fn(setTimeout), clearTimeout: vi.fn(clearTimeout), now: () => Date.now() };
    const blinker = new Blinker({ led, timers, onMs: 100, offMs: 300 });
    blinker.blink();
    await vi.advanceTimersByTimeAsync(450);
    blinker.stop();
    await blinker.whenIdle();
    expect(led.writes).toEqual([
      { on: true, at: 0 },
      { on: false, at: 100 },
      { on: true, at: 400 },
      { on: false, at: 450 },
    ]);
    expect(timers.setTimeout).toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(20_000);
    expect(led.writes).toHaveLength(4);
  });

  it('keeps its edges on the 200 ms grid when every timer fires 30 ms late (a loaded board)', async () => {
    const led = new RecordingLed();
    const late = { setTimeout: (callback: () => void, ms: number) => setTimeout(callback, ms + 30), clearTimeout, now: () => Date.now() };
    const blinker = new Blinker({ led, timers: late });
    blinker.blink();
    await vi.advanceTimersByTimeAsync(20_000);
    // Re-armed from each late callback, a period would be 460 ms: 33 pulses where 38 are due.
    const edges = led.writes.slice(0, -1);
    expect(edges.filter((w) => w.on)).toHaveLength(38);
    expect(edges.map((w) => w.at)).toEqual(expectedSequence(0, 15_000).slice(0, -1).map((w) => (w.at === 0 ? 0 : w.at + 30)));
    expect(led.writes.at(-1)).toEqual({ on: false, at: 15_030 });
  });

  it('skips the phases a stalled event loop missed, staying in step with the grid', async () => {
    const led = new RecordingLed();
    let stall = 0;
    const stalling = { setTimeout: (callback: () => void, ms: number) => setTimeout(callback, ms + stall), clearTimeout, now: () => Date.now() };
    const blinker = new Blinker({ led, timers: stalling, durationMs: 2_000 });
    stall = 500;
    blinker.blink();
    stall = 0;
    await vi.advanceTimersByTimeAsync(3_000);
    // Due: on 0, off 200, on 400, off 600, on 800... The first timer fired at 700, inside the
    // off phase that began at 600; from there the grid goes on.
    expect(led.writes.slice(0, 4)).toEqual([
      { on: true, at: 0 },
      { on: false, at: 700 },
      { on: true, at: 800 },
      { on: false, at: 1_000 },
    ]);
  });

  it('a wall clock stepped back an hour mid-blink does not hold the LED in one phase', async () => {
    const led = new RecordingLed();
    const blinker = new Blinker({ led });
    blinker.blink();
    await vi.advanceTimersByTimeAsync(1_000);
    vi.setSystemTime(Date.now() - 3_600_000);
    await vi.advanceTimersByTimeAsync(14_500);
    expect(led.writes.filter((w) => w.on)).toHaveLength(38);
    expect(blinker.isBlinking).toBe(false);
  });

  it('refuses phases of no length', () => {
    expect(() => new Blinker({ led: new RecordingLed(), onMs: 0 })).toThrow(/must last some time/);
  });

  it('logs LED errors once per blink and never throws', async () => {
    const led = new RecordingLed();
    led.failWith = new Error('EIO');
    const warnings: string[] = [];
    const blinker = new Blinker({ led, durationMs: 1_000, log: { warn: (_obj, msg) => warnings.push(msg ?? '') } });
    expect(() => blinker.blink()).not.toThrow();
    await vi.advanceTimersByTimeAsync(2_000);
    await blinker.whenIdle();
    expect(led.writes).toHaveLength(6);
    expect(warnings).toEqual(['LED write failed: EIO', 'LED writes failed during the blink']);
  });
});

describe('LED on the simulated sysfs GPIO', () => {
  let dir: string;
  let sim: SysfsGpio | undefined;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-gpio-'));
  });
  afterEach(async () => {
    await sim?.close();
    sim = undefined;
    await rm(dir, { recursive: true, force: true });
  });

  it('blinks gpio 529 (pinctrl-bcm2835 offset 17) for 15 s from a namespaced child', { timeout: 40_000 }, async () => {
    sim = await startSysfsGpio({ dir });
    const { file, args } = gpioNamespaceCommand(sim.classDir, [process.execPath, '--import', 'tsx', childScript, '15000', '1000']);
    const child = await execa(file, args, { cwd: repoRoot, reject: false });
    expect(child.stderr).toBe('');
    expect(child.exitCode).toBe(0);
    const events = child.stdout.split('\n').map((line) => JSON.parse(line) as { event: string; at: number });
    const end = events.find((e) => e.event === 'end')!;

    const seen = sim.transitions(529);
    expect(sim.transitions().every((t) => t.gpio === 529)).toBe(true);
    const rising = seen.filter((t) => t.value === 1).length;
    const intervals = seen.slice(1).map((t, i) => t.at - seen[i]!.at).sort((a, b) => a - b);
    const median = intervals[Math.floor(intervals.length / 2)]!;
    console.info(`gpio 529: ${seen.length} transitions, ${rising} on-pulses, median interval ${median.toFixed(1)} ms, ` +
      `span ${(seen.at(-1)!.at - seen[0]!.at).toFixed(0)} ms`);

    // 15 s of 200 ms on + 200 ms off: 37.5 pulses, one transition every 200 ms.
    expect(rising).toBeGreaterThanOrEqual(35);
    expect(rising).toBeLessThanOrEqual(39);
    expect(seen.length).toBe(rising * 2);
    expect(median).toBeGreaterThanOrEqual(150);
    expect(median).toBeLessThanOrEqual(300);
    expect(seen.at(-1)!.value).toBe(0);
    expect(sim.value(529)).toBe(0);
    // The child lingered 1 s with the line exported after its window: nothing may follow.
    expect(seen.filter((t) => t.at > end.at + 150)).toEqual([]);
    // onoff's unexport reached the sim.
    expect(sim.exported()).toEqual([]);
  });

  it('mirrors the rest of /sys/class so the bind mount hides nothing', { timeout: 20_000 }, async () => {
    // Other test files create and remove docker networks (veth, bridges) while this runs, so the
    // mirror is compared with what /sys/class held both before and after its snapshot.
    const netBefore = new Set(await readdir('/sys/class/net'));
    // Read now: a veth there before and after the snapshot may be gone by the comparison below.
    const linksBefore = new Map<string, string>();
    for (const name of netBefore) {
      const link = await readlink(join('/sys/class/net', name)).catch(() => undefined);
      if (link !== undefined) linksBefore.set(name, link);
    }
    sim = await startSysfsGpio({ dir });
    const netAfter = new Set(await readdir('/sys/class/net'));
    const real = (await readdir('/sys/class')).filter((name) => name !== 'gpio');
    expect((await readdir(sim.classDir)).sort()).toEqual([...real, 'gpio'].sort());
    const mirrored = await readdir(join(sim.classDir, 'net'));
    for (const [name, link] of linksBefore) {
      if (!netAfter.has(name)) continue;
      expect(mirrored).toContain(name);
      expect(await readlink(join(sim.classDir, 'net', name))).toBe(link);
    }
    for (const name of mirrored) expect(netBefore.has(name) || netAfter.has(name)).toBe(true);
    const { file, args } = gpioNamespaceCommand(sim.classDir, ['/bin/sh', '-c', 'ls /sys/class/net; echo ---; ls /sys/class/gpio']);
    const child = await execa(file, args, { reject: false });
    expect(child.exitCode).toBe(0);
    const [inside, gpio] = child.stdout.split('---\n');
    // Inside the namespace /sys/class is the mirror, whatever the host has since become.
    expect(inside!.trim().split('\n').sort()).toEqual([...mirrored].sort());
    expect(gpio!.trim().split('\n').sort()).toEqual(['export', 'gpiochip512', 'unexport']);
  });
});

describe('GPIO base lookup', () => {
  let dir: string;
  let sim: SysfsGpio;
  const chips = [
    { label: 'pinctrl-bcm2835', base: 512, ngpio: 54 },
    { label: 'raspberrypi-exp-gpio', base: 566, ngpio: 8 },
  ];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-gpio-'));
    sim = await startSysfsGpio({ dir, chips });
  });
  afterEach(async () => {
    await sim.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('adds the offset to the base of the chip with that label', async () => {
    await expect(resolveGpioNumber({ chip: 'pinctrl-bcm2835', offset: 17 }, sim.gpioDir)).resolves.toBe(529);
    await expect(resolveGpioNumber({ chip: 'raspberrypi-exp-gpio', offset: 2 }, sim.gpioDir)).resolves.toBe(568);
    await expect(resolveGpioNumber(42, sim.gpioDir)).resolves.toBe(42);
  });

  it('names the labels that exist when the chip is unknown', async () => {
    const led = createLedAdapter({ gpio: { chip: 'gpio-mockup', offset: 1 }, sysfsGpioDir: sim.gpioDir });
    const err = await led.set(true).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FleetlabError);
    expect((err as FleetlabError).message).toContain('"gpio-mockup" not found');
    expect((err as FleetlabError).message).toContain('pinctrl-bcm2835 (base 512)');
    expect((err as FleetlabError).message).toContain('raspberrypi-exp-gpio (base 566)');
  });

  it('refuses an offset past the chip and reports absent GPIO sysfs', async () => {
    await expect(resolveGpioNumber({ chip: 'raspberrypi-exp-gpio', offset: 8 }, sim.gpioDir)).rejects.toThrow(/outside chip/);
    const err = await resolveGpioNumber({ chip: 'pinctrl-bcm2835', offset: 17 }, join(dir, 'no-such-dir')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FleetlabError);
    expect((err as FleetlabError).message).toMatch(/GPIO sysfs is absent/);
  });
});
