/**
 * What a flashed fleetlab card does at boot before the network and the supervisor start
 * (`fleetlab-device first-boot`, run by fleetlab-first-boot.service): grow the root partition
 * to the card's size once, and apply `fleetlab.txt` from the boot partition when the user left
 * one there (hostname, SSH keys, the cloud link or local mode, the LED line, time servers).
 * The decisions are ./card-plan.ts; this is the files and the two tools it takes.
 */
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, readSync, realpathSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { execa } from 'execa';
import { writeFileAtomic } from '../src/atomic-file.js';
import { errorText } from '../src/errors.js';
import { ledLineFor } from './board-layout.js';
import { BOARD, hostsFile, installEnv } from './board-layout.js';
import { APPLIED_FILE, ERROR_FILE, appliedFileText, BOOT_MOUNT, errorFileText, grownRootMbr, ROOT_GROWN_MARKER_PATH as ROOT_GROWN_MARKER, SSH_HOST_KEY, NTP_OFF_MARKER, parseProvision, PROVISION_FILE, SECTOR, timesyncdConf, withAuthorizedKeys, withCloudLink } from './card-plan.js';

export const TIMESYNCD_DROPIN = '/etc/systemd/timesyncd.conf.d/fleetlab.conf';

export interface FirstBootOptions {
  /** Prefix for every path (tests apply a file to a directory tree); '' on the board. */
  readonly root?: string;
  readonly log?: (line: string) => void;
  readonly now?: () => Date;
  /** Grow the root partition (on the board only: it reads /proc, /sys and the disk). */
  readonly growRoot?: boolean;
}

/** 'failed' when fleetlab.txt could not be applied (the reasons are in fleetlab-error.txt). */
export async function firstBoot(o: FirstBootOptions = {}): Promise<'applied' | 'nothing' | 'failed'> {
  const root = o.root ?? '';
  const log = o.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const at = (path: string) => `${root}${path}`;
  if (o.growRoot && !existsSync(at(ROOT_GROWN_MARKER))) {
    try {
      log(await growRootPartition());
      await writeFileAtomic(at(ROOT_GROWN_MARKER), '');
    } catch (err) {
      log(`root partition: not grown: ${errorText(err)}`);
    }
  }
  if (!existsSync(at(SSH_HOST_KEY))) {
    // The image carries none: every flashed board makes its own, before sshd starts.
    mkdirSync(at('/etc/ssh'), { recursive: true });
    await execa('ssh-keygen', ['-A', ...(root ? ['-f', root] : [])]);
    log('ssh: host keys made');
  }
  const file = at(`${BOOT_MOUNT}/${PROVISION_FILE}`);
  if (!existsSync(file)) return 'nothing';
  const text = readFileSync(file, 'utf8');
  const now = (o.now ?? (() => new Date()))();
  const { provision, errors } = parseProvision(text);
  if (errors.length) {
    writeFileSync(at(`${BOOT_MOUNT}/${ERROR_FILE}`), errorFileText(errors, now));
    for (const e of errors) log(`${PROVISION_FILE}: ${e}`);
    return 'failed';
  }
  if (provision.hostname) {
    await writeFileAtomic(at('/etc/hostname'), `${provision.hostname}\n`);
    await writeFileAtomic(at('/etc/hosts'), hostsFile(provision.hostname));
    // Before hostnamed and the network: the kernel's name is what they read.
    if (!root) writeFileSync('/proc/sys/kernel/hostname', provision.hostname);
    log(`hostname: ${provision.hostname}`);
  }
  if (provision.sshKeys.length) {
    mkdirSync(at('/root/.ssh'), { recursive: true, mode: 0o700 });
    const keys = at('/root/.ssh/authorized_keys');
    await writeFileAtomic(keys, withAuthorizedKeys(existsSync(keys) ? readFileSync(keys, 'utf8') : '', provision.sshKeys), 0o600);
    log(`ssh: ${provision.sshKeys.length} key(s) for root`);
  }
  const envFile = at(BOARD.envFile);
  await writeFileAtomic(envFile, withCloudLink(existsSync(envFile) ? readFileSync(envFile, 'utf8') : '', provision));
  log(provision.cloudUrl ? `cloud: ${provision.cloudUrl}` : 'cloud: none, local mode');
  const model = existsSync(at('/proc/device-tree/model')) ? readFileSync(at('/proc/device-tree/model'), 'utf8').replace(/\0/g, '') : '';
  const led = ledLineFor(provision.led, model);
  await writeFileAtomic(at(BOARD.installEnvFile), installEnv({ ledGpio: led.line }));
  log(`led: ${led.line || 'none'} (${led.source === 'model' ? model : led.source})`);
  rmSync(at(NTP_OFF_MARKER), { force: true });
  rmSync(at(TIMESYNCD_DROPIN), { force: true });
  if (provision.ntp === 'off') await writeFileAtomic(at(NTP_OFF_MARKER), '');
  else if (provision.ntp) await writeFileAtomic(at(TIMESYNCD_DROPIN), timesyncdConf(provision.ntp));
  log(`ntp: ${provision.ntp === 'off' ? 'off' : provision.ntp ? provision.ntp.join(' ') : 'the Debian pool'}`);
  // The applied copy first: killed between the two, the next boot applies the same file again.
  writeFileSync(at(`${BOOT_MOUNT}/${APPLIED_FILE}`), appliedFileText(text, now));
  rmSync(at(`${BOOT_MOUNT}/${ERROR_FILE}`), { force: true });
  rmSync(file);
  log(`${PROVISION_FILE}: applied, now ${APPLIED_FILE}`);
  return 'applied';
}

/** The root filesystem's partition as the kernel sees it: `179:2` in /proc/self/mountinfo, then sysfs. */
function rootPartition(): { disk: string; partition: number } {
  const line = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').find((l) => l.split(' ')[4] === '/');
  const majMin = line?.split(' ')[2];
  if (!majMin) throw new Error('/ is not in /proc/self/mountinfo');
  const sys = realpathSync(`/sys/dev/block/${majMin}`);
  const partitionFile = join(sys, 'partition');
  if (!existsSync(partitionFile)) throw new Error(`/ is on ${basename(sys)}, not on a partition`);
  return { disk: basename(dirname(sys)), partition: Number(readFileSync(partitionFile, 'utf8').trim()) };
}

/** Rewrites the MBR's second entry to the card's end, tells the kernel, grows ext4 online. */
async function growRootPartition(): Promise<string> {
  const { disk, partition } = rootPartition();
  if (partition !== 2) return `root partition: / is partition ${partition} of ${disk}, not the image's second: left as it is`;
  const diskSectors = Number(readFileSync(`/sys/block/${disk}/size`, 'utf8').trim());
  const device = `/dev/${disk}`;
  const fd = openSync(device, 'r+');
  try {
    const mbr = Buffer.alloc(SECTOR);
    readSync(fd, mbr, 0, SECTOR, 0);
    const grown = grownRootMbr(mbr, diskSectors);
    if (!grown) return `root partition: already fills ${device}`;
    writeSync(fd, grown, 0, SECTOR, 0);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  await execa('partx', ['--update', '--nr', '2', device]);
  await execa('/usr/lib/systemd/systemd-growfs', ['/']);
  return `root partition: grown to the end of ${device} (${((diskSectors * SECTOR) / 1024 ** 3).toFixed(1)} GiB card)`;
}
