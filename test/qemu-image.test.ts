/**
 * The QEMU image's recipe and payload, without building an image: the files it adds must be
 * what the supervisor, systemd and the harness accept, and the bundle must run.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { boardConfigFor } from '../hil/lab/board-config-for-qemu.js';
import type { ReadyInfo } from '../qemu/boot.js';
import { absentPackageSource, bundleSupervisor, DEVICE_ABSENT_PACKAGES, nodeModulesOf, payloadSource, runtimePackages, writePrebuiltPayload } from '../device-image/payload.js';
import { BOARD_OS_UNITS, boardOsFiles, GUEST, INITRAMFS_MODULES, LED_LINES, NODE_PACKAGE, importTestImagesScript, overlayFiles, packagesFor, ROOT_LINGER, rootfsKey, supervisorConfig } from '../device-image/recipe.js';
import { mmdebstrapArgs } from '../device-image/rootfs.js';
import { cloudEnv, versionEnv } from '../hil/targets/qemu.js';
import { resetScript } from '../hil/targets/qemu/reset-ssh.js';
import { parseBoardConfig } from '../hil/lab/board-config.js';
import { loadConfig } from '../src/supervisor/config.js';
import { defaultCommand, testImages } from '../sim/images/test-images.js';

const repoRoot = new URL('..', import.meta.url).pathname;
const work = mkdtempSync(join(tmpdir(), 'fleetlab-qemu-image-test-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const shellSyntaxOk = (script: string) => spawnSync('sh', ['-n', '-c', script]).status === 0;

describe('the root filesystem recipe', () => {
  it('asks mmdebstrap for arm64 minbase and sets MODULES=list with the module list before the kernel installs', () => {
    const args = mmdebstrapArgs({ suite: 'bookworm', mirror: 'http://deb.debian.org/debian', target: '/x' });
    expect(args).toContain('--arch=arm64');
    expect(args).toContain('--variant=minbase');
    expect(args.slice(-3)).toEqual(['bookworm', '/x', 'http://deb.debian.org/debian']);
    const hook = args.find((a) => a.startsWith('--setup-hook='))!.slice('--setup-hook='.length);
    expect(shellSyntaxOk(hook)).toBe(true);
    // Run the hook on a scratch root, as mmdebstrap would ("$1" is the root).
    const root = join(work, 'hook-root');
    execFileSync('sh', ['-c', hook, 'hook', root]);
    expect(execFileSync('cat', [join(root, 'etc/initramfs-tools/conf.d/fleetlab.conf')], { encoding: 'utf8' })).toBe('MODULES=list\n');
    expect(execFileSync('cat', [join(root, 'etc/initramfs-tools/modules')], { encoding: 'utf8' }).trim().split('\n')).toEqual([...INITRAMFS_MODULES]);
  });

  it('keys the rootfs by its inputs', () => {
    const a = rootfsKey({ suite: 'bookworm', mirror: 'http://m' });
    expect(rootfsKey({ suite: 'bookworm', mirror: 'http://m' })).toBe(a);
    expect(rootfsKey({ suite: 'trixie', mirror: 'http://m' })).not.toBe(a);
    // Debian 13 moved the docker command into docker-cli; bookworm's list stays without it. The
    // key is pinned so a change of the package list is a decision (sudo came with board install; systemd-timesyncd and the Pi 4's SD regulators with the card image).
    expect(packagesFor('trixie')).toContain('docker-cli');
    expect(packagesFor('bookworm')).not.toContain('docker-cli');
    expect(rootfsKey({ suite: 'bookworm', mirror: 'http://deb.debian.org/debian' })).toBe('241b0c261b46a27b');
    expect(rootfsKey({ suite: 'bookworm', mirror: 'http://other' })).not.toBe(a);
  });
});

describe('the files the image adds', () => {
  const files = overlayFiles('ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFleetlabTestKeyOnly fleetlab-hil');
  const byPath = new Map(files.map((f) => [f.path, f]));

  it('gives the supervisor a config its own loader accepts', () => {
    const file = join(work, 'supervisor.json');
    execFileSync('sh', ['-c', 'cat > "$1"', 'w', file], { input: byPath.get(GUEST.configFile)!.content });
    const config = loadConfig({ file, env: {} });
    expect(config).toMatchObject({ dataDir: GUEST.dataDir, localMode: true, lockRoot: GUEST.lockRoot, bootConfigPath: `${GUEST.bootDir}/config.txt` });
    expect(supervisorConfig()).toEqual(JSON.parse(byPath.get(GUEST.configFile)!.content));
  });

  it('runs the bundle from the supervisor unit with both environment files', () => {
    const unit = byPath.get(`/etc/systemd/system/${GUEST.unit}`)!.content;
    expect(unit).toContain(`ExecStart=/opt/fleetlab/bin/node --max-old-space-size=64 --optimize-for-size ${GUEST.appDir}/fleetlab-device.mjs supervisor --config ${GUEST.configFile}`);
    expect(unit).toContain(`EnvironmentFile=-${GUEST.runEnvFile}`);
    expect(unit).toContain(`EnvironmentFile=-${GUEST.envFile}`);
    // The harness's settings (the cloud link) win over the machine's.
    expect(unit.indexOf(GUEST.runEnvFile)).toBeLessThan(unit.indexOf(`EnvironmentFile=-${GUEST.envFile}`));
  });

  it('keeps dockerd\'s TCG settings and adds the journal log driver the supervisor reads', () => {
    expect(JSON.parse(byPath.get('/etc/docker/daemon.json')!.content)).toEqual({ iptables: false, ip6tables: false, 'log-driver': 'journald' });
  });

  it('lets root\'s user manager linger on both images, so the harness\'s SSH login does not wait for it', () => {
    expect(boardOsFiles('ssh-ed25519 AAAA test').map((f) => f.path)).toContain(ROOT_LINGER);
    expect(byPath.get(ROOT_LINGER)?.content).toBe('');
  });

  it('leaves everything of fleetlab\'s out of the bare board\'s files', () => {
    const bare = boardOsFiles('ssh-ed25519 AAAA test');
    expect(bare.map((f) => f.path)).toContain('/root/.ssh/authorized_keys');
    const ours = bare.filter((f) => /fleetlab/.test(f.path) && !f.path.startsWith('/etc/modprobe.d/') || /log-driver|fleetlab-device|supervisor/.test(f.content));
    expect(ours.map((f) => f.path)).toEqual([]);
    expect(BOARD_OS_UNITS.map((u) => u.unit).filter((u) => u.includes('fleetlab'))).toEqual([]);
  });

  it('has shell scripts that parse, and imports every test image with its default command', () => {
    for (const f of files.filter((x) => x.content.startsWith('#!/bin/sh'))) expect(shellSyntaxOk(f.content), f.path).toBe(true);
    const script = importTestImagesScript();
    for (const image of testImages) {
      const line = script.split('\n').find((l) => l.endsWith(` ${image.ref}`))!;
      // What the shell hands docker as the --change value: the JSON of the default command.
      const change = execFileSync('sh', ['-c', `set -- ${line.slice(line.indexOf('--change'))}; printf %s "$2"`], { encoding: 'utf8' });
      expect(JSON.parse(change.slice('CMD '.length))).toEqual(defaultCommand(image.banner));
    }
  });

  it('picks the LED line by the chip label the supervisor resolves', () => {
    const script = byPath.get('/usr/local/lib/fleetlab/boot-setup')!.content;
    expect(script).toContain(`${LED_LINES.raspi3b.chip}:${LED_LINES.raspi3b.offset}`);
    expect(script).toContain(`${LED_LINES.virt.chip}:${LED_LINES.virt.offset}`);
  });
});

describe('the payload', () => {
  it('keeps onoff and its runtime dependencies as packages beside the bundle', () => {
    const names = runtimePackages(join(repoRoot, 'node_modules'));
    expect(names).toEqual(expect.arrayContaining(['onoff', 'epoll', 'bindings', 'lodash.debounce']));
    expect(names).not.toContain('fastify');
  });

  it('bundles a supervisor that starts: `supervisor --help` lists the settings', async () => {
    const out = join(work, 'fleetlab-device.mjs');
    await bundleSupervisor(repoRoot, out);
    const help = spawnSync(process.execPath, [out, 'supervisor', '--help'], { encoding: 'utf8' });
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toContain('FLEETLAB_LED_GPIO');
    expect(help.stdout).toContain('--data-dir');
    // dockerode's SSH transport and BuildKit session stay out, and undici (the cloud client uses
    // node:http); strings only they carry.
    const text = readFileSync(out, 'utf8');
    for (const [name, mark] of [['ssh2', 'SSH-2.0'], ['@grpc/grpc-js', 'grpc-timeout'], ['protobufjs', 'google.protobuf'], ['undici', 'kHTTP2Stream']]) {
      expect(text.includes(mark), `${name} is in the device bundle`).toBe(false);
    }
  }, 60_000);

  it('stands in for a package left out of the bundle with one that names it when used', () => {
    const module = { exports: {} as Record<string, unknown> };
    new Function('module', absentPackageSource('ssh2'))(module);
    // Loading and reading a member works (docker-modem does both at load time) ...
    const Client = module.exports.Client as new () => unknown;
    expect(typeof Client).toBe('function');
    // ... using it does not.
    expect(() => new Client()).toThrow('ssh2 is not part of the fleetlab device build');
    expect(() => (module.exports.loadSync as () => unknown)()).toThrow('ssh2 is not part of the fleetlab device build');
    expect(DEVICE_ABSENT_PACKAGES).toEqual(expect.arrayContaining(['ssh2', '@grpc/grpc-js', 'protobufjs']));
  });

  it('is prebuilt for the packed package: the same bundle, the arm64 addon, and the Node it is for', async () => {
    expect(payloadSource(repoRoot)).toBe('sources');
    expect(nodeModulesOf(repoRoot)).toBe(join(repoRoot, 'node_modules'));
    // An installed fleetlab: no sources, the payload under dist/device.
    const installed = join(work, 'installed');
    mkdirSync(installed);
    writeFileSync(join(installed, 'package.json'), '{"name":"fleetlab"}');
    expect(payloadSource(installed)).toBeUndefined();
    const written = await writePrebuiltPayload(repoRoot, join(work, 'cache'), NODE_PACKAGE, join(installed, 'dist', 'device'));
    expect(payloadSource(installed)).toEqual({ bundle: written.bundle, epollAddon: written.epollAddon, node: NODE_PACKAGE });
    // An ELF shared object (type 3) for aarch64 (machine 183).
    const elf = readFileSync(written.epollAddon);
    expect([elf.subarray(1, 4).toString('latin1'), elf.readUInt16LE(16), elf.readUInt16LE(18)]).toEqual(['ELF', 3, 183]);
    await bundleSupervisor(repoRoot, join(work, 'again.mjs'));
    expect(readFileSync(written.bundle).equals(readFileSync(join(work, 'again.mjs')))).toBe(true);
    await expect(writePrebuiltPayload(installed, join(work, 'cache'), NODE_PACKAGE, join(work, 'x'))).rejects.toThrow('is not a fleetlab checkout');
    expect(existsSync(join(work, 'x'))).toBe(false);
  }, 300_000);
});

describe('what the harness writes to the board', () => {
  it('resets with a script that parses', () => {
    expect(shellSyntaxOk(resetScript())).toBe(true);
  });

  it('points the supervisor at a cloud with variables its config loader reads', () => {
    const env = Object.fromEntries(
      cloudEnv({ url: 'http://10.0.2.2:40001', provisioningKey: 'pk' })
        .trim()
        .split('\n')
        .map((l) => l.split('=') as [string, string]),
    );
    expect(loadConfig({ env })).toMatchObject({ localMode: false, cloudUrl: 'http://10.0.2.2:40001', provisioningKey: 'pk', pollIntervalMs: 2000 });
  });

  it('gives the supervisor a version to answer as through the env file its unit reads, after the cloud link', () => {
    const text = `${cloudEnv({ url: 'http://10.0.2.2:40001', provisioningKey: 'pk' })}${versionEnv('9.7.0')}`;
    const env = Object.fromEntries(text.trim().split('\n').map((l) => l.split('=') as [string, string]));
    expect(loadConfig({ env })).toMatchObject({ cloudUrl: 'http://10.0.2.2:40001', supervisorVersion: '9.7.0' });
    expect(() => loadConfig({ env: { FLEETLAB_SUPERVISOR_VERSION: '9.7' } })).toThrow('accepted: a supervisor version from 1.1.0 to 14.7.0');
  });

  it('describes a running QEMU board as a board config the board target accepts', () => {
    const ready: ReadyInfo = {
      event: 'ready', machine: 'raspi3b', apiUrl: 'http://127.0.0.1:41000', sshPort: 41001, sshKey: '/k/id_ed25519',
      serialLog: '/r/serial.log', qmpSocket: '/r/qmp.sock', overlay: '/r/o.qcow2', pid: 1, bootMs: 1,
    };
    const config = parseBoardConfig(boardConfigFor(ready, ['node', '/repo/bin/fleetlab.js']), { source: 'test', baseDir: '/' });
    expect(config).toMatchObject({ host: '127.0.0.1', sshPort: 41001, privateKey: '/k/id_ed25519', apiUrl: 'http://127.0.0.1:41000' });
    expect(config.led?.gpio).toEqual({ chip: 'pinctrl-bcm2835', offset: 17 });
    expect(config.power.cycle).toBe("'node' '/repo/bin/fleetlab.js' 'qemu' 'power' 'cycle' '--qmp' '/r/qmp.sock'");
  });
});
