/**
 * The harness's side of supervisor versions (hil/harness/supervisor-version.ts): `since()`
 * annotations, the reason a test on an older device skips with, and the version a team's
 * config gives every project (defineConfig, and `fleetlab test --supervisor-version` over it).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { defineConfig } from '../hil/harness/config.js';
import { checkedVersion, since, SUPERVISOR_VERSION_VARIABLE, tooOld } from '../hil/harness/supervisor-version.js';
import { formatVersion } from '../src/supervisor/versions.js';

describe('since()', () => {
  it('is an annotation naming the version and, if given, what of it the test uses', () => {
    expect(since('9.11.0', 'GET /v2/device/name')).toEqual({ type: 'supervisor since', description: '9.11.0 (GET /v2/device/name)' });
    expect(since('14.7.0')).toEqual({ type: 'supervisor since', description: '14.7.0' });
  });

  it('refuses a version fleetlab does not answer as, with the range', () => {
    expect(() => since('9.11')).toThrow('since("9.11"): "9.11" is not a version X.Y.Z; accepted: a supervisor version from 1.1.0 to 14.7.0');
    expect(() => since('15.0.0')).toThrow('is newer than 14.7.0');
  });
});

describe('a test on a device of a version', () => {
  const v = (raw: string) => checkedVersion(raw);

  it('runs when every since() is at or below the version, and always on fleetlab\'s own', () => {
    expect(tooOld([since('9.7.0'), since('1.6.0')], v('9.7.0'))).toBeUndefined();
    expect(tooOld([since('14.7.0')], undefined)).toBeUndefined();
    expect(tooOld([{ type: 'skip' }, { type: 'supervisor version', description: '9.7.0' }], v('1.1.0'))).toBeUndefined();
  });

  it('skips, naming the newest version it needs and the device\'s', () => {
    expect(tooOld([since('9.11.0', 'GET /v2/device/name'), since('10.2.0', 'POST /v2/journal-logs'), since('7.21.0')], v('9.7.0'))).toBe('needs supervisor 10.2.0 (POST /v2/journal-logs); the device answers as 9.7.0');
    // A patch version counts: 12.11.33 is before 12.11.34.
    expect(tooOld([since('12.11.34')], v('12.11.33'))).toBe('needs supervisor 12.11.34; the device answers as 12.11.33');
  });

  it("takes no version (undefined or '') as fleetlab's own, and refuses a bad one naming where it may come from", () => {
    expect(checkedVersion(undefined)).toBeUndefined();
    expect(checkedVersion('')).toBeUndefined();
    expect(formatVersion(checkedVersion('7.20.0')!)).toBe('7.20.0');
    expect(() => checkedVersion('1.0.0')).toThrow(/^supervisorVersion \(test\.use, a project's use, defineConfig or fleetlab test --supervisor-version\): "1\.0\.0" is older than 1\.1\.0/);
  });
});

describe('defineConfig({ supervisorVersion })', () => {
  // defineConfig sets the sim target's engine for the workers it configures: put both back.
  const saved = { [SUPERVISOR_VERSION_VARIABLE]: process.env[SUPERVISOR_VERSION_VARIABLE], FLEETLAB_HIL_ENGINE: process.env.FLEETLAB_HIL_ENGINE };
  afterEach(() => {
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });
  const versions = (config: ReturnType<typeof defineConfig>) => config.projects!.map((p) => [p.name, (p.use as { supervisorVersion?: string }).supervisorVersion]);

  it('gives every target project the version; without it none', () => {
    delete process.env[SUPERVISOR_VERSION_VARIABLE];
    expect(versions(defineConfig({ supervisorVersion: '9.7.0' }))).toEqual([['sim', '9.7.0'], ['container', '9.7.0'], ['qemu', '9.7.0'], ['board', '9.7.0']]);
    expect(versions(defineConfig({})).every(([, version]) => version === undefined)).toBe(true);
  });

  it('takes fleetlab test --supervisor-version over it, and refuses a bad one when the config loads', () => {
    process.env[SUPERVISOR_VERSION_VARIABLE] = '10.2.0';
    expect(versions(defineConfig({ supervisorVersion: '9.7.0' }))[0]).toEqual(['sim', '10.2.0']);
    delete process.env[SUPERVISOR_VERSION_VARIABLE];
    expect(() => defineConfig({ supervisorVersion: 'latest' })).toThrow('"latest" is not a version X.Y.Z');
  });
});

describe('defineConfig({ fullyParallel })', () => {
  const saved = process.env.FLEETLAB_HIL_ENGINE;
  afterEach(() => {
    if (saved === undefined) delete process.env.FLEETLAB_HIL_ENGINE;
    else process.env.FLEETLAB_HIL_ENGINE = saved;
  });

  it("passes it to Playwright (off unless asked), and refuses it with deviceScope 'file', whose tests share a device", () => {
    expect(defineConfig({}).fullyParallel).toBe(false);
    expect(defineConfig({ fullyParallel: true }).fullyParallel).toBe(true);
    expect(defineConfig({ fullyParallel: true, deviceScope: 'test' }).fullyParallel).toBe(true);
    expect(() => defineConfig({ fullyParallel: true, deviceScope: 'file' })).toThrow(expect.objectContaining({ code: 'HIL_ERR_CONFIG', message: expect.stringMatching(/use deviceScope 'test' \(the default\) with it, or leave fullyParallel out/) }));
  });
});
