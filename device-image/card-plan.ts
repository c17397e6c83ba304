/**
 * The decisions behind `fleetlab card build --board rpi3|rpi4`, a card image a lab flashes:
 * which Raspberry Pi firmware and device trees go on the boot partition, its `config.txt` and
 * `cmdline.txt`, the two partitions and their MBR, and the first-boot file (`fleetlab.txt`)
 * the user edits on the boot partition: its template, its parser, and what applying it writes.
 * Pure: the build (./flash-image.ts) and the board's first boot (./first-boot.ts) do the I/O.
 */
import { FleetlabError } from '../src/errors.js';
import { parseLedGpio } from '../src/supervisor/adapters/led.js';
import { BOARD, dockerDaemonConfigFor, ENV_FILE_HEADER, hostsFile, installEnv, NETWORK_UNITS, supervisorConfig, supervisorUnit } from './board-layout.js';

export type FlashBoard = 'rpi3' | 'rpi4';

export interface FlashBoardFacts {
  readonly models: string;
  /** The slug the supervisor reports as its device type. */
  readonly deviceType: string;
  /** From Debian's raspi-firmware package (`/usr/lib/raspi-firmware/`). */
  readonly firmware: readonly string[];
  /** From the kernel package (`/usr/lib/linux-image-<version>/broadcom/`); `upstream_kernel=1` makes the firmware pick these names. */
  readonly dtbs: readonly string[];
  /** Kernel parameters the board needs beyond the common ones. */
  readonly cmdlineExtra: readonly string[];
}

export const FLASH_BOARDS: Readonly<Record<FlashBoard, FlashBoardFacts>> = {
  rpi3: {
    models: 'Raspberry Pi 3 B, 3 B+, 3 A+, Zero 2 W',
    deviceType: 'raspberrypi3-64',
    firmware: ['bootcode.bin', 'start.elf', 'fixup.dat'],
    dtbs: ['bcm2837-rpi-3-b.dtb', 'bcm2837-rpi-3-b-plus.dtb', 'bcm2837-rpi-3-a-plus.dtb', 'bcm2837-rpi-zero-2-w.dtb', 'bcm2837-rpi-cm3-io3.dtb'],
    // As Debian's raspi-firmware sets it for boards before the Pi 4 (whose firmware reserves CMA itself).
    cmdlineExtra: ['cma=64M'],
  },
  rpi4: {
    models: 'Raspberry Pi 4 B, 400, Compute Module 4',
    deviceType: 'raspberrypi4-64',
    // The Pi 4 boots from its EEPROM: no bootcode.bin.
    firmware: ['start4.elf', 'fixup4.dat'],
    dtbs: ['bcm2711-rpi-4-b.dtb', 'bcm2711-rpi-400.dtb', 'bcm2711-rpi-cm4-io.dtb'],
    cmdlineExtra: [],
  },
};

/** `--board` as given: one of FLASH_BOARDS, or an error that says why not. */
export function flashBoard(name: string): FlashBoard {
  if (name === 'rpi3' || name === 'rpi4') return name;
  if (name === 'rpi5') {
    throw new FleetlabError(
      'SUP_ERR_BAD_REQUEST',
      "--board rpi5 is not built: the Pi 5's Ethernet, USB and GPIO sit behind its RP1 chip, which Debian 13's kernel (6.12) has no driver for, so the image would boot without network or LED. Use Raspberry Pi OS on a Pi 5 and `fleetlab board install` onto it",
    );
  }
  throw new FleetlabError('SUP_ERR_BAD_REQUEST', `--board must be rpi3 or rpi4, not ${JSON.stringify(name)}`);
}

/** Names a card image for the HIL qemu target to boot instead of the emulated Pi's own image (`fleetlab test --flash-image`). */
export const FLASH_IMAGE_VARIABLE = 'FLEETLAB_QEMU_FLASH_IMAGE';

/** The root filesystem's label: cmdline.txt and fstab name it, so it boots whichever mmcblk number the SD card gets. */
export const ROOT_LABEL = 'fleetlab-root';
/** The boot partition's FAT label (11 characters at most). */
export const BOOT_LABEL = 'FLEETBOOT';
/** Where Raspberry Pi OS and Debian mount the boot partition. */
export const BOOT_MOUNT = '/boot/firmware';
/** The kernel and initramfs on the boot partition under fixed names; a kernel upgrade replaces them (flashImageFiles' hook). */
export const BOOT_KERNEL = 'vmlinuz';
export const BOOT_INITRD = 'initrd.img';

export function configTxt(board: FlashBoard, version: string): string {
  return [
    `# fleetlab ${version} for the ${FLASH_BOARDS[board].models}. The Raspberry Pi firmware reads this file;`,
    '# the supervisor adds HOST_CONFIG_* settings below and keeps every other line.',
    'arm_64bit=1',
    'enable_uart=1',
    'upstream_kernel=1',
    `kernel=${BOOT_KERNEL}`,
    `initramfs ${BOOT_INITRD} followkernel`,
    '',
  ].join('\n');
}

/** One line, as the firmware wants it. The console on the GPIO header's UART (ttyS1 with the upstream device trees) and the screen. */
export function cmdlineTxt(board: FlashBoard): string {
  return `${['console=tty0', 'console=ttyS1,115200', `root=LABEL=${ROOT_LABEL}`, 'rootfstype=ext4', 'rw', 'fsck.repair=yes', 'net.ifnames=0', 'rootwait', ...FLASH_BOARDS[board].cmdlineExtra].join(' ')}\n`;
}

export function flashFstab(): string {
  return [
    `LABEL=${ROOT_LABEL} / ext4 rw,noatime 0 1`,
    // nofail: a damaged boot partition must not hold the board in emergency mode, out of SSH's reach.
    `LABEL=${BOOT_LABEL} ${BOOT_MOUNT} vfat rw,noatime,fmask=0022,dmask=0022,nofail 0 2`,
    'tmpfs /tmp tmpfs mode=1777,nosuid,nodev 0 0',
    '',
  ].join('\n');
}

// --- The card: two partitions behind an MBR ------------------------------------------------

export const SECTOR = 512;
/** Both partitions start on 4 MiB boundaries, as Raspberry Pi OS's do (SD cards erase in such blocks). */
export const ALIGN_SECTORS = (4 * 1024 * 1024) / SECTOR;

export interface MbrPartition {
  /** 0x0c FAT32 (LBA), 0x83 Linux. */
  readonly type: number;
  readonly startSector: number;
  readonly sectors: number;
}

export interface CardLayout {
  readonly boot: MbrPartition;
  readonly root: MbrPartition;
  readonly totalBytes: number;
}

const alignUp = (sectors: number) => Math.ceil(sectors / ALIGN_SECTORS) * ALIGN_SECTORS;

/** The boot partition first, then the root filesystem, each rounded up to the alignment. */
export function cardLayout(bootBytes: number, rootBytes: number): CardLayout {
  const boot = { type: 0x0c, startSector: ALIGN_SECTORS, sectors: alignUp(Math.ceil(bootBytes / SECTOR)) };
  const root = { type: 0x83, startSector: boot.startSector + boot.sectors, sectors: alignUp(Math.ceil(rootBytes / SECTOR)) };
  return { boot, root, totalBytes: (root.startSector + root.sectors) * SECTOR };
}

/** The 512-byte master boot record: no boot code (the Pi's firmware reads the FAT partition), two primary partitions. */
export function mbrBytes(diskId: number, partitions: readonly MbrPartition[]): Buffer {
  if (partitions.length > 4) throw new FleetlabError('SUP_ERR_INTERNAL', 'an MBR holds four primary partitions');
  const mbr = Buffer.alloc(SECTOR);
  mbr.writeUInt32LE(diskId >>> 0, 440);
  partitions.forEach((p, i) => {
    const at = 446 + i * 16;
    // CHS fields say "use LBA" (0xfe 0xff 0xff), as every partitioning tool writes for disks past 8 GB.
    mbr.set([0x00, 0xfe, 0xff, 0xff, p.type, 0xfe, 0xff, 0xff], at);
    mbr.writeUInt32LE(p.startSector, at + 8);
    mbr.writeUInt32LE(p.sectors, at + 12);
  });
  mbr[510] = 0x55;
  mbr[511] = 0xaa;
  return mbr;
}

export function parseMbr(mbr: Buffer): { diskId: number; partitions: MbrPartition[] } {
  if (mbr.length < SECTOR || mbr[510] !== 0x55 || mbr[511] !== 0xaa) throw new FleetlabError('SUP_ERR_BAD_REQUEST', 'no MBR partition table (the first sector does not end in 55 aa)');
  const partitions: MbrPartition[] = [];
  for (let i = 0; i < 4; i++) {
    const at = 446 + i * 16;
    const type = mbr[at + 4]!;
    if (type === 0) continue;
    partitions.push({ type, startSector: mbr.readUInt32LE(at + 8), sectors: mbr.readUInt32LE(at + 12) });
  }
  return { diskId: mbr.readUInt32LE(440), partitions };
}

/**
 * The MBR with the root partition (the second) grown to the end of a card of `diskSectors`,
 * or undefined when it already reaches it (within one alignment block). A flashed image is
 * as small as its contents; the card is larger.
 */
export function grownRootMbr(mbr: Buffer, diskSectors: number): Buffer | undefined {
  const { partitions } = parseMbr(mbr);
  const root = partitions[1];
  if (!root || root.type !== 0x83) return undefined;
  const end = Math.min(diskSectors, 0xffffffff);
  const sectors = Math.floor((end - root.startSector) / ALIGN_SECTORS) * ALIGN_SECTORS;
  if (sectors <= root.sectors) return undefined;
  const grown = Buffer.from(mbr);
  grown.writeUInt32LE(sectors, 446 + 16 + 12);
  return grown;
}

// --- fleetlab.txt: the first-boot settings on the boot partition ---------------------------

export const PROVISION_FILE = 'fleetlab.txt';
/** What the file is renamed to once applied (its provisioning key removed): rename it back to apply again. */
export const APPLIED_FILE = 'fleetlab-applied.txt';
/** Written beside it when it cannot be applied, saying which line to fix. */
export const ERROR_FILE = 'fleetlab-error.txt';
/** Its presence keeps systemd-timesyncd from starting (`ntp=off`): a condition in the unit's drop-in, read at each start. */
export const NTP_OFF_MARKER = '/etc/fleetlab/ntp-off';

export interface Provision {
  readonly hostname?: string;
  readonly cloudUrl?: string;
  readonly provisioningKey?: string;
  readonly sshKeys: readonly string[];
  /** `<chip label>:<offset>`, a GPIO number, or `none`; absent: the board model's ACT LED. */
  readonly led?: string;
  /** Time servers, `off`, or absent for Debian's pool. */
  readonly ntp?: readonly string[] | 'off';
}

export function provisionTemplate(board: FlashBoard): string {
  return [
    `# fleetlab first boot (${FLASH_BOARDS[board].models}).`,
    '# Edit this file on the card\'s boot partition, then boot the board. It is applied at that boot',
    `# and renamed to ${APPLIED_FILE} (the provisioning key taken out); to apply it again, edit`,
    `# that file and rename it back to ${PROVISION_FILE}. A line it cannot use is explained in ${ERROR_FILE}.`,
    '# Lines are name=value; a line starting with # is ignored.',
    '',
    '# The board\'s hostname: letters, digits and hyphens, up to 63.',
    'hostname=fleetlab',
    '',
    '# The cloud link: your cloud\'s URL and the fleet\'s provisioning key. Both empty: local mode',
    '# (the device API on port 48484 takes apps from `fleetlab push` or POST /v2/local/target-state).',
    'cloud_url=',
    'provisioning_key=',
    '',
    '# SSH public keys that may log in as root, one ssh_key= line each (the image has no password login).',
    '# ssh_key=ssh-ed25519 AAAA... you@laptop',
    '',
    '# The identify LED: "<gpio chip label>:<offset>", a GPIO number, or none. Empty: the board\'s ACT LED.',
    'led=',
    '',
    '# Time servers, space-separated, or off. Empty: the Debian pool. The board has no clock of its',
    '# own, and TLS to a cloud fails with a clock in the past.',
    'ntp=',
    '',
  ].join('\n');
}

const KNOWN_KEYS = ['hostname', 'cloud_url', 'provisioning_key', 'ssh_key', 'led', 'ntp'] as const;
const HOSTNAME = /^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$/;
const SSH_KEY = /^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]+={0,3}( [^\r\n]*)?$/;
const NTP_SERVER = /^[A-Za-z0-9.:-]+$/;

/**
 * The file as the user left it (any line ending, a byte-order mark from a Windows editor):
 * the settings, or every line that cannot be used, each saying what to write instead.
 */
export function parseProvision(text: string): { provision: Provision; errors: string[] } {
  const errors: string[] = [];
  const values = new Map<string, string>();
  const sshKeys: string[] = [];
  text.replace(/^\uFEFF/, '').split(/\r?\n|\r/).forEach((raw, i) => {
    const line = raw.trim();
    const where = `line ${i + 1}`;
    if (line === '' || line.startsWith('#')) return;
    const eq = line.indexOf('=');
    if (eq < 0) return void errors.push(`${where}: "${line}" is not name=value`);
    const key = line.slice(0, eq).trim().toLowerCase();
    const value = line.slice(eq + 1).trim();
    if (!(KNOWN_KEYS as readonly string[]).includes(key)) return void errors.push(`${where}: unknown setting "${key}" (known: ${KNOWN_KEYS.join(', ')})`);
    if (key === 'ssh_key') {
      if (value === '') return;
      if (!SSH_KEY.test(value)) return void errors.push(`${where}: ssh_key must be one public key line as in ~/.ssh/id_ed25519.pub ("ssh-ed25519 AAAA... comment")`);
      return void sshKeys.push(value);
    }
    if (values.has(key)) return void errors.push(`${where}: ${key} is set twice`);
    values.set(key, value);
    if (value === '') return;
    if (key === 'hostname' && !HOSTNAME.test(value)) errors.push(`${where}: hostname must be 1-63 letters, digits or hyphens, not starting or ending with a hyphen, got "${value}"`);
    if (key === 'cloud_url') {
      let url: URL | undefined;
      try {
        url = new URL(value);
      } catch {
        /* said below */
      }
      if (!url || !['http:', 'https:'].includes(url.protocol)) errors.push(`${where}: cloud_url must be an http(s) URL such as https://cloud.example.com, got "${value}"`);
    }
    if (key === 'provisioning_key' && /\s/.test(value)) errors.push(`${where}: provisioning_key must be one word (no spaces)`);
    if (key === 'led' && value !== 'none') {
      try {
        parseLedGpio(value);
      } catch {
        errors.push(`${where}: led must be "<gpio chip label>:<offset>" (such as pinctrl-bcm2711:42), a GPIO number, or none, got "${value}"`);
      }
    }
    if (key === 'ntp' && value !== 'off' && !value.split(/\s+/).every((s) => NTP_SERVER.test(s))) errors.push(`${where}: ntp must be host names or addresses separated by spaces, or off, got "${value}"`);
  });
  const get = (k: string) => values.get(k) || undefined;
  if (Boolean(get('cloud_url')) !== Boolean(get('provisioning_key'))) {
    errors.push(get('cloud_url') ? 'cloud_url is set without provisioning_key: set both (a cloud link) or neither (local mode)' : 'provisioning_key is set without cloud_url: set both (a cloud link) or neither (local mode)');
  }
  const ntp = get('ntp');
  const provision: Provision = {
    ...(get('hostname') ? { hostname: get('hostname')! } : {}),
    ...(get('cloud_url') ? { cloudUrl: get('cloud_url')!, provisioningKey: get('provisioning_key')! } : {}),
    sshKeys,
    ...(get('led') ? { led: get('led')! } : {}),
    ...(ntp ? { ntp: ntp === 'off' ? ('off' as const) : ntp.split(/\s+/) } : {}),
  };
  return { provision, errors };
}

/** What a failed apply leaves on the boot partition: the errors, and what to do. */
export function errorFileText(errors: readonly string[], at: Date): string {
  return [`# ${PROVISION_FILE} was not applied (${at.toISOString()}). Fix these lines in ${PROVISION_FILE} and boot again:`, ...errors, ''].join('\n');
}

/** The applied file: the user's text with the provisioning key's value taken out (anyone with the card can read FAT). */
export function appliedFileText(text: string, at: Date): string {
  const kept = text.replace(/^\uFEFF/, '').replace(/^(\s*provisioning_key\s*=)\s*\S.*$/gim, `# provisioning key applied ${at.toISOString()} and removed from the card\n$1`);
  return `# Applied ${at.toISOString()}. To apply again: edit, and rename this file to ${PROVISION_FILE}.\n${kept}`;
}

/**
 * The supervisor's env file with the cloud link set (or, for local mode, taken out): the
 * FLEETLAB_* settings a user put there themselves stay.
 */
export function withCloudLink(envText: string, provision: Provision): string {
  const managed = ['FLEETLAB_LOCAL_MODE', 'FLEETLAB_CLOUD_URL', 'FLEETLAB_PROVISIONING_KEY'];
  const kept = envText.split('\n').filter((l) => l !== '' && !managed.some((k) => l.startsWith(`${k}=`)));
  const link = provision.cloudUrl ? [`FLEETLAB_LOCAL_MODE=false`, `FLEETLAB_CLOUD_URL=${provision.cloudUrl}`, `FLEETLAB_PROVISIONING_KEY=${provision.provisioningKey}`] : [];
  return `${[...kept, ...link].join('\n')}\n`;
}

/** root's authorized_keys with the provisioned keys added once each. */
export function withAuthorizedKeys(existing: string, keys: readonly string[]): string {
  const lines = existing.split('\n').filter((l) => l.trim() !== '');
  const have = new Set(lines.map((l) => l.split(/\s+/).slice(0, 2).join(' ')));
  for (const k of keys) if (!have.has(k.split(/\s+/).slice(0, 2).join(' '))) lines.push(k);
  return lines.length ? `${lines.join('\n')}\n` : '';
}

/** systemd-timesyncd's drop-in for the servers given (`ntp=a b`). */
export function timesyncdConf(servers: readonly string[]): string {
  return `# Written at first boot from ${PROVISION_FILE} (ntp=).\n[Time]\nNTP=${servers.join(' ')}\n`;
}

// --- The root filesystem's own files ------------------------------------------------------

export interface CardFile {
  readonly path: string;
  readonly content: string;
  readonly mode: number;
}

export const FIRST_BOOT_UNIT = 'fleetlab-first-boot.service';

/** Units a card image enables on top of Debian's own (Debian's systemd-timesyncd link stays: FLASH_KEEPS_ENABLED). */
export const FLASH_ENABLED_UNITS: ReadonlyArray<{ wantedBy: string; unit: string; source: string }> = [
  { wantedBy: 'sysinit.target', unit: FIRST_BOOT_UNIT, source: `/etc/systemd/system/${FIRST_BOOT_UNIT}` },
  { wantedBy: 'multi-user.target', unit: BOARD.unit, source: BOARD.unitFile },
  ...NETWORK_UNITS,
];
/** Of the units the emulated boards disable, what a card keeps: a real Pi needs NTP. */
export const FLASH_KEEPS_ENABLED = ['sysinit.target.wants/systemd-timesyncd.service'] as const;

/** Keeps the boot partition's kernel and initramfs the newest installed ones, so `apt upgrade` of the kernel boots (as Debian's raspi-firmware hook does). */
export function kernelHookScript(): string {
  return `#!/bin/sh
# fleetlab: the Pi's firmware boots ${BOOT_MOUNT}/${BOOT_KERNEL} and ${BOOT_INITRD} (config.txt): keep them the newest kernel's.
set -e
if ! mountpoint -q ${BOOT_MOUNT}; then echo "fleetlab: ${BOOT_MOUNT} is not mounted: the new kernel is not on the boot partition" >&2; exit 0; fi
latest=$(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$latest" ] || exit 0
version=\${latest#/boot/vmlinuz-}
# The initramfs hook runs this again once the new initramfs exists.
[ -e "/boot/initrd.img-$version" ] || exit 0
for dtb in /usr/lib/linux-image-$version/broadcom/bcm27*.dtb; do [ -e "$dtb" ] && cp "$dtb" ${BOOT_MOUNT}/; done
cp "$latest" ${BOOT_MOUNT}/${BOOT_KERNEL}.new && mv ${BOOT_MOUNT}/${BOOT_KERNEL}.new ${BOOT_MOUNT}/${BOOT_KERNEL}
cp "/boot/initrd.img-$version" ${BOOT_MOUNT}/${BOOT_INITRD}.new && mv ${BOOT_MOUNT}/${BOOT_INITRD}.new ${BOOT_MOUNT}/${BOOT_INITRD}
sync
`;
}

/** Everything fleetlab adds to Debian's root filesystem on a card (the supervisor's own files come from stageSupervisor). */
export function flashRootFiles(board: FlashBoard): CardFile[] {
  const unit = (lines: string[]) => `${lines.join('\n')}\n`;
  return [
    { path: '/etc/hostname', content: 'fleetlab\n', mode: 0o644 },
    { path: '/etc/hosts', content: hostsFile('fleetlab'), mode: 0o644 },
    { path: '/etc/fstab', content: flashFstab(), mode: 0o644 },
    { path: '/etc/systemd/network/10-wired.network', content: '[Match]\nName=e*\n\n[Network]\nDHCP=yes\n', mode: 0o644 },
    { path: BOARD.dockerDaemonConfig, content: dockerDaemonConfigFor(undefined).text, mode: 0o644 },
    { path: BOARD.configFile, content: `${JSON.stringify(supervisorConfig({ bootDir: BOOT_MOUNT, deviceType: FLASH_BOARDS[board].deviceType }), null, 2)}\n`, mode: 0o644 },
    { path: BOARD.envFile, content: ENV_FILE_HEADER, mode: 0o644 },
    { path: BOARD.installEnvFile, content: installEnv({ ledGpio: '' }), mode: 0o644 },
    { path: BOARD.unitFile, content: supervisorUnit({ after: [FIRST_BOOT_UNIT] }), mode: 0o644 },
    {
      path: `/etc/systemd/system/${FIRST_BOOT_UNIT}`,
      content: unit([
        '[Unit]', `Description=fleetlab: grow the root partition, apply ${PROVISION_FILE} from the boot partition`,
        'DefaultDependencies=no', 'After=local-fs.target', `RequiresMountsFor=${BOOT_MOUNT}`,
        `Before=sysinit.target shutdown.target systemd-timesyncd.service systemd-networkd.service systemd-hostnamed.service ssh.service ${BOARD.unit}`,
        'Conflicts=shutdown.target',
        // Either is enough: a file to apply, or a partition not yet grown.
        `ConditionPathExists=|${BOOT_MOUNT}/${PROVISION_FILE}`, `ConditionPathExists=|!${ROOT_GROWN_MARKER_PATH}`, `ConditionPathExists=|!${SSH_HOST_KEY}`,
        '', '[Service]', 'Type=oneshot', 'RemainAfterExit=yes',
        `Environment=NODE_COMPILE_CACHE=${BOARD.compileCache}/node-compile-cache`,
        `ExecStart=${BOARD.node} ${BOARD.bundle} first-boot`,
        '', '[Install]', 'WantedBy=sysinit.target',
      ]),
      mode: 0o644,
    },
    { path: '/etc/systemd/system/systemd-timesyncd.service.d/fleetlab.conf', content: `# ntp=off in ${PROVISION_FILE}\n[Unit]\nConditionPathExists=!${NTP_OFF_MARKER}\n`, mode: 0o644 },
    { path: '/etc/kernel/postinst.d/zz-fleetlab-boot-partition', content: kernelHookScript(), mode: 0o755 },
    { path: '/etc/initramfs/post-update.d/zz-fleetlab-boot-partition', content: kernelHookScript(), mode: 0o755 },
  ];
}

/** The image ships without SSH host keys; first-boot makes them when this one is missing. */
export const SSH_HOST_KEY = '/etc/ssh/ssh_host_ed25519_key';
/** Written by first-boot once the root partition fills the card (device-image/first-boot.ts). */
export const ROOT_GROWN_MARKER_PATH = '/etc/fleetlab/root-grown';

/**
 * fleetlab.txt with some settings given values (replacing the line, or added at the end) and
 * SSH keys added: how the emulator provisions a card image as a user edits one.
 */
export function withProvisionSettings(text: string, set: Readonly<Record<string, string>>, addSshKeys: readonly string[] = []): string {
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  while (lines.length && lines.at(-1) === '') lines.pop();
  for (const [key, value] of Object.entries(set)) {
    const at = lines.findIndex((l) => new RegExp(`^\\s*${key}\\s*=`, 'i').test(l));
    if (at >= 0) lines[at] = `${key}=${value}`;
    else lines.push(`${key}=${value}`);
  }
  return `${[...lines, ...addSshKeys.map((k) => `ssh_key=${k.trim()}`)].join('\n')}\n`;
}
