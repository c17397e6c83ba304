import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { firstBoot, TIMESYNCD_DROPIN } from '../device-image/first-boot.js';
import {
  ALIGN_SECTORS, APPLIED_FILE, appliedFileText, BOOT_MOUNT, cardLayout, cmdlineTxt, configTxt, ERROR_FILE, FLASH_BOARDS, flashBoard, flashFstab, flashRootFiles, grownRootMbr, mbrBytes,
  NTP_OFF_MARKER, parseMbr, parseProvision, PROVISION_FILE, provisionTemplate, ROOT_LABEL, SECTOR, withAuthorizedKeys, withCloudLink, withProvisionSettings,
} from '../device-image/card-plan.js';
import { BOARD } from '../device-image/board-layout.js';
import { emulatorProvision } from '../qemu/flash-boot.js';

const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOGQy0Zs8o1vU5gY7r1yq3nX2pQ4W8qf8x8aKk2Jw6tH you@laptop';

describe('the card', () => {
  it('takes rpi3 and rpi4, and says why not rpi5', () => {
    expect(flashBoard('rpi4')).toBe('rpi4');
    expect(() => flashBoard('rpi5')).toThrow(/RP1.*board install/);
    expect(() => flashBoard('pi4')).toThrow(/rpi3 or rpi4/);
  });

  it('boots the kernel by fixed names, root by label, console on the header UART', () => {
    const config = configTxt('rpi4', '1.2.3');
    expect(config).toMatch(/^arm_64bit=1$/m);
    expect(config).toMatch(/^kernel=vmlinuz$/m);
    expect(config).toMatch(/^initramfs initrd\.img followkernel$/m);
    expect(config).toMatch(/^upstream_kernel=1$/m);
    const cmdline = cmdlineTxt('rpi4');
    expect(cmdline.trim().split('\n')).toHaveLength(1);
    expect(cmdline).toContain(`root=LABEL=${ROOT_LABEL}`);
    expect(cmdline).toContain('console=ttyS1,115200');
    expect(cmdline).not.toContain('cma=');
    expect(cmdlineTxt('rpi3')).toContain('cma=64M');
    expect(flashFstab()).toMatch(new RegExp(`^LABEL=${ROOT_LABEL} / ext4`, 'm'));
    expect(flashFstab()).toMatch(new RegExp(`^LABEL=FLEETBOOT ${BOOT_MOUNT} vfat .*nofail`, 'm'));
    expect(FLASH_BOARDS.rpi4.firmware).toEqual(['start4.elf', 'fixup4.dat']);
    expect(FLASH_BOARDS.rpi3.firmware).toContain('bootcode.bin');
  });

  it('lays out two aligned partitions and an MBR that reads back', () => {
    const layout = cardLayout(256 * 1024 ** 2, 1_000_000_000);
    expect(layout.boot.startSector % ALIGN_SECTORS).toBe(0);
    expect(layout.root.startSector).toBe(layout.boot.startSector + layout.boot.sectors);
    expect(layout.root.sectors % ALIGN_SECTORS).toBe(0);
    expect(layout.root.sectors * SECTOR).toBeGreaterThanOrEqual(1_000_000_000);
    const mbr = mbrBytes(0x1234abcd, [layout.boot, layout.root]);
    expect(mbr.length).toBe(512);
    expect(parseMbr(mbr)).toEqual({ diskId: 0x1234abcd, partitions: [layout.boot, layout.root] });
    expect(() => parseMbr(Buffer.alloc(512))).toThrow(/55 aa/);
  });

  it('grows the root partition to the end of a larger card, aligned, and only once', () => {
    const layout = cardLayout(256 * 1024 ** 2, 1024 ** 3);
    const mbr = mbrBytes(1, [layout.boot, layout.root]);
    const card = (32 * 1024 ** 3) / SECTOR;
    const grown = grownRootMbr(mbr, card)!;
    const root = parseMbr(grown).partitions[1]!;
    expect(root.startSector).toBe(layout.root.startSector);
    expect(root.startSector + root.sectors).toBeLessThanOrEqual(card);
    expect(card - (root.startSector + root.sectors)).toBeLessThan(ALIGN_SECTORS);
    expect(parseMbr(grown).partitions[0]).toEqual(layout.boot);
    expect(grownRootMbr(grown, card)).toBeUndefined();
    expect(grownRootMbr(mbr, layout.totalBytes / SECTOR)).toBeUndefined();
  });
});

describe('fleetlab.txt', () => {
  it('the template parses as local mode with the default hostname', () => {
    expect(parseProvision(provisionTemplate('rpi4'))).toEqual({ provision: { hostname: 'fleetlab', sshKeys: [] }, errors: [] });
  });

  it('reads a file edited on Windows: BOM, CRLF, keys in any case', () => {
    const text = `\uFEFFHostname=lab-pi-07\r\ncloud_url=https://cloud.example.com\r\nprovisioning_key=abc123\r\nssh_key=${KEY}\r\nssh_key=${KEY.replace('you@', 'ci@')}\r\nled=none\r\nntp=0.pool.example.org 10.0.0.1\r\n`;
    expect(parseProvision(text)).toEqual({
      provision: { hostname: 'lab-pi-07', cloudUrl: 'https://cloud.example.com', provisioningKey: 'abc123', sshKeys: [KEY, KEY.replace('you@', 'ci@')], led: 'none', ntp: ['0.pool.example.org', '10.0.0.1'] },
      errors: [],
    });
  });

  it('says which line is wrong and what to write', () => {
    const { errors } = parseProvision(['hostname=-bad', 'cloud_url=ftp://x', 'provisioning_key=a b', 'ssh_key=AAAA only', 'led=left', 'ntp=a;b', 'colour=blue', 'just words', 'hostname=again'].join('\n'));
    expect(errors).toEqual([
      expect.stringMatching(/^line 1: hostname must be/),
      expect.stringMatching(/^line 2: cloud_url must be an http\(s\) URL/),
      expect.stringMatching(/^line 3: provisioning_key must be one word/),
      expect.stringMatching(/^line 4: ssh_key must be one public key line/),
      expect.stringMatching(/^line 5: led must be/),
      expect.stringMatching(/^line 6: ntp must be/),
      expect.stringMatching(/^line 7: unknown setting "colour" \(known: hostname, cloud_url/),
      'line 8: "just words" is not name=value',
      'line 9: hostname is set twice',
    ]);
    expect(parseProvision('cloud_url=https://c.example\n').errors).toEqual([expect.stringMatching(/without provisioning_key/)]);
    expect(parseProvision('provisioning_key=k\n').errors).toEqual([expect.stringMatching(/without cloud_url/)]);
  });

  it('keeps the user\'s own env settings and the keys already there', () => {
    const env = '# header\nFLEETLAB_LOG_LEVEL=debug\nFLEETLAB_CLOUD_URL=http://old\n';
    const linked = withCloudLink(env, { cloudUrl: 'https://c', provisioningKey: 'k', sshKeys: [] });
    expect(linked).toBe('# header\nFLEETLAB_LOG_LEVEL=debug\nFLEETLAB_LOCAL_MODE=false\nFLEETLAB_CLOUD_URL=https://c\nFLEETLAB_PROVISIONING_KEY=k\n');
    expect(withCloudLink(linked, { sshKeys: [] })).toBe('# header\nFLEETLAB_LOG_LEVEL=debug\n');
    expect(withAuthorizedKeys(`${KEY}\n`, [KEY.replace('you@laptop', 'same key, other comment'), 'ssh-rsa AAAAB3 other'])).toBe(`${KEY}\nssh-rsa AAAAB3 other\n`);
  });

  it('the applied copy has no provisioning key; the emulator adds its key, LED line and ntp=off', () => {
    const at = new Date('2026-11-27T12:00:00Z');
    const applied = appliedFileText('cloud_url=https://c\nprovisioning_key=secret-key\n', at);
    expect(applied).not.toContain('secret-key');
    expect(parseProvision(applied).provision.provisioningKey).toBeUndefined();
    const emulated = emulatorProvision(provisionTemplate('rpi4'), KEY);
    expect(parseProvision(emulated)).toEqual({ provision: { hostname: 'fleetlab', sshKeys: [KEY], led: '9030000.pl061:0', ntp: 'off' }, errors: [] });
    expect(withProvisionSettings('a=1\n', { b: '2' })).toBe('a=1\nb=2\n');
  });
});

describe('first boot, applied to a directory tree', () => {
  let root: string;
  afterEach(() => rmSync(root, { recursive: true, force: true }));
  const write = (path: string, text: string) => {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), text);
  };
  const read = (path: string) => readFileSync(join(root, path), 'utf8');
  const setup = () => {
    root = mkdtempSync(join(tmpdir(), 'fleetlab-first-boot-'));
    for (const f of flashRootFiles('rpi4')) write(f.path, f.content);
    write('/proc/device-tree/model', 'Raspberry Pi 4 Model B Rev 1.5\0');
  };

  it('applies the settings, keeps the user\'s env lines, renames the file without its key', async () => {
    setup();
    write(BOARD.envFile, `${read(BOARD.envFile)}FLEETLAB_LOG_LEVEL=debug\n`);
    write(`${BOOT_MOUNT}/${PROVISION_FILE}`, `hostname=lab-pi-07\ncloud_url=https://cloud.example.com\nprovisioning_key=secret-key\nssh_key=${KEY}\nntp=off\n`);
    const lines: string[] = [];
    expect(await firstBoot({ root, log: (l) => lines.push(l) })).toBe('applied');
    expect(read('/etc/hostname')).toBe('lab-pi-07\n');
    expect(read('/etc/hosts')).toContain('127.0.1.1\tlab-pi-07');
    expect(read('/root/.ssh/authorized_keys')).toBe(`${KEY}\n`);
    expect(statSync(join(root, '/root/.ssh/authorized_keys')).mode & 0o777).toBe(0o600);
    expect(read(BOARD.envFile)).toContain('FLEETLAB_LOG_LEVEL=debug\nFLEETLAB_LOCAL_MODE=false\nFLEETLAB_CLOUD_URL=https://cloud.example.com\nFLEETLAB_PROVISIONING_KEY=secret-key\n');
    // The model's ACT LED (device-image/board-layout.ts ACT_LED_LINES).
    expect(read(BOARD.installEnvFile)).toContain('FLEETLAB_LED_GPIO=pinctrl-bcm2711:42');
    expect(existsSync(join(root, NTP_OFF_MARKER))).toBe(true);
    expect(existsSync(join(root, BOOT_MOUNT, PROVISION_FILE))).toBe(false);
    expect(read(`${BOOT_MOUNT}/${APPLIED_FILE}`)).not.toContain('secret-key');
    expect(lines).toContain('cloud: https://cloud.example.com');
    // Each flashed board makes its own SSH host keys.
    expect(readFileSync(join(root, '/etc/ssh/ssh_host_ed25519_key.pub'), 'utf8')).toMatch(/^ssh-ed25519 /);
    expect(lines).toContain('ssh: host keys made');

    // Applied again from the renamed file, now local mode with time servers: the link goes, the marker too.
    write(`${BOOT_MOUNT}/${PROVISION_FILE}`, 'hostname=lab-pi-07\nntp=10.0.0.1\n');
    expect(await firstBoot({ root, log: () => undefined })).toBe('applied');
    expect(read(BOARD.envFile)).not.toContain('FLEETLAB_CLOUD_URL');
    expect(read(BOARD.envFile)).toContain('FLEETLAB_LOG_LEVEL=debug');
    expect(existsSync(join(root, NTP_OFF_MARKER))).toBe(false);
    expect(read(TIMESYNCD_DROPIN)).toContain('NTP=10.0.0.1');
  });

  it('a file it cannot use changes nothing and leaves the reasons on the boot partition', async () => {
    setup();
    const before = read('/etc/hostname');
    write(`${BOOT_MOUNT}/${PROVISION_FILE}`, 'hostname=bad_name\n');
    expect(await firstBoot({ root, log: () => undefined })).toBe('failed');
    expect(read('/etc/hostname')).toBe(before);
    expect(read(`${BOOT_MOUNT}/${ERROR_FILE}`)).toMatch(/line 1: hostname must be/);
    expect(existsSync(join(root, BOOT_MOUNT, PROVISION_FILE))).toBe(true);
    // Fixed, it applies and the error file goes.
    write(`${BOOT_MOUNT}/${PROVISION_FILE}`, 'hostname=good-name\n');
    expect(await firstBoot({ root, log: () => undefined })).toBe('applied');
    expect(existsSync(join(root, BOOT_MOUNT, ERROR_FILE))).toBe(false);
  });

  it('without a file there is nothing to do but the host keys', async () => {
    setup();
    expect(await firstBoot({ root, log: () => undefined })).toBe('nothing');
    expect(existsSync(join(root, '/etc/ssh/ssh_host_ed25519_key'))).toBe(true);
  });
});
