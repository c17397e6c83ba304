/**
 * The emulated boards' own initramfs and the boot-time trims of their image, without building
 * one: the module order, the archive the kernel unpacks, the /init script, the masks and the
 * update stamps. That a board boots with them is proved by every qemu run in CI.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readlinkSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { assembleTree, writeUpdateDoneStamps } from '../device-image/build.js';
import { archivedModule, cpioNewc, initramfsEntries, initScript, moduleLoadOrder, moduleName, S_IFDIR, S_IFREG } from '../device-image/initramfs.js';
import { GUEST, MASKED_GENERATORS, MASKED_UNITS, importTestImagesScript, overlayFiles, TEST_IMAGES_STAMP, UDEV_TRIGGER_DROPIN, udevTriggerDropIn } from '../device-image/recipe.js';
import { resetScript } from '../hil/targets/qemu/reset-ssh.js';

const work = mkdtempSync(join(tmpdir(), 'fleetlab-initramfs-test-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A reader of the newc format written from its description (man 5 cpio), not from the writer. */
function readNewc(archive: Buffer): Array<{ name: string; mode: number; data: Buffer }> {
  const out = [];
  let at = 0;
  const align = (n: number) => (n + 3) & ~3;
  for (;;) {
    expect(archive.toString('latin1', at, at + 6)).toBe('070701');
    const field = (i: number) => parseInt(archive.toString('latin1', at + 6 + i * 8, at + 14 + i * 8), 16);
    const mode = field(1);
    const size = field(6);
    const nameSize = field(11);
    const name = archive.toString('latin1', at + 110, at + 110 + nameSize - 1);
    const dataAt = align(at + 110 + nameSize);
    if (name === 'TRAILER!!!') return out;
    out.push({ name, mode, data: archive.subarray(dataAt, dataAt + size) });
    at = align(dataAt + size);
  }
}

const MODULES_DEP = [
  'kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc16.ko.xz kernel/fs/mbcache.ko.xz kernel/fs/jbd2/jbd2.ko.xz',
  'kernel/lib/crc16.ko.xz:',
  'kernel/fs/mbcache.ko.xz:',
  'kernel/fs/jbd2/jbd2.ko.xz:',
  'kernel/crypto/crc32c_generic.ko.xz:',
  'kernel/drivers/virtio/virtio_mmio.ko.xz:',
  'kernel/drivers/block/virtio_blk.ko.xz:',
  'kernel/drivers/mmc/host/bcm2835.ko.xz:',
  'kernel/drivers/mmc/host/sdhci-iproc.ko.xz: kernel/drivers/mmc/host/sdhci-pltfm.ko.xz',
  'kernel/drivers/mmc/host/sdhci-pltfm.ko.xz:',
  '',
].join('\n');

describe('the initramfs', () => {
  it('loads each module after the ones it depends on, once, and skips what the kernel has built in', () => {
    const order = moduleLoadOrder(MODULES_DEP, ['virtio_mmio', 'virtio_blk', 'sdhci_iproc', 'mmc_block', 'ext4', 'jbd2']).map(moduleName);
    expect(order).toEqual(['virtio_mmio', 'virtio_blk', 'sdhci_pltfm', 'sdhci_iproc', 'jbd2', 'mbcache', 'crc16', 'ext4']);
  });

  it('is a newc archive with busybox, the modules unpacked under their names, and an executable /init', () => {
    const modules = [{ path: 'kernel/fs/jbd2/jbd2.ko.xz', data: Buffer.from('jbd2 elf') }, { path: 'kernel/fs/ext4/ext4.ko.xz', data: Buffer.from('ext4 elf') }];
    const entries = readNewc(cpioNewc(initramfsEntries({ busybox: Buffer.from('busybox elf'), modules })));
    const byName = new Map(entries.map((e) => [e.name, e]));
    expect(byName.get('bin/busybox')!.data.toString()).toBe('busybox elf');
    expect(byName.get('bin/busybox')!.mode).toBe(S_IFREG | 0o755);
    expect(byName.get('lib/modules/ext4.ko')!.data.toString()).toBe('ext4 elf');
    expect(byName.get('dev')!.mode).toBe(S_IFDIR | 0o755);
    const init = byName.get('init')!;
    expect(init.mode).toBe(S_IFREG | 0o755);
    expect(init.data.toString()).toBe(initScript(modules.map((m) => m.path)));
    // Every directory an entry sits in comes before it, as the kernel's unpacker needs.
    const names = entries.map((e) => e.name);
    for (const [i, name] of names.entries()) if (name.includes('/')) expect(names.indexOf(name.slice(0, name.lastIndexOf('/')))).toBeLessThan(i);
  });

  it('has an /init that parses, loads the modules in order and mounts root= as the command line says', () => {
    const script = initScript(['kernel/fs/jbd2/jbd2.ko.xz', 'kernel/fs/ext4/ext4.ko.xz']);
    expect(spawnSync('sh', ['-n', '-c', script]).status).toBe(0);
    expect(script.indexOf(archivedModule('kernel/fs/jbd2/jbd2.ko.xz'))).toBeLessThan(script.indexOf(archivedModule('kernel/fs/ext4/ext4.ko.xz')));
    expect(script).toMatch(/root=\*\) root=/);
    expect(script).toContain('exec switch_root /root "$init"');
  });
});

describe('the boot-time trims of the image', () => {
  it('masks units and generators with links to /dev/null, and a card image (no masks) keeps them', async () => {
    const rootfs = join(work, 'rootfs');
    const stage = join(work, 'stage');
    for (const d of [join(rootfs, 'etc/systemd/system'), join(rootfs, 'usr/lib'), stage]) mkdirSync(d, { recursive: true });
    const tree = join(work, 'tree');
    await assembleTree({ rootfs, stage, tree, enabledUnits: [], disabledUnits: [], masked: { units: MASKED_UNITS, generators: MASKED_GENERATORS } });
    for (const unit of MASKED_UNITS) expect(readlinkSync(join(tree, 'etc/systemd/system', unit))).toBe('/dev/null');
    for (const generator of MASKED_GENERATORS) expect(readlinkSync(join(tree, 'etc/systemd/system-generators', generator))).toBe('/dev/null');
    const card = join(work, 'card');
    await assembleTree({ rootfs, stage, tree: card, enabledUnits: [], disabledUnits: [] });
    expect(() => statSync(join(card, 'etc/systemd/system-generators'))).toThrow();
  });

  it('narrows the coldplug to devices from the distribution\'s own unit, and refuses one of another shape', () => {
    const unit = (...starts: string[]) => `[Unit]\nDescription=Coldplug All udev Devices\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n${starts.join('\n')}\n`;
    // Debian 13's systemd 257: one line for all; the module priority goes with the module events.
    const trixie = udevTriggerDropIn(unit('ExecStart=-udevadm trigger --type=all --action=add --prioritized-subsystem=module,block,tpmrm,net,tty,input'));
    expect(trixie.path).toBe(UDEV_TRIGGER_DROPIN);
    expect(trixie.content).toBe('[Service]\nExecStart=\nExecStart=-udevadm trigger --type=devices --action=add --prioritized-subsystem=block,tpmrm,net,tty,input\n');
    // Debian 12's systemd 252: subsystems, then devices; the devices line is kept as it is.
    const bookworm = udevTriggerDropIn(unit('ExecStart=-udevadm trigger --type=subsystems --action=add', 'ExecStart=-udevadm trigger --type=devices --action=add'));
    expect(bookworm.content).toBe('[Service]\nExecStart=\nExecStart=-udevadm trigger --type=devices --action=add\n');
    expect(udevTriggerDropIn(unit('ExecStart=-udevadm trigger --type=all --action=add --prioritized-subsystem=module')).content).toBe('[Service]\nExecStart=\nExecStart=-udevadm trigger --type=devices --action=add\n');
    for (const odd of [unit(), unit('ExecStart=/usr/lib/other-coldplug'), unit('ExecStart=-udevadm trigger --type=all', 'ExecStart=-udevadm trigger --type=devices')]) {
      expect(() => udevTriggerDropIn(odd)).toThrow(/not of a shape the image narrows to devices .*udevTriggerDropIn needs updating/);
    }
  });

  it('stamps /etc and /var as updated at /usr\'s time, so the first boot skips the update units', () => {
    const tree = join(work, 'stamped');
    for (const d of ['usr', 'etc', 'var']) mkdirSync(join(tree, d), { recursive: true });
    writeUpdateDoneStamps(tree);
    const usr = statSync(join(tree, 'usr'), { bigint: true });
    for (const d of ['etc', 'var']) {
      const stamp = join(tree, d, '.updated');
      expect(readFileSync(stamp, 'utf8')).toContain(`TIMESTAMP_NSEC=${usr.mtimeNs}\n`);
      expect(statSync(stamp, { bigint: true }).mtimeNs >= usr.mtimeNs).toBe(true);
    }
  });

  it('imports the test images on the first boot only: the script leaves the stamp its unit is conditioned on', () => {
    const script = importTestImagesScript();
    expect(script.trim().split('\n').at(-1)).toBe(`touch ${TEST_IMAGES_STAMP}`);
    const unit = overlayFiles('ssh-ed25519 AAAA test').find((f) => f.path.endsWith('fleetlab-test-images.service'))!;
    expect(unit.content).toContain(`ConditionPathExists=!${TEST_IMAGES_STAMP}\n`);
    writeFileSync(join(work, 'import.sh'), script);
    expect(spawnSync('sh', ['-n', join(work, 'import.sh')]).status).toBe(0);
  });

  it('keeps the test images\' stamp through the reset between spec files, whose wipe would make every reboot import again', () => {
    // The paths the reset's `rm -rf --` lines remove, as the shell splits them.
    const removed = resetScript().split('\n').filter((l) => l.startsWith('rm -rf -- ')).flatMap((l) =>
      spawnSync('sh', ['-c', `set -- ${l.slice('rm -rf -- '.length)}; printf '%s\\n' "$@"`], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean));
    expect(removed).toContain(GUEST.dataDir);
    for (const path of removed) expect(TEST_IMAGES_STAMP === path || TEST_IMAGES_STAMP.startsWith(`${path}/`), path).toBe(false);
  });
});
