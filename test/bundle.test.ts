/**
 * The capture bundle file (issue 14): written whole or not at all, read back only when it is
 * whole, of a version this fleetlab knows, and holds what its manifest says.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as tar from 'tar';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUNDLE_VERSION, BundleWriter, readBundle, type BundleWriterOptions } from '../hil/capture/bundle.js';
import { FleetlabError } from '../src/errors.js';

let dir: string;
const options: BundleWriterOptions = { source: { kind: 'api', address: 'http://127.0.0.1:48484' }, redaction: 'default', fleetlab: '0.0.0-test' };

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-bundle-test-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
const outPath = () => join(dir, `b${++n}.tar.gz`);

async function twoStepBundle(out: string, complete = true): Promise<void> {
  const w = await BundleWriter.open(out, options);
  await w.step('state', async (put) => {
    await put('state/status.json', JSON.stringify({ appState: 'applying' }));
    await put('state/target.json', '{"apps":{}}');
  });
  await w.step('dmesg', async () => {
    throw new Error('dmesg: read kernel buffer failed: Operation not permitted');
  });
  await w.finish({ complete });
}

async function refusal(path: string): Promise<string> {
  const err = await readBundle(path).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FleetlabError);
  expect((err as FleetlabError).code).toBe('HIL_ERR_CAPTURE');
  return (err as FleetlabError).message;
}

/** A bundle whose manifest was edited, re-packed as a capture would. */
async function repacked(from: string, edit: (manifest: Record<string, any>, staging: string) => void): Promise<string> {
  const staging = mkdtempSync(join(dir, 'repack-'));
  await tar.extract({ file: from, cwd: staging });
  const manifest = JSON.parse(readFileSync(join(staging, 'manifest.json'), 'utf8'));
  edit(manifest, staging);
  writeFileSync(join(staging, 'manifest.json'), JSON.stringify(manifest));
  const out = outPath();
  await tar.create({ gzip: true, cwd: staging, file: out }, ['.']);
  return out;
}

describe('a bundle written and read back', () => {
  it('keeps each step: its files with their sha256, or why it failed, and the capture goes on', async () => {
    const out = outPath();
    const events: string[] = [];
    const w = await BundleWriter.open(out, { ...options, onStep: (e) => events.push(`${e.name} ${e.phase}`) });
    expect(await w.step('state', async (put) => put('state/status.json', '{"appState":"applied"}'))).toBe(true);
    expect(await w.step('dmesg', async () => { throw new Error('Operation not permitted'); })).toBe(false);
    expect(await w.step('journal', async (put) => put('journal.txt', 'line\n'))).toBe(true);
    const written = await w.finish({ complete: true });
    expect(events).toEqual(['state start', 'state ok', 'dmesg start', 'dmesg failed', 'journal start', 'journal ok']);
    expect(existsSync(`${out}.capture-partial`)).toBe(false);

    const bundle = await readBundle(out);
    expect(bundle.manifest).toEqual(written);
    expect(bundle.manifest).toMatchObject({ format: 'fleetlab-bundle', version: BUNDLE_VERSION, complete: true, fleetlab: '0.0.0-test', redaction: 'default' });
    expect(bundle.manifest.steps.map((s) => [s.name, s.status, s.files, s.error])).toEqual([
      ['state', 'ok', ['state/status.json'], undefined],
      ['dmesg', 'failed', [], 'Operation not permitted'],
      ['journal', 'ok', ['journal.txt'], undefined],
    ]);
    expect(bundle.names()).toEqual(['journal.txt', 'state/status.json']);
    expect(bundle.json('state/status.json')).toEqual({ appState: 'applied' });
    expect(bundle.text('journal.txt')).toBe('line\n');
    expect(bundle.manifest.files['journal.txt']).toEqual({ bytes: 5, sha256: createHash('sha256').update('line\n').digest('hex') });
  });

  it('a capture that stopped early is a bundle that says so', async () => {
    const out = outPath();
    await twoStepBundle(out, false);
    const bundle = await readBundle(out);
    expect(bundle.manifest.complete).toBe(false);
    expect(() => bundle.read('journal.txt')).toThrow(`${out} has no journal.txt (the capture did not finish)`);
  });

  it('refuses to replace a file without --force, and replaces it with it', async () => {
    const out = outPath();
    writeFileSync(out, 'a user file');
    await expect(BundleWriter.open(out, options)).rejects.toThrow(`${out} exists: pass --force to replace it, or --out another path`);
    expect(readFileSync(out, 'utf8')).toBe('a user file');
    expect(existsSync(`${out}.capture-partial`)).toBe(false);
    const w = await BundleWriter.open(out, { ...options, force: true });
    await w.finish({ complete: true });
    expect((await readBundle(out)).manifest.complete).toBe(true);
  });

  it('a directory that does not exist is named', async () => {
    await expect(BundleWriter.open(join(dir, 'missing', 'b.tar.gz'), options)).rejects.toThrow(`the directory ${join(dir, 'missing')} does not exist`);
  });

  it('a step may not write outside the bundle or write a file twice', async () => {
    const w = await BundleWriter.open(outPath(), options);
    for (const name of ['../escape', '/etc/passwd', 'a/../../b', '.hidden', 'manifest.json', 'a//b', '-rf']) {
      const events: string[] = [];
      expect(await w.step(`bad ${name}`, async (put) => put(name, 'x').catch((e: Error) => { events.push(e.message); throw e; }))).toBe(false);
      expect(events[0], name).toContain('is not allowed');
    }
    expect(await w.step('twice', async (put) => { await put('x.txt', '1'); await put('x.txt', '2'); })).toBe(false);
    const manifest = await w.finish({ complete: true });
    expect(Object.keys(manifest.files)).toEqual(['x.txt']);
    expect(manifest.steps.at(-1)).toMatchObject({ name: 'twice', status: 'failed', files: ['x.txt'], error: expect.stringContaining('written twice') });
  });

  it('a killed capture leaves its staging directory, which the next capture to the path clears', async () => {
    const out = outPath();
    const w = await BundleWriter.open(out, options);
    await w.step('state', async (put) => put('state.json', '{}'));
    // Nothing finishes: as if the process were killed here.
    expect(existsSync(out)).toBe(false);
    expect(existsSync(`${out}.capture-partial/state.json`)).toBe(true);
    await twoStepBundle(out);
    expect(existsSync(`${out}.capture-partial`)).toBe(false);
    expect((await readBundle(out)).manifest.complete).toBe(true);
  });

  it('a staging directory that is not ours is left alone and named', async () => {
    const out = outPath();
    mkdirSync(`${out}.capture-partial`);
    writeFileSync(`${out}.capture-partial/notes.txt`, 'mine');
    await expect(BundleWriter.open(out, options)).rejects.toThrow('is not a fleetlab capture\'s staging directory: move it away');
    expect(readFileSync(`${out}.capture-partial/notes.txt`, 'utf8')).toBe('mine');
  });
});

describe('a bundle that cannot be trusted is refused, saying why', () => {
  let good: string;
  beforeAll(async () => {
    good = outPath();
    await twoStepBundle(good);
  });

  it('no such file; not gzip', async () => {
    expect(await refusal(join(dir, 'nope.tar.gz'))).toBe(`${join(dir, 'nope.tar.gz')}: no such file`);
    const text = outPath();
    writeFileSync(text, '{"not":"a bundle"}');
    expect(await refusal(text)).toBe(`${text} is not a fleetlab bundle: it is not a gzip file`);
  });

  it('cut short at any point', async () => {
    const size = readFileSync(good).length;
    for (const keep of [2, 10, Math.floor(size / 3), Math.floor(size / 2), size - 9, size - 1]) {
      const cut = outPath();
      writeFileSync(cut, readFileSync(good).subarray(0, keep));
      expect(await refusal(cut), `kept ${keep} of ${size} bytes`).toMatch(/is truncated or damaged, so it cannot be read|has no manifest\.json|lacks /);
    }
  });

  it('a damaged byte', async () => {
    const data = readFileSync(good);
    for (const at of [20, Math.floor(data.length / 2), data.length - 12]) {
      const bad = outPath();
      const copy = Buffer.from(data);
      copy[at] = copy[at]! ^ 0xff;
      writeFileSync(bad, copy);
      expect(await refusal(bad), `byte ${at}`).toMatch(/truncated or damaged|sha256 mismatch|has no manifest\.json|lacks /);
    }
  });

  it('a file that differs from the manifest', async () => {
    const bad = await repacked(good, (_m, staging) => writeFileSync(join(staging, 'state/status.json'), '{"appState":"applied"}'));
    expect(await refusal(bad)).toBe(`${bad}: state/status.json differs from what was captured (sha256 mismatch): the bundle is damaged`);
    const lacking = await repacked(good, (_m, staging) => rmSync(join(staging, 'state/target.json')));
    expect(await refusal(lacking)).toBe(`${lacking} lacks state/target.json, which its manifest lists: it was cut short or damaged`);
  });

  it('a newer format version, another format, no manifest', async () => {
    const newer = await repacked(good, (m) => { m.version = BUNDLE_VERSION + 1; });
    expect(await refusal(newer)).toBe(`${newer} is bundle format version ${BUNDLE_VERSION + 1}, newer than this fleetlab reads (${BUNDLE_VERSION}): update fleetlab to read it`);
    const other = await repacked(good, (m) => { m.format = 'sosreport'; });
    expect(await refusal(other)).toBe(`${other} is not a fleetlab bundle: its manifest's format is "sosreport"`);
    const bare = mkdtempSync(join(dir, 'bare-'));
    await tar.extract({ file: good, cwd: bare });
    rmSync(join(bare, 'manifest.json'));
    const noManifest = outPath();
    await tar.create({ gzip: true, cwd: bare, file: noManifest }, ['.']);
    expect(await refusal(noManifest)).toBe(`${noManifest} has no manifest.json: it is not a fleetlab bundle, or it was cut short`);
  });

  it('a link in the tar (a bundle never has one)', async () => {
    const linked = await repacked(good, (_m, staging) => symlinkSync('/etc/passwd', join(staging, 'state/link')));
    expect(await refusal(linked)).toMatch(/holds entries a bundle never has: .*state\/link \(SymbolicLink\)/);
  });
});

describe('kill -9 while a bundle is written', () => {
  it('leaves either no file at the output path or a whole bundle, every time', async () => {
    const script = join(dir, 'writer.mts');
    const bundleModule = fileURLToPath(new URL('../hil/capture/bundle.ts', import.meta.url));
    writeFileSync(script, `
      import { BundleWriter } from ${JSON.stringify(bundleModule)};
      import { randomBytes } from 'node:crypto';
      const out = process.argv[2];
      const w = await BundleWriter.open(out, { source: { kind: 'api', address: 'x' }, redaction: 'default', fleetlab: 't', force: true });
      process.stdout.write('open\\n');
      for (let i = 0; i < 40; i++) await w.step('s' + i, async (put) => put('f/' + i + '.bin', randomBytes(64 * 1024)));
      await w.finish({ complete: true });
      process.stdout.write('done\\n');
    `);
    const outcomes = { none: 0, whole: 0, packing: 0 };
    for (let round = 0; round < 8; round++) {
      const out = join(dir, `killed-${round}.tar.gz`);
      // The writer is this process's child itself: tsx's own command runs the script in a
      // child of its own, which a SIGKILL to tsx would leave writing into the directory.
      const child = spawn(process.execPath, ['--import', 'tsx', script, out], { stdio: ['ignore', 'pipe', 'inherit'], cwd: fileURLToPath(new URL('..', import.meta.url)) });
      const exited = new Promise((resolve) => child.once('exit', resolve));
      await Promise.race([new Promise((resolve) => child.stdout.once('data', resolve)), exited.then(() => { throw new Error('the writer exited before it opened the bundle'); })]);
      // From the first step to past the end: some rounds die while packing, some after.
      await new Promise((r) => setTimeout(r, 25 * round));
      child.kill('SIGKILL');
      await exited;
      if (existsSync(`${out}.partial`)) outcomes.packing += 1;
      if (!existsSync(out)) {
        outcomes.none += 1;
        continue;
      }
      const bundle = await readBundle(out);
      expect(bundle.manifest.complete).toBe(true);
      expect(bundle.names()).toHaveLength(40);
      outcomes.whole += 1;
    }
    console.log(`kill -9 while writing a bundle: ${outcomes.none} rounds left no file, ${outcomes.whole} a whole bundle, ${outcomes.packing} died while packing`);
    expect(outcomes.none + outcomes.whole).toBe(8);
    expect(outcomes.none).toBeGreaterThan(0);
  }, 120_000);
});
