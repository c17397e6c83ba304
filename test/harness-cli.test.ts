/**
 * `fleetlab init` on real directories, and how `fleetlab test` turns its flags into
 * Playwright's: what a team's first two commands do before any device starts.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CONFIG_FILE, EXAMPLE_APP, SPEC_FILE, initProject, neededAllowScripts } from '../hil/harness/init.js';
import { readRunApp } from '../hil/harness/global-setup.js';
import { playwrightArgv, qemuWorkers, runTests } from '../hil/harness/run.js';
import { loadCompose } from '../hil/release/compose.js';
import { buildCommand, installSqliteCommand, loadFailure, requireNativeModules } from '../src/native-modules.js';
import { sqliteDriverName } from '../src/cloud/db/sqlite.js';

let dir: string;
let lines: string[];
const init = (force = false) => initProject({ dir, force, log: (l) => lines.push(l), rebuild: false });

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-init-'));
  lines = [];
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('fleetlab init', () => {
  it('with a compose file: a config naming it, a spec for its services, the approvals in package.json', async () => {
    writeFileSync(join(dir, 'docker-compose.yml'), 'services:\n  api: { image: a }\n  db: { image: b }\n');
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'team-app', allowScripts: { ssh2: true } }, null, 2));
    await init();
    expect(readFileSync(join(dir, CONFIG_FILE), 'utf8')).toContain(`app: "./docker-compose.yml"`);
    const spec = readFileSync(join(dir, SPEC_FILE), 'utf8');
    expect(spec).toContain(`from 'fleetlab/test'`);
    expect(spec).toContain('["api","db"]');
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { allowScripts: Record<string, boolean> };
    // The team's own decision on ssh2 stands; the rest is added.
    // better-sqlite3 is built only for a Node without node:sqlite (this file runs on 20, 22 and 24 in CI).
    const sqliteBuilt = sqliteDriverName() === 'better-sqlite3';
    expect(pkg.allowScripts).toEqual({ 'better-sqlite3': sqliteBuilt, epoll: true, 'cpu-features': false, protobufjs: false, ssh2: true });
    expect(neededAllowScripts()['better-sqlite3']).toBe(sqliteBuilt);
    expect(lines).toEqual([
      'found docker-compose.yml',
      `wrote ${CONFIG_FILE}`,
      `wrote ${SPEC_FILE}`,
      `package.json: allowScripts += "better-sqlite3": ${sqliteBuilt}, "epoll": true, "cpu-features": false, "protobufjs": false (npm 12 runs only the install scripts listed there)`,
      'native modules: built',
      'next: npx fleetlab test            (your specs in ./fleetlab, on a simulated device; --target container|qemu|board)',
    ]);
    expect(existsSync(join(dir, 'compose.yaml'))).toBe(false);
  });

  it('without one: says so and writes a two-service example app that fleetlab can carry', async () => {
    writeFileSync(join(dir, 'package.json'), '{"name":"empty"}');
    await init();
    expect(lines[0]).toContain('no compose file here');
    for (const file of Object.keys(EXAMPLE_APP)) expect(existsSync(join(dir, file))).toBe(true);
    const project = loadCompose(dir);
    expect(project.services.map((s) => s.name)).toEqual(['web', 'worker']);
    expect(project.volumes).toEqual(['data']);
  });

  it('refuses to overwrite without --force, and writes nothing then', async () => {
    writeFileSync(join(dir, 'compose.yaml'), 'services:\n  api: { image: a }\n');
    writeFileSync(join(dir, CONFIG_FILE), '// mine\n');
    await expect(init()).rejects.toThrow(`${CONFIG_FILE} already exists in ${dir}; nothing was written (run fleetlab init --force to overwrite)`);
    expect(readFileSync(join(dir, CONFIG_FILE), 'utf8')).toBe('// mine\n');
    expect(existsSync(join(dir, SPEC_FILE))).toBe(false);
    await init(true);
    expect(readFileSync(join(dir, CONFIG_FILE), 'utf8')).toContain('defineConfig');
  });

  it('writes its files for a compose file fleetlab cannot run as it is, and says what is wrong, with lines', async () => {
    writeFileSync(join(dir, 'compose.yaml'), 'services:\n  api:\n    image: a\n    logging: { driver: syslog }\n    restart: sometimes\n  db: { image: b, expose: [5432] }\n');
    await init();
    expect(lines.slice(0, 5)).toEqual([
      'found compose.yaml',
      `wrote ${CONFIG_FILE}`,
      `wrote ${SPEC_FILE}`,
      `compose.yaml: 2 keys fleetlab does not carry to the device: services.api.logging (line 4), services.db.expose (line 6); ${CONFIG_FILE} lists them under ignoreComposeKeys, commented out: uncomment those your app can run without, remove the others from compose.yaml`,
      'compose.yaml:5: services.api.restart: must be one of no, always, on-failure, unless-stopped (on-failure:N is not supported) (fix it before fleetlab test)',
    ]);
    expect(readFileSync(join(dir, CONFIG_FILE), 'utf8')).toContain('  // ignoreComposeKeys: ["services.api.logging","services.db.expose"],\n});');
    expect(readFileSync(join(dir, SPEC_FILE), 'utf8')).toContain('["api","db"]');
  });

  it('a run warns about each key ignoreComposeKeys leaves out, and each entry that names none', () => {
    writeFileSync(join(dir, 'compose.yaml'), 'services:\n  api:\n    image: a\n    logging: { driver: syslog }\n  db: { image: b, logging: {} }\n');
    const file = join(dir, 'compose.yaml');
    const { project, warnings } = readRunApp({ app: dir, ignoreComposeKeys: ['logging', 'expose'] });
    expect(project.services.map((s) => s.name)).toEqual(['api', 'db']);
    expect(warnings).toEqual([
      `${file}:4: services.api.logging is ignored (ignoreComposeKeys: "logging"): the device runs the service without it`,
      `${file}:5: services.db.logging is ignored (ignoreComposeKeys: "logging"): the device runs the service without it`,
      `ignoreComposeKeys: "expose" names no key fleetlab refuses in ${file}; remove it from fleetlab.config`,
    ]);
    expect(() => readRunApp({ app: dir })).toThrow(`${file}: 2 problems:\n  ${file}:4: services.api.logging: is not supported by fleetlab yet`);
  });

  it('without package.json: says how to install first', async () => {
    writeFileSync(join(dir, 'compose.yaml'), 'services:\n  api: { image: a }\n');
    await init();
    expect(lines).toContain('no package.json here: install fleetlab with npm in this directory first (npm install fleetlab)');
  });
});

describe('fleetlab test flags', () => {
  const base = { target: 'sim', playwrightArgs: [] as string[] };
  it('maps target, repeat and shard, and passes the rest through', () => {
    expect(playwrightArgv('/p/fleetlab.config.ts', { ...base, repeat: 3, shard: '2/4', playwrightArgs: ['--grep', 'update'] })).toEqual([
      'test', '-c', '/p/fleetlab.config.ts', '--project=sim', '--repeat-each=3', '--shard=2/4', '--grep', 'update',
    ]);
  });
  it('runs one device at a time on qemu and board unless told', () => {
    expect(playwrightArgv('c', { ...base, target: 'qemu' })).toContain('--workers=1');
    // fleetlab test gives qemu a board per two cores (qemuWorkers), never two workers one board.
    expect(playwrightArgv('c', { ...base, target: 'qemu', workers: qemuWorkers(8) })).toContain('--workers=4');
    expect([1, 2, 3, 4].map(qemuWorkers)).toEqual([1, 1, 1, 2]);
    expect(playwrightArgv('c', { ...base, target: 'board', playwrightArgs: ['--workers=2'] })).not.toContain('--workers=1');
    expect(playwrightArgv('c', { ...base, target: 'container' })).not.toContain('--workers=1');
    // A lab run: as many workers as the lab has boards for it, each leasing its own.
    expect(playwrightArgv('c', { ...base, target: 'board', workers: 2 })).toContain('--workers=2');
    expect(playwrightArgv('c', { ...base, target: 'board', workers: 2, playwrightArgs: ['-j', '1'] })).not.toContain('--workers=2');
  });
  it('hands lab boards to the board target only, and says so before Playwright starts', async () => {
    writeFileSync(join(dir, 'fleetlab.config.ts'), 'export default {};\n');
    await expect(runTests({ cwd: dir, target: 'sim', playwrightArgs: [], lab: { file: 'fleetlab.lab.yaml', tags: [] } })).rejects.toThrow('--lab hands out lab boards, which is the board target\'s: add --target board (got --target sim)');
    writeFileSync(join(dir, 'fleetlab.lab.yaml'), 'boards:\n  - name: pi-a\n    tags: [rpi4]\n    host: 127.0.0.1\n    privateKey: ./k\n');
    await expect(runTests({ cwd: dir, target: 'board', playwrightArgs: [], lab: { file: 'fleetlab.lab.yaml', tags: ['rpi5'] } })).rejects.toThrow('no board has the tags [rpi5]; boards: pi-a [rpi4]');
  });
  it('boots a card image on the qemu target only, and one that exists', async () => {
    writeFileSync(join(dir, 'fleetlab.config.ts'), 'export default {};\n');
    await expect(runTests({ cwd: dir, target: 'board', playwrightArgs: [], flashImage: 'card.img' })).rejects.toThrow('--flash-image boots a card image under QEMU: add --target qemu (got --target board)');
    await expect(runTests({ cwd: dir, target: 'qemu', playwrightArgs: [], flashImage: 'card.img' })).rejects.toThrow(/--flash-image .*card\.img does not exist \(fleetlab card build --board rpi4 makes one\)/);
  });
  it('refuses bad values with what would be right', () => {
    expect(() => playwrightArgv('c', { ...base, target: 'pi' })).toThrow('--target must be one of sim, container, qemu, board, not "pi"');
    expect(() => playwrightArgv('c', { ...base, repeat: 0 })).toThrow('--repeat must be a positive integer, not 0');
    expect(() => playwrightArgv('c', { ...base, shard: '5/4' })).toThrow('--shard must be i/n with 1 <= i <= n (e.g. 2/4), not "5/4"');
    expect(() => playwrightArgv('c', { ...base, shard: 'half' })).toThrow('--shard must be i/n');
  });
});

describe('native modules', () => {
  it('load here, so nothing is said', () => {
    expect(() => requireNativeModules(['better-sqlite3', 'epoll'])).not.toThrow();
  });
  it('the fix approves and builds exactly the missing ones', () => {
    expect(buildCommand(['epoll'])).toBe('npm install-scripts approve epoll && npm rebuild epoll');
  });
  it('an addon built for another Node is told apart from one never built', () => {
    // What Node 20 said of an epoll built for Node 24 (Node changed after npm install).
    const otherNode =
      "The module '/work/main/node_modules/epoll/build/Release/epoll.node'\nwas compiled against a different Node.js version using\nNODE_MODULE_VERSION 137. This version of Node.js requires\nNODE_MODULE_VERSION 115. Please try re-compiling or re-installing\nthe module (for instance, using `npm rebuild` or `npm install`).";
    expect(loadFailure(otherNode)).toBe(`built for another Node (NODE_MODULE_VERSION 137; this Node, ${process.version}, needs 115)`);
    expect(loadFailure("Could not locate the bindings file. Tried:\n → /x/build/epoll.node")).toBe('not built');
    expect(loadFailure("Cannot find module 'better-sqlite3'\nRequire stack:\n- /x/dist/src/native-modules.js")).toBe('not installed');
    // The optional peer's range, from fleetlab's own package.json.
    expect(installSqliteCommand()).toMatch(/^npm install --save-dev better-sqlite3@\^12\.\d+\.\d+$/);
  });
});
