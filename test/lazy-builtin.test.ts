/**
 * The device bundle's stand-ins for builtins it loads on first use (DEVICE_LAZY_BUILTINS):
 * what our modules and dependencies do with one at load time (destructure its functions,
 * build objects over it) must not load it, and any use must reach the real builtin.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bundleForDevice } from '../device-image/payload.js';
import { DEVICE_LAZY_BUILTINS, forwardedFunctions, lazyBuiltinSource } from '../device-image/lazy-builtins.js';

/** The CommonJS stand-in for `name`, with a require that counts loads and gives `real`. */
function standIn(name: string, real: object): { mod: Record<PropertyKey, unknown>; loads: string[] } {
  const loads: string[] = [];
  const module = { exports: {} as Record<PropertyKey, unknown> };
  const require = (id: string) => (loads.push(id), real);
  new Function('module', 'require', lazyBuiltinSource(name, forwardedFunctions(real)))(module, require);
  return { mod: module.exports, loads };
}

describe('forwardedFunctions', () => {
  it('names plain functions only: not classes, which a forwarder would break for instanceof, nor values', async () => {
    const crypto = (await import('node:crypto')).default;
    const names = forwardedFunctions(crypto);
    expect(names).toEqual(expect.arrayContaining(['createHash', 'randomBytes', 'randomUUID', 'timingSafeEqual']));
    expect(names).not.toContain('Hash');
    expect(names).not.toContain('constants');
    expect(names).not.toContain('webcrypto');
  });
});

describe('lazyBuiltinSource', () => {
  it('gives its functions without loading the builtin, and loads it once, on the first call', () => {
    const real = { request: (url: string) => `answer for ${url}`, get: () => 'got', globalAgent: { maxSockets: 1 } };
    const { mod, loads } = standIn('https', real);
    const { request, get } = mod as typeof real;
    expect(loads).toEqual([]);
    expect(request('/a')).toBe('answer for /a');
    expect(get()).toBe('got');
    expect(loads).toEqual(['node:https']);
  });

  it('loads the builtin for anything but a function, and gives its exports', () => {
    const real = { request: () => 'answer', globalAgent: { maxSockets: 1 } };
    const { mod, loads } = standIn('https', real);
    expect(mod.globalAgent).toBe(real.globalAgent);
    expect(loads).toEqual(['node:https']);
    expect('globalAgent' in mod).toBe(true);
    expect(Object.keys(mod)).toEqual(['request', 'globalAgent']);
    expect(loads).toEqual(['node:https']);
  });

  it('calls a function replaced on the builtin after load time, as the builtin itself would', () => {
    const real: Record<string, unknown> = { request: () => 1 };
    const { mod } = standIn('https', real);
    const { request } = mod as { request: () => number };
    mod.request = () => 2;
    expect((real.request as () => number)()).toBe(2);
    expect(request()).toBe(2);
  });

  it('says which function a device\'s Node lacks, rather than calling undefined', () => {
    // The function list comes from the Node that built the bundle; the builtin loaded here has none.
    const module = { exports: {} as Record<string, () => unknown> };
    new Function('module', 'require', lazyBuiltinSource('https', ['request']))(module, () => ({}));
    expect(() => module.exports.request!()).toThrow(/node:https has no function request on Node v/);
  });

  it('gives an object built over it (follow-redirects does so at load time) its own property, loading nothing', () => {
    const real: Record<string, unknown> = { request: () => 'real' };
    const { mod, loads } = standIn('https', real);
    const wrapper = Object.create(mod) as Record<string, unknown>;
    wrapper.request = () => 'wrapped';
    expect(loads).toEqual([]);
    expect((wrapper.request as () => string)()).toBe('wrapped');
    expect(Object.getOwnPropertyNames(wrapper)).toEqual(['request']);
    expect((real.request as () => string)()).toBe('real');
    // Anything else read through the wrapper comes from the builtin.
    real.Agent = class Agent {};
    expect(wrapper.Agent).toBe(real.Agent);
    expect(loads).toEqual(['node:https']);
  });

  it('stands in for the real builtins: each one exports a plain object, with the same keys', () => {
    for (const name of DEVICE_LAZY_BUILTINS) {
      const real = process.getBuiltinModule(`node:${name}`) as object;
      const { mod } = standIn(name, real);
      expect(typeof real, name).toBe('object');
      expect(Object.keys(mod).sort(), name).toEqual(Object.keys(real).sort());
    }
  });
});

describe('the device bundle\'s imports of lazy builtins', () => {
  const work = mkdtempSync(join(tmpdir(), 'fleetlab-lazy-builtin-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  /** Bundles `source` as the device's supervisor is bundled. */
  async function bundle(name: string, source: string): Promise<string> {
    const entry = join(work, `${name}.ts`);
    writeFileSync(entry, source);
    const out = join(work, `${name}.mjs`);
    await bundleForDevice(entry, out, '0.0.0');
    return out;
  }

  it('load nothing at start-up, and the builtin on the first call', async () => {
    const out = await bundle(
      'named',
      `import { randomBytes } from 'node:crypto';
import readline from 'node:readline';
const loaded = () => process.moduleLoadList.filter((m) => m === 'NativeModule crypto' || m === 'NativeModule readline');
const before = loaded();
const bytes = randomBytes(8).length;
const afterCall = loaded();
const hasInterface = typeof readline.Interface;
console.log(JSON.stringify({ before, afterCall, after: loaded(), bytes, hasInterface }));`,
    );
    const run = JSON.parse(execFileSync(process.execPath, [out], { encoding: 'utf8' })) as { before: string[]; afterCall: string[]; after: string[]; bytes: number; hasInterface: string };
    expect(run.before).toEqual([]);
    expect(run.bytes).toBe(8);
    expect(run.afterCall).toEqual(['NativeModule crypto']);
    // A default import is the stand-in: a class read from it loads the builtin.
    expect(run.hasInterface).toBe('function');
    expect(run.after).toEqual(['NativeModule crypto', 'NativeModule readline']);
  });

  it('fail the build for a value a stand-in cannot give without loading the builtin', async () => {
    await expect(bundle('value', `import { constants } from 'node:crypto';\nconsole.log(constants);`)).rejects.toThrow(/constants/);
    await expect(bundle('namespace', `import * as crypto from 'node:crypto';\nconsole.log(crypto.webcrypto);`)).rejects.toThrow(/webcrypto/);
  });
});
