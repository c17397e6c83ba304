/**
 * The container target's image from an installed fleetlab (device-image/container-sim/):
 * which tree the builder takes (checkout or package), and the production packages it finds
 * by walking node_modules as Node does, on real directories laid out as npm leaves them.
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fleetlabRoot } from '../src/package-root.js';
import { APP_DIR, appDockerfile, depsDockerfile } from '../device-image/container-sim/plan.js';
import { fleetlabSource } from '../device-image/container-sim/source.js';
import { layoutTopDirs, packageLayout, productionClosure, resolvePackageDir } from '../device-image/container-sim/package-closure.js';

let tmp: string;
beforeEach(() => {
  tmp = realpathSync(mkdtempSync(join(tmpdir(), 'fleetlab-image-pkg-')));
});
afterEach(() => rmSync(tmp, { recursive: true, force: true }));

function pkg(dir: string, manifest: Record<string, unknown>, files: Record<string, string> = {}): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

const shipped = { 'bin/fleetlab.js': '', 'dist/cli/main.js': '' };

describe("the builder's own fleetlab (fleetlabRoot of its module)", () => {
  const builder = 'device-image/container-sim/build';
  it('is the checkout above the source and the installed package above its compiled copy, not the project holding it', () => {
    const checkout = pkg(join(tmp, 'w/fleetlab'), { name: 'fleetlab' }, { [`${builder}.ts`]: '' });
    expect(fleetlabRoot(pathToFileURL(join(checkout, `${builder}.ts`)).href)).toBe(checkout);
    pkg(join(tmp, 'p'), { name: 'team-app' });
    const installed = pkg(join(tmp, 'p/node_modules/fleetlab'), { name: 'fleetlab' }, { [`dist/${builder}.js`]: '' });
    expect(fleetlabRoot(pathToFileURL(join(installed, `dist/${builder}.js`)).href)).toBe(installed);
  });
});

describe('fleetlabSource', () => {
  it('a checkout has the sources and the lockfile', () => {
    pkg(tmp, { name: 'fleetlab' }, { 'cli/main.ts': '', 'package-lock.json': '{}', ...shipped });
    expect(fleetlabSource(tmp)).toEqual({ kind: 'checkout', root: tmp });
  });

  it('the installed package has the compiled tree only', () => {
    const dir = pkg(join(tmp, 'node_modules/fleetlab'), { name: 'fleetlab' }, shipped);
    // The team's own lockfile above it does not make it a checkout.
    writeFileSync(join(tmp, 'package-lock.json'), '{}');
    expect(fleetlabSource(dir)).toEqual({ kind: 'package', root: dir });
  });

  it('refuses a directory with neither, saying what to do', () => {
    pkg(tmp, { name: 'fleetlab' }, { 'bin/fleetlab.js': '' });
    expect(() => fleetlabSource(tmp)).toThrow(/neither a fleetlab checkout .* nor an installed fleetlab package.*npm install/);
  });
});

describe('resolvePackageDir', () => {
  it('looks in node_modules of the directory, then of each one above, never in node_modules/node_modules', () => {
    const hoisted = pkg(join(tmp, 'node_modules/a'), { name: 'a' });
    const nested = pkg(join(tmp, 'node_modules/b/node_modules/a'), { name: 'a' });
    pkg(join(tmp, 'node_modules/node_modules/c'), { name: 'c' });
    expect(resolvePackageDir(join(tmp, 'node_modules/b'), 'a')).toBe(nested);
    expect(resolvePackageDir(join(tmp, 'node_modules/x'), 'a')).toBe(hoisted);
    expect(resolvePackageDir(join(tmp, 'node_modules/b'), 'c')).toBeUndefined();
    expect(resolvePackageDir(tmp, 'missing')).toBeUndefined();
  });
});

describe('productionClosure', () => {
  /** A project as npm leaves it: fleetlab and its dependencies hoisted next to the team's own. */
  function project(): string {
    pkg(tmp, { name: 'team-app', dependencies: { fleetlab: '*', lodash: '*' } });
    const fleetlab = pkg(join(tmp, 'node_modules/fleetlab'), {
      name: 'fleetlab',
      version: '0.2.0',
      dependencies: { fastify: '^5', '@scope/lib': '^1', semver: '^7' },
      optionalDependencies: { 'absent-optional': '*' },
      devDependencies: { typescript: '*' },
    });
    pkg(join(tmp, 'node_modules/fastify'), { name: 'fastify', version: '5.1.0', dependencies: { semver: '^6', 'light-my-request': '*' }, peerDependencies: { 'absent-peer': '*', 'present-peer': '*' } });
    // A version conflict: fastify's semver is nested in it, fleetlab's in fleetlab's own node_modules.
    pkg(join(tmp, 'node_modules/fastify/node_modules/semver'), { name: 'semver', version: '6.3.1' });
    pkg(join(fleetlab, 'node_modules/semver'), { name: 'semver', version: '7.6.0' });
    pkg(join(tmp, 'node_modules/light-my-request'), { name: 'light-my-request', version: '6.0.0', dependencies: { fastify: '*' } });
    pkg(join(tmp, 'node_modules/@scope/lib'), { name: '@scope/lib', version: '1.2.3', optionalDependencies: { addon: '*' } });
    pkg(join(tmp, 'node_modules/addon'), { name: 'addon', version: '2.0.0' }, { 'build/Release/addon.node': 'ELF' });
    pkg(join(tmp, 'node_modules/present-peer'), { name: 'present-peer', version: '1.0.0' });
    // The team's own packages and fleetlab's dev dependencies stay out.
    pkg(join(tmp, 'node_modules/lodash'), { name: 'lodash', version: '4.17.21' });
    pkg(join(tmp, 'node_modules/typescript'), { name: 'typescript', version: '6.0.3' });
    return fleetlab;
  }

  it("takes what Node resolves from fleetlab, recursively: hoisted, nested and fleetlab's own", () => {
    const fleetlab = project();
    const closure = productionClosure(fleetlab);
    expect(closure.map((p) => `${p.path.slice(tmp.length + 1)} ${p.name}@${p.version}`)).toEqual([
      'node_modules/@scope/lib @scope/lib@1.2.3',
      'node_modules/addon addon@2.0.0',
      'node_modules/fastify fastify@5.1.0',
      'node_modules/fastify/node_modules/semver semver@6.3.1',
      'node_modules/fleetlab/node_modules/semver semver@7.6.0',
      'node_modules/light-my-request light-my-request@6.0.0',
      'node_modules/present-peer present-peer@1.0.0',
    ]);
    expect(closure.every((p) => p.path === p.realPath)).toBe(true);
  });

  it('refuses a missing required dependency, naming who needs it and what to run', () => {
    const fleetlab = project();
    rmSync(join(tmp, 'node_modules/light-my-request'), { recursive: true });
    expect(() => productionClosure(fleetlab)).toThrow(/light-my-request, a dependency of fastify@5.1.0, is not installed.*run npm install/);
  });

  it('follows a linked package to its real place and resolves its dependencies from there', () => {
    const fleetlab = pkg(join(tmp, 'app/node_modules/fleetlab'), { name: 'fleetlab', dependencies: { linked: '*' } });
    pkg(join(tmp, 'packages/linked'), { name: 'linked', version: '1.0.0', dependencies: { dep: '*' } });
    pkg(join(tmp, 'packages/linked/node_modules/dep'), { name: 'dep', version: '3.0.0' });
    symlinkSync('../../packages/linked', join(tmp, 'app/node_modules/linked'));
    const closure = productionClosure(fleetlab);
    expect(closure.map((p) => [p.path.slice(tmp.length + 1), p.realPath.slice(tmp.length + 1)])).toEqual([
      ['app/node_modules/linked', 'packages/linked'],
      ['packages/linked/node_modules/dep', 'packages/linked/node_modules/dep'],
    ]);
    const layout = packageLayout(fleetlab, closure);
    expect(layout).toEqual({ root: tmp, fleetlab: 'app/node_modules/fleetlab', paths: ['app/node_modules/linked', 'packages/linked'] });
  });
});

describe('packageLayout', () => {
  it("mirrors the project from its root: outermost package dirs only, fleetlab's own dir left to the app image", () => {
    pkg(tmp, { name: 'team-app' });
    const fleetlab = pkg(join(tmp, 'node_modules/fleetlab'), { name: 'fleetlab', dependencies: { a: '*', '@s/b': '*' } });
    pkg(join(tmp, 'node_modules/a'), { name: 'a', version: '1.0.0', dependencies: { c: '*' } });
    pkg(join(tmp, 'node_modules/a/node_modules/c'), { name: 'c', version: '1.0.0' });
    pkg(join(tmp, 'node_modules/@s/b'), { name: '@s/b', version: '1.0.0' });
    const layout = packageLayout(fleetlab, productionClosure(fleetlab));
    expect(layout).toEqual({ root: tmp, fleetlab: 'node_modules/fleetlab', paths: ['node_modules/@s/b', 'node_modules/a'] });
    expect(layoutTopDirs(layout)).toEqual(['node_modules']);
  });

  it('is rooted at fleetlab itself when every dependency is nested in it', () => {
    const fleetlab = pkg(join(tmp, 'node_modules/fleetlab'), { name: 'fleetlab', dependencies: { a: '*' } });
    pkg(join(fleetlab, 'node_modules/a'), { name: 'a', version: '1.0.0' });
    expect(packageLayout(fleetlab, productionClosure(fleetlab))).toEqual({ root: fleetlab, fleetlab: '', paths: ['node_modules/a'] });
  });

  it('reaches up to a node_modules above the project when Node resolves from there', () => {
    const fleetlab = pkg(join(tmp, 'team/node_modules/fleetlab'), { name: 'fleetlab', dependencies: { a: '*', b: '*' } });
    pkg(join(tmp, 'team/node_modules/a'), { name: 'a', version: '1.0.0' });
    pkg(join(tmp, 'node_modules/b'), { name: 'b', version: '1.0.0' });
    const layout = packageLayout(fleetlab, productionClosure(fleetlab));
    expect(layout).toEqual({ root: tmp, fleetlab: 'team/node_modules/fleetlab', paths: ['node_modules/b', 'team/node_modules/a'] });
    expect(layoutTopDirs(layout)).toEqual(['node_modules', 'team']);
  });
});

describe('Dockerfiles of an installed fleetlab', () => {
  it('copy each top dir under the image root and start fleetlab where it sits; the checkout default is unchanged', () => {
    expect(depsDockerfile('base:1', 'h', ['node_modules', 'team'])).toContain(`COPY node_modules ${APP_DIR}/node_modules\nCOPY team ${APP_DIR}/team\n`);
    expect(depsDockerfile('base:1', 'h')).toBe(`FROM base:1\nCOPY node_modules ${APP_DIR}/node_modules\nLABEL io.fleetlab.image=device-sim-deps io.fleetlab.inputs=h\n`);
    const app = appDockerfile('deps:2', 'h', `${APP_DIR}/node_modules/fleetlab`);
    expect(app).toContain(`COPY dist ${APP_DIR}/node_modules/fleetlab/dist`);
    expect(app).toContain(`WORKDIR ${APP_DIR}/node_modules/fleetlab`);
    expect(app).toContain(`ENTRYPOINT ["node", "${APP_DIR}/node_modules/fleetlab/bin/fleetlab.js"]`);
    expect(appDockerfile('deps:2', 'h')).toBe(appDockerfile('deps:2', 'h', APP_DIR));
  });
});
