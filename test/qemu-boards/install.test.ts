/**
 * `fleetlab board install` on a board that has nothing of fleetlab's (the bare QEMU image):
 * the supervisor comes up under systemd and answers through the board's own address, a second
 * install changes nothing, and another build is replaced only with --upgrade, data kept.
 * The HIL `board` project then runs against this board, and ./uninstall.test.ts takes it off.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OWN_PATHS } from '../../board/install-plan.js';
import { storedIdentity } from '../../hil/targets/drivers/device-facts.js';
import { readBoardState } from '../helpers/board-state.js';
import { addUsersScript, boardUnderTest, fleetlabBoard, INSTALL_USER, lastEvent, ledOption, PLAIN_USER } from './board-under-test.js';

const { config, ssh, address, baselineFile } = boardUnderTest();
const led = ledOption(config);
const install = (...extra: string[]) => fleetlabBoard(['install', address, '--identity', config.privateKey, '--led', led, ...extra]);

async function ping(): Promise<string> {
  const res = await fetch(`${config.apiUrl}/ping`, { signal: AbortSignal.timeout(5000) });
  return `${res.status} ${await res.text()}`;
}

describe('fleetlab board install on a bare Debian arm64 board, as a user with passwordless sudo', () => {
  beforeAll(async () => {
    await ssh.waitReachable(120_000);
    const users = await ssh.run(['sh', '-c', addUsersScript()]);
    expect(users.exitCode, users.stderr).toBe(0);
  });
  afterAll(async () => {
    await ssh.close();
  });

  it('starts from a board with nothing of fleetlab\'s, whose state is kept for the uninstall check', async () => {
    const state = await readBoardState(ssh);
    expect(state.sections.paths!.filter((p) => OWN_PATHS.some((own) => p === own || p.startsWith(`${own}/`)))).toEqual([]);
    expect(state.sections.units!.filter((u) => u.includes('fleetlab'))).toEqual([]);
    expect(state.sections.paths).toContain('/etc/docker/daemon.json');
    writeFileSync(baselineFile, JSON.stringify(state));
  });

  it('refuses a user without passwordless sudo, saying what would do, and changes nothing', async () => {
    const r = await fleetlabBoard(['install', address.replace(`${INSTALL_USER}@`, `${PLAIN_USER}@`), '--identity', config.privateKey]);
    expect(r.exitCode).not.toBe(0);
    expect(r.stderr).toContain(`the user ${PLAIN_USER} cannot run sudo without a password`);
    expect(r.stderr).toContain('install as root, or give');
    expect((await ssh.run(['test', '-e', '/etc/fleetlab'])).exitCode).not.toBe(0);
  });

  it('installs the supervisor as an enabled systemd service that answers on the board\'s API port, step by step', async () => {
    const r = await install();
    expect(r.exitCode, r.all).toBe(0);
    for (const n of [1, 2, 3, 4, 5, 6, 7]) expect(r.stderr).toContain(`[${n}/7]`);
    expect(lastEvent(r.stdout)).toMatchObject({ event: 'installed', changed: true });
    expect(await ping()).toBe('200 OK');
    const unit = await ssh.run(['systemctl', 'is-enabled', 'fleetlab-supervisor.service']);
    expect(unit.stdout.trim()).toBe('enabled');
    // dockerd's own settings stay; the journal log driver is added.
    const daemon = JSON.parse((await ssh.files.read('/etc/docker/daemon.json')).toString('utf8'));
    expect(daemon).toEqual({ iptables: false, ip6tables: false, 'log-driver': 'journald' });
  });

  it('changes nothing when run again', async () => {
    const before = await storedIdentity(ssh, config.dataDir);
    const started = (await ssh.run(['systemctl', 'show', '-p', 'ActiveEnterTimestampMonotonic', '--value', 'fleetlab-supervisor.service'])).stdout.trim();
    const r = await install();
    expect(r.exitCode, r.all).toBe(0);
    expect(lastEvent(r.stdout)).toMatchObject({ event: 'installed', changed: false });
    expect(r.stderr).toContain('already there');
    expect(r.stderr).not.toContain('sending fleetlab');
    // Not restarted, same identity.
    expect((await ssh.run(['systemctl', 'show', '-p', 'ActiveEnterTimestampMonotonic', '--value', 'fleetlab-supervisor.service'])).stdout.trim()).toBe(started);
    expect(await storedIdentity(ssh, config.dataDir)).toEqual(before);
  });

  it('refuses to replace another build without --upgrade; --upgrade replaces it and keeps the device\'s data', async () => {
    const identity = await storedIdentity(ssh, config.dataDir);
    // Another build: the manifest names other supervisor files than this fleetlab's.
    const marked = await ssh.run(['sh', '-c', 'sed -i \'s/"payload": "[0-9a-f]*"/"payload": "0000"/; s/"version": "[^"]*"/"version": "0.0.1"/\' /etc/fleetlab/install.json && grep -c \'"payload": "0000"\' /etc/fleetlab/install.json']);
    expect(marked.stdout.trim()).toBe('1');

    const refused = await install();
    expect(refused.exitCode).not.toBe(0);
    expect(refused.stderr).toContain('fleetlab 0.0.1\'s supervisor');
    expect(refused.stderr).toContain('--upgrade');
    expect(await ping()).toBe('200 OK');

    const upgraded = await install('--upgrade');
    expect(upgraded.exitCode, upgraded.all).toBe(0);
    expect(upgraded.stderr).toContain('sending fleetlab');
    expect(lastEvent(upgraded.stdout)).toMatchObject({ event: 'installed', changed: true });
    expect(await ping()).toBe('200 OK');
    expect(await storedIdentity(ssh, config.dataDir)).toEqual(identity);
  });
});
