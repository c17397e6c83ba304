/**
 * Supervisor configuration (flag > env > file > default) and system tool lookup.
 */
import { readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { describeSettings, envName, flagName, loadConfig, settings } from '../src/supervisor/config.js';
import { findTool, missingToolError, requireTool, tools, type ToolSpec } from '../src/tools.js';
import { qemuTools } from '../device-image/tools.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fleetlab-config-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function configFile(name: string, content: unknown): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, typeof content === 'string' ? content : JSON.stringify(content));
  return path;
}

/** The FleetlabError thrown by fn (fails the test when nothing or something else is thrown). */
function thrown(fn: () => unknown): FleetlabError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(FleetlabError);
    return err as FleetlabError;
  }
  throw new Error('expected a FleetlabError, nothing was thrown');
}

describe('loadConfig', () => {
  it('gives every setting its default when no source says otherwise', () => {
    const config = loadConfig({ env: {} });
    for (const s of settings) expect(config[s.key], s.key).toBe(s.defaultValue);
    expect(config.port).toBe(48484);
    expect(config.dataDir).toBe('/var/lib/fleetlab');
    expect(config.vendor).toBe('platform');
    expect(config.localMode).toBe(false);
  });

  it('does not read process.env unless given it', () => {
    const saved = process.env.FLEETLAB_PORT;
    process.env.FLEETLAB_PORT = '1234';
    try {
      expect(loadConfig().port).toBe(48484);
    } finally {
      if (saved === undefined) delete process.env.FLEETLAB_PORT;
      else process.env.FLEETLAB_PORT = saved;
    }
  });

  it('names environment variables FLEETLAB_<SNAKE_CASE> and flags --kebab-case', () => {
    expect(envName('dataDir')).toBe('FLEETLAB_DATA_DIR');
    expect(envName('ledActiveLow')).toBe('FLEETLAB_LED_ACTIVE_LOW');
    expect(envName('port')).toBe('FLEETLAB_PORT');
    expect(flagName('dataDir')).toBe('--data-dir');
    const config = loadConfig({ env: { FLEETLAB_DATA_DIR: '/srv/fl', FLEETLAB_LED_ACTIVE_LOW: '1', FLEETLAB_LOCAL_MODE: 'true', FLEETLAB_PORT: '4000' } });
    expect(config.dataDir).toBe('/srv/fl');
    expect(config.ledActiveLow).toBe(true);
    expect(config.localMode).toBe(true);
    expect(config.port).toBe(4000);
  });

  it('precedence: flag > env > file > default, per setting', async () => {
    const file = await configFile('precedence.json', { dataDir: '/from/file', vendor: 'filevendor', port: 1111, lockRoot: '/file/locks' });
    const env = { FLEETLAB_DATA_DIR: '/from/env', FLEETLAB_VENDOR: 'envvendor' };
    const config = loadConfig({ file, env, flags: { dataDir: '/from/flag', logLevel: undefined } });
    expect(config.dataDir).toBe('/from/flag'); // flag over env and file
    expect(config.vendor).toBe('envvendor'); // env over file
    expect(config.port).toBe(1111); // file over default
    expect(config.lockRoot).toBe('/file/locks');
    expect(config.logLevel).toBe('info'); // an undefined flag means "not given"
    expect(config.dockerSocket).toBe('/var/run/docker.sock'); // default
  });

  it('coerces flag and file values by kind', async () => {
    const file = await configFile('kinds.json', { localMode: 'true', ledActiveLow: true, port: '2222' });
    const config = loadConfig({ file, env: {}, flags: { localMode: '0' } });
    expect(config.localMode).toBe(false);
    expect(config.ledActiveLow).toBe(true);
    expect(config.port).toBe(2222);
  });

  it('a bad number is a FleetlabError naming the setting and where it came from', async () => {
    for (const value of ['abc', '12.5', '-1']) {
      const err = thrown(() => loadConfig({ env: { FLEETLAB_PORT: value } }));
      expect(err.code).toBe('SUP_ERR_BAD_REQUEST');
      expect(err.message).toContain('FLEETLAB_PORT');
      expect(err.message).toContain('port');
    }
    const flagErr = thrown(() => loadConfig({ env: {}, flags: { port: 'many' } }));
    expect(flagErr.message).toContain('--port');
    const file = await configFile('badport.json', { port: 'x' });
    const fileErr = thrown(() => loadConfig({ file, env: {} }));
    expect(fileErr.message).toContain(file);
    expect(fileErr.message).toContain('port');
  });

  it('a port outside 1..65535 is refused, naming the setting', () => {
    for (const value of ['0', '65536']) {
      const err = thrown(() => loadConfig({ env: { FLEETLAB_PORT: value } }));
      expect(err.code).toBe('SUP_ERR_BAD_REQUEST');
      expect(err.message).toMatch(/^port /);
    }
  });

  it('a bad boolean is a FleetlabError naming the setting', () => {
    for (const value of ['yes', 'on', '2', 'TRUE']) {
      const err = thrown(() => loadConfig({ env: { FLEETLAB_LOCAL_MODE: value } }));
      expect(err.code).toBe('SUP_ERR_BAD_REQUEST');
      expect(err.message).toContain('FLEETLAB_LOCAL_MODE');
      expect(err.message).toContain('localMode');
    }
  });

  it('a vendor that is not a lowercase word is refused', () => {
    const err = thrown(() => loadConfig({ env: { FLEETLAB_VENDOR: 'Bad Vendor' } }));
    expect(err.message).toContain('vendor');
    expect(loadConfig({ env: { FLEETLAB_VENDOR: 'balena' } }).vendor).toBe('balena');
  });

  it('a publish address is an IP address or empty', () => {
    expect(loadConfig({ env: {}, flags: { publishAddress: '127.77.3.9' } }).publishAddress).toBe('127.77.3.9');
    expect(loadConfig({ env: { FLEETLAB_PUBLISH_ADDRESS: '::1' } }).publishAddress).toBe('::1');
    for (const value of ['localhost', '127.77.3', '127.0.0.1:8080']) {
      const err = thrown(() => loadConfig({ env: {}, flags: { publishAddress: value } }));
      expect(err.code).toBe('SUP_ERR_BAD_REQUEST');
      expect(err.message).toMatch(/^publishAddress /);
    }
  });

  it('a config file with an unknown key is refused, naming the key', async () => {
    const file = await configFile('unknown.json', { dataDir: '/x', dataDirectory: '/typo' });
    const err = thrown(() => loadConfig({ file, env: {} }));
    expect(err.code).toBe('SUP_ERR_BAD_REQUEST');
    expect(err.message).toContain('dataDirectory');
    expect(err.message).toContain(file);
  });

  it('a config file that is not a JSON object, or not JSON, or absent, is refused', async () => {
    for (const content of ['[1,2]', '"text"', 'null', '{"port": 1', '']) {
      const file = await configFile('bad.json', content);
      const err = thrown(() => loadConfig({ file, env: {} }));
      expect(err.code, content).toBe('SUP_ERR_BAD_REQUEST');
      expect(err.message).toContain(file);
    }
    const missing = join(dir, 'does-not-exist.json');
    expect(thrown(() => loadConfig({ file: missing, env: {} })).message).toContain(missing);
  });

  it('a string setting given a non-string in the file is refused', async () => {
    const file = await configFile('nonstring.json', { dataDir: 42 });
    expect(thrown(() => loadConfig({ file, env: {} })).message).toContain('dataDir');
  });

  it('describeSettings lists every setting with its flag, environment variable and default', () => {
    const text = describeSettings();
    const lines = text.split('\n');
    expect(lines).toHaveLength(settings.length);
    for (const s of settings) {
      const line = lines.find((l) => l.trimStart().startsWith(`${flagName(s.key)} `));
      expect(line, s.key).toBeDefined();
      expect(line).toContain(envName(s.key));
      expect(line).toContain(JSON.stringify(s.defaultValue));
      expect(line).toContain(s.description);
    }
  });
});

describe('system tools', () => {
  const absent: ToolSpec = { candidates: ['fleetlab-test-no-such-tool'], debianPackage: 'fleetlab-test-package' };

  it('a missing tool gives SUP_ERR_TOOL_MISSING naming the Debian package', () => {
    expect(findTool(absent)).toBeUndefined();
    const err = thrown(() => requireTool(absent));
    expect(err.code).toBe('SUP_ERR_TOOL_MISSING');
    expect(err.statusCode).toBe(500);
    expect(err.message).toContain('fleetlab-test-no-such-tool');
    expect(err.message).toContain('fleetlab-test-package');
    expect(err.message).toContain('apt-get install fleetlab-test-package');
  });

  it('every known tool names its Debian package when missing', () => {
    for (const [name, spec] of Object.entries(tools)) {
      const err = missingToolError(spec);
      expect(err.code, name).toBe('SUP_ERR_TOOL_MISSING');
      expect(err.message).toContain(`"${spec.debianPackage}"`);
    }
  });

  it('scripts/provision installs the Debian package of every tool fleetlab looks for', () => {
    const script = readFileSync(new URL('../scripts/provision', import.meta.url), 'utf8');
    const block = script.slice(script.indexOf('packages=('), script.indexOf('\n)\n'));
    const provisioned = new Set(block.split('\n').flatMap((line) => line.replace(/#.*/, '').trim().split(/\s+/)));
    // Essential in Debian: on every system, never named to apt-get.
    const essential = new Set(['mount']);
    for (const [name, spec] of Object.entries({ ...tools, ...qemuTools })) {
      expect(provisioned.has(spec.debianPackage) || essential.has(spec.debianPackage), `${name}: ${spec.debianPackage}`).toBe(true);
    }
  });

  it('finds an executable on the given PATH, skipping non-executable files and empty entries', async () => {
    const binA = join(dir, 'bin-a');
    const binB = join(dir, 'bin-b');
    await rm(binA, { recursive: true, force: true });
    await rm(binB, { recursive: true, force: true });
    await mkdir(binA);
    await mkdir(binB);
    await writeFile(join(binA, 'fltool'), '#!/bin/sh\n');
    await chmod(join(binA, 'fltool'), 0o644); // present but not executable
    await writeFile(join(binB, 'fltool'), '#!/bin/sh\n');
    await chmod(join(binB, 'fltool'), 0o755);
    const spec: ToolSpec = { candidates: ['fltool'], debianPackage: 'fltool-pkg' };
    expect(findTool(spec, `::${binA}:${binB}`)).toBe(join(binB, 'fltool'));
    expect(findTool(spec, binA)).toBeUndefined();
    expect(findTool(spec, '')).toBeUndefined();
  });

  it('absolute candidates are tried in order, before PATH names', async () => {
    const exe = join(dir, 'abs-tool');
    await writeFile(exe, '#!/bin/sh\n');
    await chmod(exe, 0o755);
    const spec: ToolSpec = { candidates: [join(dir, 'nope'), exe, 'sh'], debianPackage: 'x' };
    expect(findTool(spec, '/bin:/usr/bin')).toBe(exe);
  });
});
