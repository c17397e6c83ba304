/**
 * The device bundle's stand-in for a builtin that dependencies require at load time but
 * rarely use (DEVICE_LAZY_BUILTINS): it loads the builtin on first use, and until then,
 * what a dependency does with it at load time must not load it.
 */
import { describe, expect, it } from 'vitest';
import { DEVICE_LAZY_BUILTINS, lazyBuiltinSource } from '../qemu/image/payload.js';

/** The stand-in for `name`, with a require that counts loads and gives `real`. */
function standIn(name: string, real: object): { mod: Record<PropertyKey, unknown>; loads: string[] } {
  const loads: string[] = [];
  const module = { exports: {} as Record<PropertyKey, unknown> };
  const require = (id: string) => (loads.push(id), real);
  new Function('module', 'require', lazyBuiltinSource(name))(module, require);
  return { mod: module.exports, loads };
}

describe('lazyBuiltinSource', () => {
  it('loads the builtin on first use, once, and gives its exports', () => {
    const request = () => 'answer';
    const { mod, loads } = standIn('https', { request, globalAgent: { maxSockets: 1 } });
    expect(loads).toEqual([]);
    expect((mod.request as () => string)()).toBe('answer');
    expect(mod.request).toBe(request);
    expect('globalAgent' in mod).toBe(true);
    expect(Object.keys(mod)).toEqual(['request', 'globalAgent']);
    expect(loads).toEqual(['node:https']);
  });

  it('takes a set on itself to the builtin', () => {
    const real: Record<string, unknown> = { request: () => 1 };
    const { mod } = standIn('https', real);
    mod.request = () => 2;
    expect((real.request as () => number)()).toBe(2);
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

  it('stands in for the real builtins: each one exports a plain object', async () => {
    for (const name of DEVICE_LAZY_BUILTINS) {
      const real = (await import(`node:${name}`)) as { default: unknown };
      expect(typeof real.default, name).toBe('object');
      const { mod } = standIn(name, real.default as object);
      expect(Object.keys(mod).sort(), name).toEqual(Object.keys(real.default as object).sort());
    }
  });
});
