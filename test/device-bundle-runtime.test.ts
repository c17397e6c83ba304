/**
 * The device bundle as a supervisor runs on a board: what it holds in memory once it answers.
 * Run under each Node the suite runs on (CI runs it on Node 24, what devices run).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { localSupervisorArgs } from '../bench/supervisor-start.js';
import { bundleSupervisor } from '../device-image/payload.js';
import { waitForPing } from '../qemu/boot.js';
import { freePort } from '../src/free-port.js';
import { fleetlabRoot } from '../src/package-root.js';

const work = mkdtempSync(join(tmpdir(), 'fleetlab-bundle-run-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/**
 * Starts the bundle as a local-mode supervisor on `work`, makes one request through the API's
 * whole path, stops it, and gives what Node had loaded (written as the process exits: the
 * supervisor exits 0 on SIGTERM).
 */
async function startAndStop(bundle: string, loaded: string): Promise<string[]> {
  const preload = join(work, 'modules.cjs');
  writeFileSync(preload, `process.on('exit', () => require('node:fs').writeFileSync(process.env.FLEETLAB_TEST_MODULES, process.moduleLoadList.join('\\n')));\n`);
  const port = await freePort();
  const child = spawn(process.execPath, ['--require', preload, bundle, ...localSupervisorArgs(port, work, process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock')], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, FLEETLAB_TEST_MODULES: loaded },
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    await waitForPing(`http://127.0.0.1:${port}`, 30_000, () => (child.exitCode === null ? undefined : `the supervisor exited: ${stderr}`), 50);
    expect((await fetch(`http://127.0.0.1:${port}/ping`)).status).toBe(200);
  } finally {
    child.kill('SIGTERM');
  }
  expect(await exited, stderr).toBe(0);
  return readFileSync(loaded, 'utf8').split('\n');
}

describe('the device bundle, started as a supervisor', () => {
  it('loads no HTTP client beside node:http (neither the undici package nor Node\'s bundled undici), nor what it loads on first use', async () => {
    const bundle = join(work, 'fleetlab-device.mjs');
    await bundleSupervisor(fleetlabRoot(import.meta.url), bundle);
    // The first start creates the device's store (minting its uuid and key loads crypto); a
    // device starts on an existing store every time after.
    await startAndStop(bundle, join(work, 'first.txt'));
    const modules = await startAndStop(bundle, join(work, 'second.txt'));
    expect(modules).toContain('NativeModule http');
    expect(modules.filter((m) => m.includes('undici'))).toEqual([]);
    // Dependencies and our modules import these at load time; the bundle loads them only when used (DEVICE_LAZY_BUILTINS).
    expect(modules.filter((m) => /^NativeModule (tls|https|http2|zlib|crypto|readline|v8)$/.test(m))).toEqual([]);
  }, 90_000);
});
