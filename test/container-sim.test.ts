/**
 * The planning half of the container target's image builder (device-image/container-sim/):
 * which packages go into the image, how the tags follow their inputs, what the Dockerfiles say.
 * The building half is exercised by the HIL suite on the container target.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { APP_DIR, BASE_PACKAGES, appDockerfile, baseTag, depsDockerfile } from '../device-image/container-sim/plan.js';
import { deviceSources, productionPackageDirs } from '../device-image/container-sim/source.js';

const root = join(import.meta.dirname, '..');

describe('productionPackageDirs', () => {
  it('keeps top-level production packages present on disk, drops dev, nested and missing ones', () => {
    const lock = {
      packages: {
        '': {},
        'node_modules/fastify': {},
        'node_modules/@scope/lib': {},
        'node_modules/vitest': { dev: true },
        'node_modules/fastify/node_modules/semver': {},
        'node_modules/@esbuild/darwin-arm64': {},
      },
    };
    const dirs = productionPackageDirs(lock, (d) => d !== 'node_modules/@esbuild/darwin-arm64');
    expect(dirs).toEqual(['node_modules/@scope/lib', 'node_modules/fastify']);
  });

  it("on this checkout's lockfile: the runtime dependencies are in, the dev tools are out", () => {
    const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
    const dirs = productionPackageDirs(lock, (d) => existsSync(join(root, d)));
    for (const dep of Object.keys(JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).dependencies)) expect(dirs).toContain(`node_modules/${dep}`);
    // The harness's runner (@playwright/test) and testcontainers are runtime dependencies of the
    // package a team installs, so they are in; fleetlab's own dev tools are not.
    for (const dev of ['node_modules/vitest', 'node_modules/typescript', 'node_modules/tsx', 'node_modules/pinejs-client-core']) expect(dirs).not.toContain(dev);
  });

  it('refuses a lockfile without a packages map', () => {
    expect(() => productionPackageDirs({}, () => true)).toThrow(/lockfile v2/);
  });
});

describe('baseTag', () => {
  const inputs = { suite: 'bookworm', mirror: 'http://deb.debian.org/debian', packages: BASE_PACKAGES, nodeSha256: 'a'.repeat(64) };
  it('follows every input and ignores the order of the package list', () => {
    const tag = baseTag(inputs);
    expect(tag).toMatch(/^[0-9a-f]{16}$/);
    expect(baseTag({ ...inputs, packages: [...BASE_PACKAGES].reverse() })).toBe(tag);
    expect(baseTag({ ...inputs, suite: 'trixie' })).not.toBe(tag);
    expect(baseTag({ ...inputs, nodeSha256: 'b'.repeat(64) })).not.toBe(tag);
    expect(baseTag({ ...inputs, packages: [...BASE_PACKAGES, 'curl'] })).not.toBe(tag);
  });
});

describe('Dockerfiles', () => {
  it('deps sits on the base; the app sits on the deps and starts the simulated device', () => {
    expect(depsDockerfile('fleetlab/device-sim-base:1', 'h').split('\n')[0]).toBe('FROM fleetlab/device-sim-base:1');
    const app = appDockerfile('fleetlab/device-sim-deps:2', 'h');
    expect(app.split('\n')[0]).toBe('FROM fleetlab/device-sim-deps:2');
    expect(app).toContain(`ENTRYPOINT ["node", "${APP_DIR}/bin/fleetlab.js"]`);
    const cmd = JSON.parse(/^CMD (.*)$/m.exec(app)![1]!) as string[];
    expect(cmd.slice(0, 2)).toEqual(['sim', 'device']);
    expect(cmd[cmd.indexOf('--listen-address') + 1]).toBe('0.0.0.0');
  });
});

describe('deviceSources', () => {
  it('lists the CLI and the sim sources, no tests or declarations', () => {
    const sources = deviceSources(root);
    expect(sources).toContain('cli/main.ts');
    expect(sources).toContain('sim/device.ts');
    expect(sources.every((f) => /^(cli|src|sim)\//.test(f) && f.endsWith('.ts') && !f.endsWith('.d.ts'))).toBe(true);
  });

  // The image holds only these trees, and the floor rule lets cli/ import any room: a module
  // the device loads from elsewhere would pass every type check and fail at its first start.
  it('holds every module `fleetlab sim device` loads', () => {
    const SPEC = /(?:^|[\s;])(?:import|export)\s(?!type\s)[^'";]*?from\s*['"](\.{1,2}\/[^'"]+)['"]|(?:^|[\s;])import\s+['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g;
    const reached = new Set<string>();
    // cli/main.ts loads each command's module at its first use; of those, the device runs sim's.
    const visit = (file: string, followDynamic: boolean): void => {
      if (reached.has(file)) return;
      reached.add(file);
      for (const m of readFileSync(join(root, file), 'utf8').matchAll(SPEC)) {
        if (m[3] && !followDynamic) continue;
        visit(relative(root, resolve(root, dirname(file), (m[1] ?? m[2] ?? m[3])!)).replace(/\.js$/, '.ts'), followDynamic);
      }
    };
    visit('cli/main.ts', false);
    visit('sim/device.ts', true);
    const sources = new Set(deviceSources(root));
    expect([...reached].filter((f) => !sources.has(f))).toEqual([]);
  });
});
