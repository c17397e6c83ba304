/**
 * The device bundle stays ASCII: Node holds a module's source with any other character as
 * UTF-16, twice the memory (device-image/payload.ts, nonAsciiInBundle).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bundleForDevice, nonAsciiInBundle } from '../device-image/payload.js';
import { parseDuration } from '../src/protocol/container-settings.js';

describe('nonAsciiInBundle', () => {
  it('names the first character outside ASCII and where it stands, and nothing in an ASCII source', () => {
    expect(nonAsciiInBundle('var a=/(ms|s)/g;')).toBeUndefined();
    expect(nonAsciiInBundle('var a=/(ms|\u00b5s)/g;')).toBe('U+00B5 at offset 11: ...var a=/(ms|\u00b5s)/g;...');
  });
});

describe('bundleForDevice', () => {
  const work = mkdtempSync(join(tmpdir(), 'fleetlab-bundle-ascii-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it('refuses a regular expression literal esbuild leaves outside ASCII, and takes the same written as an escape', async () => {
    // esbuild escapes the string and the key itself; the regular expression literal it leaves as written.
    writeFileSync(join(work, 'raw.ts'), "const units: Record<string, number> = { '\u00b5s': 1e3 };\nconsole.log(/(\u00b5s)/.exec('2\u00b5s')?.[1], units['\u00b5s']);\n");
    await expect(bundleForDevice(join(work, 'raw.ts'), join(work, 'raw.mjs'), '0.0.0')).rejects.toThrow(/outside ASCII, U\+00B5 at offset/);
    writeFileSync(join(work, 'escaped.ts'), "const units: Record<string, number> = { '\u00b5s': 1e3 };\nconsole.log(/(\\u00b5s)/.exec('2\u00b5s')?.[1] === '\u00b5s', units['\u00b5s']);\n");
    const out = join(work, 'escaped.mjs');
    await bundleForDevice(join(work, 'escaped.ts'), out, '0.0.0');
    expect(nonAsciiInBundle(readFileSync(out, 'utf8'))).toBeUndefined();
    expect(execFileSync(process.execPath, [out], { encoding: 'utf8' }).trim()).toBe('true 1000');
  });

  it('the compose duration parser, whose micro sign is an escape, still reads microseconds', () => {
    expect(parseDuration('1\u00b5s')).toBe(1_000);
    expect(parseDuration('1m30s500us')).toBe(90_000_500_000);
  });
});
