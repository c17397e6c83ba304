/**
 * The device bundle's module bodies in parentheses, so that V8 compiles them with the bundle
 * and Node's compile cache holds them (eager-modules.ts).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ts from 'typescript';
import { afterAll, describe, expect, it } from 'vitest';
import { eagerModuleBodies } from '../device-image/eager-modules.js';
import { bundleForDevice } from '../device-image/payload.js';

// The shape of esbuild's minified output: its __esm and __commonJS helpers, then modules.
const HELPERS = 'var _=(e,t,r)=>()=>{if(r)throw r[0];try{return e&&(t=e(e=0)),t}catch(n){throw r=[n],n}};var E=(e,t)=>()=>{try{return t||e((t={exports:{}}).exports,t),t.exports}catch(r){throw t=0,r}};';

describe('eagerModuleBodies', () => {
  it('puts the body given to each module wrapper in parentheses, and nothing else', () => {
    const modules = 'var a=E((e,t)=>{t.exports=[1].map(n=>n+1)});var b,c=_(()=>{b=a()});var f=(n=>n)(2);';
    expect(eagerModuleBodies(ts, HELPERS + modules)).toEqual({
      source: `${HELPERS}var a=E(((e,t)=>{t.exports=[1].map(n=>n+1)}));var b,c=_((()=>{b=a()}));var f=(n=>n)(2);`,
      bodies: 2,
    });
  });

  it('leaves a bundle without module wrappers as it is', () => {
    expect(eagerModuleBodies(ts, 'var a=(n=>n)(1);console.log(a);')).toEqual({ source: 'var a=(n=>n)(1);console.log(a);', bodies: 0 });
  });

  describe('on a bundle built as the device\'s is', () => {
    const work = mkdtempSync(join(tmpdir(), 'fleetlab-eager-modules-'));
    afterAll(() => rmSync(work, { recursive: true, force: true }));

    it('wraps every module body and the bundle runs as before', async () => {
      writeFileSync(join(work, 'dep.cjs'), 'module.exports = { twice: (n) => n * 2 };\n');
      writeFileSync(join(work, 'lazy.ts'), 'export const label = "lazy";\n');
      writeFileSync(join(work, 'entry.ts'), "import dep from './dep.cjs';\nconst { label } = await import('./lazy.js');\nconsole.log(dep.twice(21), label);\n");
      const out = join(work, 'bundle.mjs');
      // One CommonJS module (__commonJS), one ES module loaded on demand (__esm).
      expect(await bundleForDevice(join(work, 'entry.ts'), out, '0.0.0')).toEqual({ bodies: 2 });
      expect(execFileSync(process.execPath, [out], { encoding: 'utf8' }).trim()).toBe('42 lazy');
      // No body is left bare: a second pass finds none to wrap.
      expect(eagerModuleBodies(ts, readFileSync(out, 'utf8')).bodies).toBe(0);
    });
  });
});
