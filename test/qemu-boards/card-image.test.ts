/**
 * `fleetlab card build --board rpi4`, the card a lab flashes: built as a user builds it, read
 * back (partition table, boot partition, root filesystem label), then booted under QEMU virt
 * from its own kernel and root partition on a card 2 GiB larger than the image, provisioned by
 * its fleetlab.txt. The first boot must grow the root partition, make SSH host keys, apply the
 * file and start the supervisor; then the HIL specs run on that card through the board target,
 * as a lab runs them on a flashed Pi (FLEETLAB_CARD_SPECS: which, default the config.txt one).
 * With FLEETLAB_CI_FULL=1 .ci/run also runs specs through the qemu target booting the card itself.
 */
import { closeSync, cpSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BOOT_LABEL, FLASH_BOARDS, parseProvision, PROVISION_FILE, ROOT_LABEL, SECTOR, APPLIED_FILE } from '../../device-image/card-plan.js';
import { SshDevice } from '../../device-access/ssh-device.js';
import { readMbr } from '../../qemu/flash-boot.js';
import { lastEvent, repoRoot } from './board-under-test.js';

const fleetlab = (args: readonly string[], cwd: string) => execa(process.execPath, [join(repoRoot, 'bin', 'fleetlab.js'), ...args], { cwd, reject: false, all: true });
const mtools = (tool: string, args: readonly string[]) => execa(tool, args, { env: { MTOOLS_SKIP_CHECK: '1' }, reject: false, all: true });

/** The ext4 volume name: superblock at 1024, s_volume_name at 120 (16 bytes). */
function ext4Label(image: string, offset: number): string {
  const buf = Buffer.alloc(16);
  const fd = openSync(image, 'r');
  readSync(fd, buf, 0, 16, offset + 1024 + 120);
  closeSync(fd);
  return buf.toString('latin1').replace(/\0+$/, '');
}

describe('fleetlab card build --board rpi4, flashed and booted', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fleetlab-card-'));
  const image = join(dir, 'lab-pi.img');
  const boardConfig = join(dir, 'board.json');
  let boot: ResultPromise | undefined;
  let ssh: SshDevice | undefined;
  let ready: { apiUrl: string; sshPort: number; sshKey: string } | undefined;

  beforeAll(async () => {
    const built = await fleetlab(['card', 'build', '--board', 'rpi4', '--out', image], dir);
    expect(built.exitCode, built.all).toBe(0);
    expect(lastEvent(built.stdout)).toMatchObject({ event: 'built', image, board: 'rpi4' });
  }, 1_800_000);
  afterAll(async () => {
    await ssh?.close();
    boot?.kill('SIGINT');
    await boot?.catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  it('is an MBR card: FAT32 boot partition with the Pi 4 firmware, kernel and settings; ext4 root by label', async () => {
    const { partitions } = readMbr(image);
    expect(partitions.map((p) => p.type)).toEqual([0x0c, 0x83]);
    const fat = `${image}@@${partitions[0]!.startSector * SECTOR}`;
    const listing = await mtools('mdir', ['-b', '-i', fat, '::']);
    expect(listing.exitCode, listing.all).toBe(0);
    const files = listing.stdout.split('\n').map((l) => l.trim().replace(/^::\//, '')).filter(Boolean);
    for (const f of [...FLASH_BOARDS.rpi4.firmware, ...FLASH_BOARDS.rpi4.dtbs, 'vmlinuz', 'initrd.img', 'config.txt', 'cmdline.txt', PROVISION_FILE]) expect(files).toContain(f);
    expect(files).not.toContain('bootcode.bin');
    const label = await mtools('mlabel', ['-s', '-i', fat, '::']);
    expect(label.stdout).toContain(BOOT_LABEL);
    const config = await mtools('mtype', ['-i', fat, '::config.txt']);
    expect(config.stdout).toMatch(/^kernel=vmlinuz$/m);
    const cmdline = await mtools('mtype', ['-i', fat, '::cmdline.txt']);
    expect(cmdline.stdout).toContain(`root=LABEL=${ROOT_LABEL}`);
    const provision = await mtools('mtype', ['-i', fat, `::${PROVISION_FILE}`]);
    expect(parseProvision(provision.stdout).errors).toEqual([]);
    expect(ext4Label(image, partitions[1]!.startSector * SECTOR)).toBe(ROOT_LABEL);
  });

  it('boots on a larger card: root grown, host keys made, fleetlab.txt applied, supervisor answering', async () => {
    boot = execa(process.execPath, [join(repoRoot, 'bin', 'fleetlab.js'), 'qemu', 'boot', '--machine', 'virt', '--snapshot', '--flash-image', image, '--board-config', boardConfig], {
      reject: false,
      all: false,
      buffer: false,
    });
    let out = '';
    boot.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    const deadline = Date.now() + 900_000;
    while (!out.includes('"event":"ready"') && Date.now() < deadline && boot.exitCode === null) await new Promise((r) => setTimeout(r, 1000));
    ready = lastEvent(out) as unknown as typeof ready;
    expect(ready).toMatchObject({ event: 'ready' });
    ssh = new SshDevice({ host: '127.0.0.1', port: ready!.sshPort, username: 'root', privateKey: readFileSync(ready!.sshKey) });
    await ssh.waitReachable(300_000);

    const firstBoot = await ssh.run(['journalctl', '-b', '-u', 'fleetlab-first-boot.service', '-o', 'cat', '--no-pager']);
    expect(firstBoot.stdout).toMatch(/root partition: grown to the end of \/dev\/vda/);
    expect(firstBoot.stdout).toContain('ssh: host keys made');
    expect(firstBoot.stdout).toContain(`${PROVISION_FILE}: applied, now ${APPLIED_FILE}`);

    // The card is the image plus 2 GiB (qemu/flash-boot.ts); the root partition now ends at the card's end.
    const sizes = await ssh.run(['lsblk', '-bno', 'NAME,SIZE', '/dev/vda']);
    const bytes = Object.fromEntries(sizes.stdout.trim().split('\n').map((l) => l.replace(/[^\w\s]/g, '').trim().split(/\s+/)).map(([n, s]) => [n, Number(s)]));
    const { partitions } = readMbr(image);
    expect(bytes.vda2).toBeGreaterThan(partitions[1]!.sectors * SECTOR + 1.5 * 1024 ** 3);
    const df = await ssh.run(['df', '-B1', '--output=size', '/']);
    expect(Number(df.stdout.trim().split('\n')[1])).toBeGreaterThan(partitions[1]!.sectors * SECTOR + 1024 ** 3);

    const boot_ = await ssh.run(['ls', '/boot/firmware']);
    expect(boot_.stdout.split('\n')).toContain(APPLIED_FILE);
    expect(boot_.stdout.split('\n')).not.toContain(PROVISION_FILE);
    const units = await ssh.run(['systemctl', 'is-active', 'fleetlab-supervisor.service', 'docker.service', 'systemd-timesyncd.service']);
    // ntp=off (the emulator's provisioning): timesyncd kept from reaching out by its condition.
    expect(units.stdout.trim().split('\n')).toEqual(['active', 'active', 'inactive']);
    expect((await ssh.run(['systemctl', '--failed', '--no-legend', '--plain'])).stdout.trim()).toBe('');
    const config = JSON.parse((await ssh.run(['cat', '/etc/fleetlab/supervisor.json'])).stdout) as Record<string, unknown>;
    expect(config).toMatchObject({ deviceType: 'raspberrypi4-64', bootConfigPath: '/boot/firmware/config.txt' });
    const ping = await fetch(`${ready!.apiUrl}/ping`);
    expect(ping.status).toBe(200);
  });

  it('runs the HIL specs on the flashed card through the board target, as a lab runs them on a Pi', async () => {
    expect(ready, 'the card did not boot (the test above)').toBeDefined();
    const results = join(dir, 'hil-results');
    const run = await execa(process.execPath, [join(repoRoot, 'hil', 'run.mjs'), '--project=board', `--grep=${process.env.FLEETLAB_CARD_SPECS ?? 'HOST_CONFIG'}`], {
      cwd: repoRoot,
      env: { FLEETLAB_BOARD_CONFIG: boardConfig, FLEETLAB_HIL_RESULTS: results },
      reject: false,
      all: true,
    });
    // Summed with the other reports by .ci/run, so each spec counts as itself.
    const junit = join(results, 'junit.xml');
    if (existsSync(junit)) {
      mkdirSync(join(repoRoot, 'test-results'), { recursive: true });
      cpSync(junit, join(repoRoot, 'test-results', 'hil-card-board-junit.xml'));
    }
    expect(run.exitCode, run.all).toBe(0);
    expect(run.all).toMatch(/\b[1-9]\d* passed/);
    expect(run.all).not.toMatch(/\d+ (failed|skipped)/);
  });
});
