/**
 * The command line of `qemu-system-aarch64` for one emulated board. Pure: the same input
 * gives the same argv, nothing is read or started here, so every machine fact below is
 * checked by a unit test and the runner that spawns QEMU stays small.
 *
 * Facts this relies on (QEMU 7.2, checked by running it and in hw/arm/bcm2835_peripherals.c):
 * - raspi3b wires serial_hd(0) to the PL011 (UART0) and serial_hd(1) to the AUX mini UART.
 *   The kernel console is on the mini UART (ttyS1), so the first -serial is `null` and the
 *   second is the log file.
 * - `-nodefaults` keeps what the board itself has (raspi3b's SD card slot and USB host
 *   controller, virt's virtio-mmio transports); it only drops the default monitor, serial,
 *   parallel port and VGA, which is what we want with QMP as the only control channel.
 *   So every -serial must be given explicitly.
 * - raspi3b has fixed RAM (1 GiB) and 4 cores: -m/-smp are not passed for it.
 * - `set_link` accepts both the NIC's device id (`nic0`) and the netdev id (`net0`); an
 *   unknown name is a DeviceNotFound error. Use the NIC id: QEMU marks that NIC's link down
 *   and drops its frames both ways, leaving the user-mode backend alone (with the netdev id
 *   it marks both down, net/net.c qmp_set_link). virtio-net also reports carrier loss to the
 *   guest; usb-net (raspi3b) has no link-status hook, so there the guest interface stays up
 *   and traffic just stops, like a cable pulled behind a switch.
 * - `noReboot` (`-no-reboot`), which the launcher (boot.ts) sets: a reset ends the process
 *   instead of resetting the machine in place, and the launcher starts a new one on the same disk: after an in-place reset,
 *   raspi3b's usb-net never carried a packet again (measured), and a new process is what a
 *   board's reset is anyway: every device starts from power-on.
 */
import { FleetlabError } from '../src/errors.js';
import type { MachineKind } from './gpio-probe.js';

export type { MachineKind };

/** The netdev (user-mode network backend) id. */
export const NETDEV_ID = 'net0';
/** The guest NIC's device id: the name to give QMP `set_link` to cut the network. */
export const NIC_ID = 'nic0';

/** The console's chardev id when it is on a pty (QMP query-chardev names its /dev/pts path). */
export const CONSOLE_CHARDEV = 'console';

export const GUEST_API_PORT = 48484;
export const GUEST_SSH_PORT = 22;

export interface PortForward<G extends number> {
  /** Port on 127.0.0.1 of the host. */
  host: number;
  guest: G;
}

export interface QemuArgvInput {
  machine: MachineKind;
  kernel: string;
  initrd: string;
  /** raspi3b only: the board's device tree. */
  dtb?: string;
  /** qcow2 overlay over the base image; on raspi3b the base's virtual size must be a power of two (SD card rule). */
  disk: string;
  appendExtra?: string[];
  /** The kernel's root= (default: the whole disk, /dev/mmcblk0 or /dev/vda); a card image's root partition is LABEL=fleetlab-root. */
  root?: string;
  hostfwd: { api: PortForward<typeof GUEST_API_PORT>; ssh: PortForward<typeof GUEST_SSH_PORT> };
  qmpSocket: string;
  serialLog: string;
  /** A second QMP socket, free for a user or tool while the launcher holds `qmpSocket`. */
  userQmpSocket?: string;
  /** Host time handed to the guest (fleetlab.epoch=) so it starts with a sane clock without RTC or NTP. */
  epochSeconds: number;
  /** virt only (raspi3b has 1 GiB fixed); default 1024. */
  memoryMiB?: number;
  /** virt only (raspi3b has 4 cores fixed); default 2 (`boardCpus`). */
  cpus?: number;
  /** How QEMU emulates: what bench/qemu-options.bench.ts compares; unset, QEMU's own defaults. */
  tuning?: QemuTuning;
  /**
   * The console on a pseudo-terminal as well as in serialLog (`-chardev pty,logfile=`): what a
   * lab's USB serial adapter is to a real board, for the `board` target's serial capture.
   */
  consolePty?: boolean;
  /** Start with the CPUs stopped (-S) until QMP `cont`. */
  paused?: boolean;
  /** `-no-reboot`: any reset (the guest's or QMP `system_reset`) ends QEMU instead (see above). */
  noReboot?: boolean;
  /**
   * `-incoming defer`: the machine's state comes from a saved migration stream (QMP
   * `migrate-incoming`, ./ready-state.ts) instead of a boot; it stays paused until `cont`.
   */
  incoming?: boolean;
}

/**
 * Emulation choices that change speed, not what the guest sees: TCG with one thread per vCPU
 * (QEMU's default for an arm64 guest on an x86-64 host) or one thread for all, and the host
 * cache mode of the disk. `unsafe` drops the guest's flushes on the host side only: a killed
 * QEMU (the harness's power cut) still leaves on disk what the guest had written to its disk,
 * as with `writeback`; only a crash of this host would lose more.
 */
export interface QemuTuning {
  readonly tcgThreads?: 'multi' | 'single';
  readonly diskCache?: 'writeback' | 'unsafe' | 'none' | 'writethrough' | 'directsync';
  /**
   * Leave the guest kernel's page table isolation as the kernel chooses (on virt: forced on by
   * KASLR, which virt's kaslr-seed enables). Unset, the board boots with `kpti=0` (why: buildQemuArgv).
   */
  readonly kernelKpti?: boolean;
}

/** The arguments after the program name. */
export function buildQemuArgv(input: QemuArgvInput): string[] {
  validate(input);
  // virt hands the kernel a kaslr-seed, and the kernel then forces page table isolation on for
  // KASLR's sake ("kernel page table isolation forced ON by KASLR"), though a Cortex-A53 is not
  // open to Meltdown. Under TCG every kernel entry and exit then switches translation tables,
  // which flushes QEMU's TLB (virt boot 30.8 s against 36.8 s median; figures in qemu/README.md).
  // An app sees no difference; a card's cmdline.txt, which a real Pi boots, keeps the default.
  const kpti = input.tuning?.kernelKpti ? [] : ['kpti=0'];
  const append = [...baseAppend(input), ...kpti, `fleetlab.epoch=${input.epochSeconds}`, ...(input.appendExtra ?? [])].join(' ');
  const netdev = [
    `user,id=${NETDEV_ID}`,
    `hostfwd=tcp:127.0.0.1:${input.hostfwd.api.host}-:${input.hostfwd.api.guest}`,
    `hostfwd=tcp:127.0.0.1:${input.hostfwd.ssh.host}-:${input.hostfwd.ssh.guest}`,
  ].join(',');
  const common = ['-display', 'none', '-nodefaults', ...(input.tuning?.tcgThreads ? ['-accel', `tcg,thread=${input.tuning.tcgThreads}`] : [])];
  const cache = input.tuning?.diskCache ? `,cache=${input.tuning.diskCache}` : '';
  const boot = ['-kernel', input.kernel, '-initrd', input.initrd];
  // A QMP socket takes one client at a time: the second one is for whoever else watches the board.
  const qmp = [input.qmpSocket, ...(input.userQmpSocket ? [input.userQmpSocket] : [])].flatMap((sock) => ['-qmp', `unix:${sock},server=on,wait=off`]);
  const paused = [...(input.paused ? ['-S'] : []), ...(input.noReboot ? ['-no-reboot'] : []), ...(input.incoming ? ['-incoming', 'defer'] : [])];
  const consoleSerial = input.consolePty ? ['-chardev', `pty,id=${CONSOLE_CHARDEV},logfile=${input.serialLog}`, '-serial', `chardev:${CONSOLE_CHARDEV}`] : ['-serial', `file:${input.serialLog}`];

  if (input.machine === 'raspi3b') {
    return [
      '-M', 'raspi3b',
      ...common,
      ...boot,
      ...(input.dtb ? ['-dtb', input.dtb] : []),
      '-append', append,
      '-drive', `if=sd,format=qcow2,file=${input.disk}${cache}`,
      '-netdev', netdev,
      '-device', `usb-net,netdev=${NETDEV_ID},id=${NIC_ID}`,
      // serial_hd(0) is the PL011, serial_hd(1) the mini UART that carries the console.
      '-serial', 'null',
      ...consoleSerial,
      ...qmp,
      ...paused,
    ];
  }
  return [
    '-M', 'virt',
    '-cpu', 'cortex-a53',
    '-m', String(input.memoryMiB ?? 1024),
    '-smp', String(input.cpus ?? 2),
    ...common,
    ...boot,
    '-append', append,
    '-drive', `if=none,id=hd0,format=qcow2,file=${input.disk}${cache}`,
    '-device', 'virtio-blk-device,drive=hd0',
    '-netdev', netdev,
    '-device', `virtio-net-device,netdev=${NETDEV_ID},id=${NIC_ID}`,
    ...consoleSerial,
    ...qmp,
    ...paused,
  ];
}

function baseAppend(input: QemuArgvInput): string[] {
  if (input.machine === 'raspi3b') {
    // dwc_otg.fiq_fsm_enable=0: the Pi kernel's USB driver must not rely on its FIQ
    // split-transaction path, which QEMU's dwc2 model is not built for; apparmor=0: the
    // image ships no profiles; net.ifnames=0: the usb-net NIC keeps its kernel name usb0, so
    // no udev rename races systemd-networkd bringing the link up. (A dead network seen later
    // had another cause, a NIC that never enumerated: see qemu/usb-net-watch.ts.)
    return [`root=${input.root ?? '/dev/mmcblk0'}`, 'rootwait', 'rw', 'console=ttyS1,115200', 'apparmor=0', 'dwc_otg.fiq_fsm_enable=0', 'net.ifnames=0'];
  }
  return [`root=${input.root ?? '/dev/vda'}`, 'rootwait', 'rw', 'console=ttyAMA0', 'apparmor=0'];
}

/** The variable that sets the vCPUs of each virt board (default 2). */
export const CPUS_VARIABLE = 'FLEETLAB_QEMU_CPUS';

/**
 * The vCPUs a virt board gets from `env` (FLEETLAB_QEMU_CPUS), or undefined for the default.
 * Under TCG each vCPU is a host thread, and the guest's TLB maintenance makes every vCPU of a
 * board meet: with more vCPU threads than host cores (two 2-vCPU boards on 2 cores) they wait
 * on each other. Measured, two virt boards at once on this 2-core machine: boot 51-61 s with
 * one vCPU each against 59-64 s with two, forks and docker calls over SSH 6.8-8.4 s against
 * 9.7-10.6 s. Alone, two vCPUs boot faster (48 s against 74-106 s, bench/qemu-options.bench.ts's
 * smp-1, before kpti=0). So: one vCPU each where several boards share the cores (.ci/run's
 * lanes), the default where a board has two.
 */
export function boardCpus(env: Readonly<Record<string, string | undefined>>): number | undefined {
  const raw = env[CPUS_VARIABLE];
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 1 || n > 8) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${CPUS_VARIABLE} must be a whole number from 1 to 8 (the vCPUs of each emulated virt board), not ${JSON.stringify(raw)}`);
  return n;
}

function bad(message: string): FleetlabError {
  return new FleetlabError('SUP_ERR_BAD_REQUEST', `qemu argv: ${message}`);
}

/** Unix socket paths are limited by sun_path (108 bytes with the NUL). */
const MAX_UNIX_PATH_BYTES = 107;

function validate(input: QemuArgvInput): void {
  if (input.machine !== 'raspi3b' && input.machine !== 'virt') throw bad(`unknown machine ${JSON.stringify(input.machine)}`);
  for (const [name, value] of Object.entries({ kernel: input.kernel, initrd: input.initrd, disk: input.disk, qmpSocket: input.qmpSocket, serialLog: input.serialLog })) {
    if (typeof value !== 'string' || value === '') throw bad(`${name} path is required`);
  }
  // These paths sit inside QEMU option strings, where a comma separates options; QEMU's
  // escape (",,") is not honoured by every parser (-serial file: takes the rest verbatim),
  // so refuse rather than build a command line that means something else.
  for (const [name, value] of Object.entries({ disk: input.disk, qmpSocket: input.qmpSocket, serialLog: input.serialLog })) {
    if (value.includes(',')) throw bad(`${name} path must not contain a comma: ${value}`);
  }
  if (Buffer.byteLength(input.qmpSocket) > MAX_UNIX_PATH_BYTES) {
    throw bad(`qmpSocket path is longer than ${MAX_UNIX_PATH_BYTES} bytes (unix socket limit): ${input.qmpSocket}`);
  }
  if (input.dtb !== undefined) {
    if (input.machine === 'virt') throw bad('virt generates its own device tree; do not pass dtb');
    if (input.dtb === '') throw bad('dtb path is empty');
  }
  const { api, ssh } = input.hostfwd ?? ({} as QemuArgvInput['hostfwd']);
  if (!api || !ssh) throw bad('hostfwd.api and hostfwd.ssh are required');
  for (const [name, port] of [['api host', api.host], ['ssh host', ssh.host]] as const) {
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw bad(`hostfwd ${name} port must be 1-65535, got ${port}`);
  }
  if (api.host === ssh.host) throw bad(`hostfwd api and ssh use the same host port ${api.host}`);
  if (api.guest !== GUEST_API_PORT) throw bad(`the supervisor API listens on guest port ${GUEST_API_PORT}, got ${api.guest}`);
  if (ssh.guest !== GUEST_SSH_PORT) throw bad(`ssh listens on guest port ${GUEST_SSH_PORT}, got ${ssh.guest}`);
  if (!Number.isInteger(input.epochSeconds) || input.epochSeconds < 0) throw bad(`epochSeconds must be a non-negative integer, got ${input.epochSeconds}`);
  for (const item of input.appendExtra ?? []) {
    // One item is one kernel parameter; whitespace would silently split it into several.
    if (item === '' || /[\s\p{Cc}]/u.test(item)) throw bad(`appendExtra item must be one non-empty parameter without whitespace: ${JSON.stringify(item)}`);
  }
  if (input.root !== undefined && (input.root === '' || /[\s\p{Cc}]/u.test(input.root))) throw bad(`root must be one kernel parameter value without whitespace: ${JSON.stringify(input.root)}`);
  if (input.machine === 'raspi3b') {
    if (input.incoming) throw bad('raspi3b cannot start from a saved state: QEMU 7.2 cannot migrate its usb-net; boot it');
    if (input.memoryMiB !== undefined && input.memoryMiB !== 1024) throw bad(`raspi3b has 1024 MiB of RAM fixed, got memoryMiB=${input.memoryMiB}`);
    if (input.cpus !== undefined && input.cpus !== 4) throw bad(`raspi3b has 4 cores fixed, got cpus=${input.cpus}`);
  } else {
    if (input.memoryMiB !== undefined && (!Number.isInteger(input.memoryMiB) || input.memoryMiB < 128)) throw bad(`memoryMiB must be an integer >= 128, got ${input.memoryMiB}`);
    if (input.cpus !== undefined && (!Number.isInteger(input.cpus) || input.cpus < 1 || input.cpus > 8)) throw bad(`cpus must be 1-8, got ${input.cpus}`);
  }
}
