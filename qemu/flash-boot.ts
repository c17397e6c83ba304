/**
 * A card image (`fleetlab card build --board rpi4`) as an emulated board: the same image,
 * provisioned as a user provisions one, by editing `fleetlab.txt` on its boot partition, here
 * with the harness's SSH key, the `virt` machine's LED line and no NTP (a test board sends
 * nothing past the host). QEMU boots the kernel and initramfs from that boot partition with
 * root=LABEL=fleetlab-root, on a disk 2 GiB larger than the image, as a card is larger than
 * what is flashed onto it; the first boot grows the root partition into it.
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { flashTools } from '../device-image/card-image.js';
import { BOOT_INITRD, BOOT_KERNEL, BOOT_MOUNT, parseMbr, PROVISION_FILE, ROOT_LABEL, SECTOR, withProvisionSettings } from '../device-image/card-plan.js';
import { FleetlabError } from '../src/errors.js';
import { alive } from '../src/processes.js';
import { pruneSiblings, sshKeyPair, type QemuImage } from '../device-image/build.js';
import { LED_LINES } from '../device-image/recipe.js';
import { cacheRoot, needTool } from '../device-image/tools.js';

/** How much larger than the image the emulated card is. */
export const CARD_HEADROOM_BYTES = 2 * 1024 ** 3;

/** The fleetlab.txt the emulated board boots with: the image's own, plus what the harness needs. */
export function emulatorProvision(imageText: string, harnessPublicKey: string): string {
  const led = `${LED_LINES.virt.chip}:${LED_LINES.virt.offset}`;
  return withProvisionSettings(imageText, { led, ntp: 'off' }, [harnessPublicKey]);
}

/** The partition table of an image file. */
export function readMbr(image: string): ReturnType<typeof parseMbr> {
  const mbr = Buffer.alloc(SECTOR);
  const fd = openSync(image, 'r');
  try {
    readSync(fd, mbr, 0, SECTOR, 0);
  } finally {
    closeSync(fd);
  }
  return parseMbr(mbr);
}

export async function flashImageForQemu(o: { image: string; cacheDir?: string; progress?: (line: string) => void }): Promise<QemuImage> {
  const image = resolve(o.image);
  if (!existsSync(image)) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `card image ${image} does not exist (fleetlab card build --board rpi4 makes one)`);
  const cacheDir = o.cacheDir ?? join(cacheRoot(), 'qemu');
  const [boot, root] = readMbr(image).partitions;
  if (!boot || !root || boot.type !== 0x0c || root.type !== 0x83) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${image} is not a fleetlab card image: its partitions are not FAT32 then Linux`);
  const fat = (img: string) => `${img}@@${boot.startSector * SECTOR}`;
  const mtools = { env: { MTOOLS_SKIP_CHECK: '1' }, reject: false, all: true } as const;
  const mcopy = needTool(flashTools.mcopy);
  const keys = sshKeyPair(cacheDir);

  const st = statSync(image);
  const own = await execa(needTool(flashTools.mtype), ['-i', fat(image), `::${PROVISION_FILE}`], mtools);
  const provision = emulatorProvision(own.exitCode === 0 ? own.stdout : '', keys.publicKey);
  const key = createHash('sha256').update(`${image}\0${st.size}\0${st.mtimeMs}\0${provision}`).digest('hex').slice(0, 16);
  const cards = join(cacheDir, 'cards');
  const dir = join(cards, `card-${key}`);
  // A copy a killed run left half made (its process gone): 1-2 GB each, so not left to pile up.
  if (existsSync(cards)) for (const d of readdirSync(cards).filter((d) => /\.tmp-\d+$/.test(d) && !alive(Number(d.split('.tmp-')[1])))) rmSync(join(cards, d), { recursive: true, force: true });
  if (!existsSync(join(dir, 'manifest.json'))) {
    o.progress?.(`provisioning a copy of ${image} (${PROVISION_FILE}: the harness's SSH key, the virt LED line, ntp=off)`);
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    try {
      const card = join(tmp, 'card.img');
      await execa('cp', ['--sparse=always', '--reflink=auto', image, card]);
      writeFileSync(join(tmp, PROVISION_FILE), provision);
      for (const [argv, what] of [
        [['-o', '-i', fat(card), join(tmp, PROVISION_FILE), `::${PROVISION_FILE}`], `writing ${PROVISION_FILE}`],
        [['-i', fat(card), `::${BOOT_KERNEL}`, join(tmp, 'vmlinuz')], `reading ${BOOT_KERNEL} from the boot partition`],
        [['-i', fat(card), `::${BOOT_INITRD}`, join(tmp, 'initrd.img')], `reading ${BOOT_INITRD} from the boot partition`],
      ] as const) {
        const r = await execa(mcopy, [...argv], mtools);
        if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `${what} of ${image}: ${r.all?.trim()}`);
      }
      writeFileSync(join(tmp, 'id_ed25519'), keys.privateKey, { mode: 0o600 });
      writeFileSync(join(tmp, 'manifest.json'), `${JSON.stringify({ key: `card-${key}`, source: image, builtAt: new Date().toISOString() }, null, 2)}\n`);
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(join(dir, '..'), { recursive: true });
      renameSync(tmp, dir);
      pruneSiblings(join(cacheDir, 'cards'), 'card-', dir, 2);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
  return {
    key: `card-${key}`,
    dir,
    sdImage: join(dir, 'card.img'),
    kernel: join(dir, 'vmlinuz'),
    initrd: join(dir, 'initrd.img'),
    dtb: '',
    sshKey: join(dir, 'id_ed25519'),
    manifest: JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')),
    root: `LABEL=${ROOT_LABEL}`,
    diskBytes: st.size + CARD_HEADROOM_BYTES,
    bootDir: BOOT_MOUNT,
  };
}
