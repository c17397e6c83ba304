/**
 * The `qemu` target: the emulated Raspberry Pi of qemu/ (the image `fleetlab qemu build`
 * makes: Debian arm64, systemd, D-Bus, journald, dockerd, the supervisor as a systemd unit)
 * under `qemu-system-aarch64 -M virt` by default: the fastest machine that runs every spec,
 * and the one whose boards start from a saved state. FLEETLAB_QEMU_MACHINE=raspi3b runs the
 * Pi 3 itself, for what only it emulates: the BCM2835 GPIO controller the LED is on, the Pi's
 * device tree and its USB network adapter. With
 * FLEETLAB_QEMU_FLASH_IMAGE=<card.img> (`fleetlab test --flash-image`) it boots a card image of
 * `fleetlab card build` instead, on virt (qemu/flash-boot.ts): what a lab flashes, tested.
 *
 * - `exec`, `files`, `journal`: over SSH to the forwarded port (./ssh-device.ts), as on a board.
 * - `led`: the emulated GPIO controller's level register, sampled through the QEMU monitor
 *   from outside the guest (qemu/gpio-probe.ts): what the pin does, not what the guest says.
 * - `power`: QMP `system_reset` (cycle), `quit` (cut; `on` starts QEMU again on the same
 *   disk), and the guest's own reboot through login1.
 * - `network`: the guest reaches the lab cloud through a partitionable link on the host
 *   (sim/network/), addressed through QEMU's user network (10.0.2.2 is the host's loopback).
 * - `ports`: the board's engine says which guest port a service publishes; a forward to it is
 *   added to the running QEMU when a spec asks (./qemu-ports.ts).
 *
 * One board per worker: booting takes minutes under TCG, so a worker boots once and gives each
 * next spec file a fresh device without booting again. On virt the first board of an image is
 * reset over SSH, its supervisor started and systemd left to settle, and the machine is saved
 * (qemu/ready-state.ts: its RAM as a migration stream, its disk frozen); every spec file then
 * gets a new QEMU started from that state, with its supervisor already answering, in seconds,
 * and later runs on the same image start from it too. raspi3b cannot be saved (QEMU 7.2 cannot
 * migrate its usb-net), so there each file resets the device over SSH (containers, volumes, the
 * supervisor's data and host config wiped) and starts the supervisor again. A board whose QEMU
 * is gone (a power cut that was never restored) is booted or restored again.
 */
import { join } from 'node:path';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { freePort } from '../../src/free-port.js';
import { Agent } from 'undici';
import { FleetlabError, errorText } from '../../src/errors.js';
import { fleetlabRoot } from '../../src/package-root.js';
import { bootBoard, reapAbandonedBoards, relaunch, serialTail, waitForPing, type QemuBoard } from '../../qemu/boot.js';
import { findReadyState, reapAbandonedSaves, RESTORABLE_MACHINES, restoreBoard, saveReadyState, type ReadyState } from '../../qemu/ready-state.js';
import { FLASH_IMAGE_VARIABLE } from '../../device-image/card-plan.js';
import { flashImageForQemu } from '../../qemu/flash-boot.js';
import { GpioProbe } from '../../qemu/gpio-probe.js';
import { buildImage, formatBuildProgress, imageFromDir, type QemuImage } from '../../device-image/build.js';
import { GUEST, LED_LINES } from '../../device-image/recipe.js';
import type { MachineKind } from '../../qemu/qemu-argv.js';
import { startPartitionableLink, type PartitionableLink } from '../../sim/network/partitionable-link.js';
import { httpApi } from '../lib/http.js';
import { dockerVolumePath, storedIdentity, unitLog, waitApiDown } from './board.js';
import { runResetStep, supervisorWipeLines } from '../../device-access/ssh-reset.js';
import { ensureBoardTestImages } from './board-test-images.js';
import { SerialConsole } from '../../device-access/serial-console.js';
import { PulledImages, reapAbandonedPulls } from './pulled-images.js';
import { QemuPorts } from './qemu-ports.js';
import { prepareReplayOnBoard } from '../capture/replay.js';
import { SshDevice } from '../../device-access/ssh-device.js';
import type { ApiProtocol, Capability, DevicePaths, DeviceUnderTest, ImagesProtocol, LedProtocol, NetworkProtocol, PowerProtocol, TargetFacts } from '../../device-access/protocols.js';
import type { TargetDriver, TargetStartOptions } from './target-driver.js';

export const QEMU_TARGET = 'qemu';
export const QEMU_CAPABILITIES: readonly Capability[] = ['api', 'exec', 'led', 'power.reboot', 'power.cycle', 'power.cut', 'network', 'journal', 'files', 'files.volumes', 'images', 'ports'];

/** Boot to API under TCG: 4-5 min for raspi3b on a 2-core machine, longer when it is shared. */
const BOOT_MS = 900_000;
const READY_MS = 300_000;
const DOWN_MS = 60_000;
const LED_SAMPLE_MS = 10;
const RESET_MS = 120_000;
/** Serial console lines attached to a failed test: enough for a whole boot's tail. */
const CONSOLE_LINES = 150;
const LOGIN1 = ['busctl', 'call', 'org.freedesktop.login1', '/org/freedesktop/login1', 'org.freedesktop.login1.Manager', 'Reboot', 'b', 'false'];
/** What the harness's cloud link gives the supervisor: short intervals so specs do not wait minutes. */
const CLOUD_TIMINGS = { FLEETLAB_POLL_INTERVAL_MS: '2000', FLEETLAB_REPORT_INTERVAL_MS: '500', FLEETLAB_TUNNEL_HEARTBEAT_MS: '1000' };
/** The host's loopback as QEMU's user network shows it to the guest. */
const HOST_FROM_GUEST = '10.0.2.2';

export function machineFromEnv(env: NodeJS.ProcessEnv = process.env): MachineKind {
  if (env[FLASH_IMAGE_VARIABLE] && env.FLEETLAB_QEMU_MACHINE === 'raspi3b') throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${FLASH_IMAGE_VARIABLE}: a card image boots on FLEETLAB_QEMU_MACHINE=virt, not raspi3b`);
  const m = env.FLEETLAB_QEMU_MACHINE ?? 'virt';
  if (m !== 'raspi3b' && m !== 'virt') throw new FleetlabError('SUP_ERR_BAD_REQUEST', `FLEETLAB_QEMU_MACHINE must be raspi3b or virt, not ${JSON.stringify(m)}`);
  return m;
}

/** Where a card image's config.txt as it booted is kept, for the reset to put back (its kernel= lines are the firmware's). */
const BOOT_CONFIG_AS_BOOTED = '/run/fleetlab/config.txt.booted';

/**
 * The device reset between spec files: what a fresh board would not have. The test app
 * images stay (they came with the image, or were imported once); everything a spec can
 * create goes. config.txt goes back to how the board booted: empty on the emulated Pi's image.
 */
export function resetScript(bootDir: string = GUEST.bootDir): string {
  return [
    'set -eu',
    ...supervisorWipeLines({ unit: GUEST.unit, dataDir: GUEST.dataDir, lockRoot: GUEST.lockRoot, proxyConfigDir: `${bootDir}/system-proxy` }),
    `if [ -e ${BOOT_CONFIG_AS_BOOTED} ]; then cp ${BOOT_CONFIG_AS_BOOTED} ${bootDir}/config.txt; else : > ${bootDir}/config.txt; fi`,
    `printf '# Settings for this boot (FLEETLAB_* variables); the HIL harness writes the cloud link here.\\n' > ${GUEST.envFile}`,
    'hostnamectl set-hostname fleetlab',
    'systemctl restart redsocks.service || true',
  ].join('\n');
}

/** The board has no RTC: its clock is set from the harness's after every boot and restore. */
export async function setGuestClock(ssh: SshDevice): Promise<void> {
  const set = await ssh.run(['date', '-u', '-s', `@${(Date.now() / 1000).toFixed(3)}`]);
  if (set.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `setting the board's clock over SSH: ${set.stderr.trim() || `exit ${set.exitCode}`}`);
}

/** Runs `resetScript` on the board (the supervisor is left stopped). */
export async function resetOverSsh(ssh: SshDevice, bootDir?: string): Promise<void> {
  await runResetStep(ssh, 'wipe', resetScript(bootDir), [], RESET_MS);
}

/** After a reset: the supervisor's unit started, and answering. */
export async function startSupervisor(ssh: SshDevice, board: QemuBoard): Promise<void> {
  const started = await ssh.run(['systemctl', 'start', GUEST.unit]);
  if (started.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `starting ${GUEST.unit}: ${started.stderr.trim()}`);
  await waitForPing(board.info.apiUrl, READY_MS, () => board.exitReason);
}

/** What a saved ready board has done, in the words its ready.json keeps. */
const READINESS = 'reset over SSH, supervisor started in local mode and answering /ping, systemd settled (hil/targets/qemu.ts)';

/** Until systemd has started everything it will at boot: a board saved earlier would finish starting at every restore. */
export async function waitSettled(ssh: SshDevice): Promise<void> {
  const r = await ssh.run(['timeout', String(READY_MS / 1000), 'systemctl', 'is-system-running', '--wait'], { timeoutMs: READY_MS + 10_000 });
  const state = r.stdout.trim();
  if (state !== 'running' && state !== 'degraded') throw new FleetlabError('SUP_ERR_HOST', `the board did not settle before it was saved: systemctl is-system-running says ${JSON.stringify(state)} ${r.stderr.trim()}`);
}

/** The env file that points the supervisor at a cloud (local mode off). */
export function cloudEnv(cloud: { url: string; provisioningKey: string }): string {
  const vars: Record<string, string> = { FLEETLAB_LOCAL_MODE: 'false', FLEETLAB_CLOUD_URL: cloud.url, FLEETLAB_PROVISIONING_KEY: cloud.provisioningKey, ...CLOUD_TIMINGS };
  return `${Object.entries(vars).map(([k, v]) => `${k}=${v}`).join('\n')}\n`;
}

/**
 * What runs killed with -9 (or whose workers were) left on this machine: the QEMU of a worker
 * that is gone with its run dir and overlay, the registries and build engines its deploys
 * started, a half-written saved board. Stopped and removed before a board of this run starts;
 * returns what was removed.
 */
export async function reapAbandonedRuns(): Promise<string[]> {
  return [...(await reapAbandonedBoards()), ...(await reapAbandonedPulls()), ...(await reapAbandonedSaves())];
}

/** One emulated board and the harness's handles on it; lives as long as the worker. */
class QemuLab {
  board: QemuBoard | undefined;
  ssh: SshDevice | undefined;
  /** A team's releases: built for arm64 and pulled by the board from a registry on this host. */
  images: PulledImages | undefined;
  probe: GpioProbe | undefined;
  /** The console's lines with their times, for a failed test's slice; read through QEMU restarts (its pty link stays put). */
  console: SerialConsole | undefined;
  runDir: string | undefined;
  /** Where `power.off` left the board: QEMU gone, the disk kept for `on`. */
  cut = false;
  /** LED transitions of earlier QEMU processes (a probe lives as long as its QMP connection). */
  #ledHistory: Array<{ at: number; value: 0 | 1 }> = [];
  /**
   * Whether this board starts each spec file from a saved ready state (virt), rather than
   * being reset over SSH. A card image always boots: its first boot is part of what it tests.
   */
  #restorable: boolean;
  /** The saved ready board of this image, once found in the cache or saved from the first boot. */
  #ready: ReadyState | undefined;
  /** The running board was started from the saved state and no spec file has had it yet. */
  #untouched = false;
  /** The loopback port `ssh` reaches the board on: the same across restores, new with a boot. */
  #sshPort: number | undefined;
  /** Set while QEMU is started again after a guest reset; `waitUp` waits for it. */
  #relaunching: Promise<void> | undefined;
  #relaunchError: string | undefined;
  /** Told of each new QEMU of the same board (a reset, a power cycle): what lives in a QEMU process is set up again. */
  readonly #relaunchWatchers = new Set<(board: QemuBoard) => Promise<void>>();

  constructor(
    readonly image: QemuImage,
    readonly machine: MachineKind,
  ) {
    this.#restorable = RESTORABLE_MACHINES.has(machine) && !image.bootDir;
    // A worker that exits without closing (killed by a timeout) must not leave QEMU running.
    process.once('exit', () => this.board?.process.kill('SIGKILL'));
  }

  get running(): boolean {
    return Boolean(this.board && !this.board.exitReason);
  }

  async boot(): Promise<void> {
    await this.shutdown();
    const reaped = await reapAbandonedRuns();
    if (reaped.length) process.stderr.write(`qemu target: removed what killed runs left: ${reaped.join(', ')}\n`);
    this.runDir = await mkdtemp(join(tmpdir(), 'fleetlab-hil-qemu-'));
    this.images = new PulledImages();
    if (this.#restorable) {
      this.#ready ??= await findReadyState(this.image, this.machine);
      if (this.#ready && (await this.#restore(await freePort(), await freePort()))) return;
    }
    // The console on a pty as well as in the log: read with arrival times, as a lab board's adapter is.
    const { board } = await bootBoard({ image: this.image, machine: this.machine, snapshot: true, runDir: this.runDir, readyTimeoutMs: BOOT_MS, consolePty: true });
    await this.#adopt(board);
    await this.afterBoot();
    if (this.image.bootDir) {
      // A card image is a lab's board: no test app images of the harness's, and a config.txt the firmware needs.
      await ensureBoardTestImages(this.ssh!, (line) => process.stderr.write(`qemu target: ${line}\n`));
      await this.ssh!.run(['sh', '-c', `mkdir -p /run/fleetlab && cp ${this.image.bootDir}/config.txt ${BOOT_CONFIG_AS_BOOTED}`]);
    }
  }

  /** A new QEMU as this lab's board: its console read, its reboots followed, SSH pointed at it. */
  async #adopt(board: QemuBoard): Promise<void> {
    this.board = board;
    // A board booted or restored is a new device: the line's history is the earlier one's. Its
    // drop when that QEMU ended, if a blink was still running, came after the new file's start
    // and showed as the first change of the new device's LED (a spec saw 0, 1, 0, 1).
    this.#ledHistory = [];
    // The pty link stays put across QEMU processes: one reader for the lab's life.
    this.console ??= board.info.serialPty ? new SerialConsole(board.info.serialPty, 115200) : undefined;
    this.#followResets(board);
    if (this.ssh && this.#sshPort === board.info.sshPort) return;
    await this.ssh?.close().catch(() => undefined);
    this.ssh = new SshDevice({ host: '127.0.0.1', port: board.info.sshPort, username: 'root', privateKey: await readFile(this.image.sshKey) });
    this.#sshPort = board.info.sshPort;
  }

  /**
   * The board started from the saved ready state on these ports, its supervisor answering.
   * False, with the reason on stderr, when that fails: the caller boots instead, and this lab
   * resets over SSH from then on.
   */
  async #restore(apiPort: number, sshPort: number): Promise<boolean> {
    try {
      const board = await restoreBoard({ state: this.#ready!, image: this.image, runDir: this.runDir!, apiPort, sshPort, consolePty: true });
      await this.#adopt(board);
      await this.afterBoot();
      await waitForPing(board.info.apiUrl, READY_MS, () => board.exitReason);
      this.#untouched = true;
      return true;
    } catch (err) {
      process.stderr.write(`qemu target: the board did not start from its saved state (${errorText(err)}); booting it instead\n`);
      this.#restorable = false;
      await this.#retireBoard();
      return false;
    }
  }

  /**
   * The booted board, reset and with its supervisor answering in local mode once systemd has
   * settled, saved as the image's ready state (its QEMU ends). False, with the reason on
   * stderr, when it cannot be: this lab then resets over SSH.
   */
  async #save(): Promise<boolean> {
    const board = this.board!;
    const ssh = this.ssh!;
    try {
      await resetOverSsh(ssh, this.bootDir);
      await startSupervisor(ssh, board);
      await waitSettled(ssh);
      await ssh.disconnect();
      this.#retireProbe();
      this.#ready = await saveReadyState({ board, image: this.image, readiness: READINESS });
      return true;
    } catch (err) {
      process.stderr.write(`qemu target: the board could not be saved (${errorText(err)}); resetting it over SSH between spec files\n`);
      this.#restorable = false;
      // A failed save may leave the machine paused (or gone): running again, or booted again.
      if (board.exitReason) await this.boot();
      else await board.qmp.execute('cont').catch(() => undefined);
      return false;
    }
  }

  /** Ends the current QEMU and removes its overlay; the lab's run dir, console and SSH stay. */
  async #retireBoard(): Promise<void> {
    this.#retireProbe();
    await this.ssh?.disconnect().catch(() => undefined);
    await this.board?.stop().catch(() => undefined);
    this.board = undefined;
  }

  /** Where config.txt and system-proxy/ are on this board's image. */
  get bootDir(): string {
    return this.image.bootDir ?? GUEST.bootDir;
  }

  /** QEMU again on the same disk and ports after `quit` (power restored). */
  async powerOn(): Promise<void> {
    if (!this.runDir || !this.board) throw new FleetlabError('SUP_ERR_HOST', 'power on: this board was never booted');
    this.board = await relaunch(this.board, this.image, this.runDir);
    this.#followResets(this.board);
    this.cut = false;
    await this.#relaunched(this.board);
    await this.waitUp();
  }

  /** Calls `watcher` with each new QEMU of this board from now on, until the returned function is called. */
  watchRelaunches(watcher: (board: QemuBoard) => Promise<void>): () => void {
    this.#relaunchWatchers.add(watcher);
    return () => void this.#relaunchWatchers.delete(watcher);
  }

  async #relaunched(board: QemuBoard): Promise<void> {
    for (const watcher of this.#relaunchWatchers) {
      await watcher(board).catch((err: unknown) => process.stderr.write(`qemu target: after the board's QEMU started again: ${errorText(err)}\n`));
    }
  }

  /**
   * The lab's power switch turned on. A board that is up stays up; one halting itself
   * (POST /v1/shutdown) keeps its QEMU until the guest has powered off, and is then off like
   * a cut one; a reset is powered on again by #followResets.
   */
  async switchOn(): Promise<void> {
    const board = this.board;
    if (!board) throw new FleetlabError('SUP_ERR_HOST', 'power on: this board was never booted');
    if (!board.exitReason) {
      const up = await waitForPing(board.info.apiUrl, BOOT_MS, () => board.exitReason).then(() => true, () => false);
      if (up) return this.afterBoot();
      if (!board.exitReason) throw new FleetlabError('SUP_ERR_HOST', `power on: the board neither answered nor powered off within ${BOOT_MS / 1000} s; serial console:\n${serialTail(board.info.serialLog)}`);
    }
    if (board.guestReset) return this.waitUp();
    await this.powerOn();
  }

  /**
   * A reboot, from any source (login1, the API's reboot, the watchdog), ends QEMU (it runs
   * with -no-reboot, see qemu/qemu-argv.ts); the board is then powered on again here, like
   * hardware coming out of reset.
   */
  #followResets(board: QemuBoard): void {
    void board.exited.then(() => {
      if (!board.guestReset || this.board !== board || !this.runDir) return;
      // The launcher's own power cycle (a dead USB network) is news; a reboot is not.
      if (board.powerAgainCause) process.stderr.write(`qemu target: board reset (${board.powerAgainCause}): starting QEMU again\n`);
      this.#relaunching = (async () => {
        this.#retireProbe();
        this.board = await relaunch(board, this.image, this.runDir!);
        this.#followResets(this.board);
        await this.#relaunched(this.board);
      })()
        .catch((err: unknown) => void (this.#relaunchError = `starting QEMU again after the guest's reset failed: ${String(err)}`))
        .finally(() => (this.#relaunching = undefined));
    });
  }

  /** After any boot: the API answers, SSH works, the clock is the harness's, the LED is watched. */
  async waitUp(): Promise<void> {
    const url = this.board!.info.apiUrl;
    // The same ports across a relaunch: only a board that is gone for good ends the wait.
    await waitForPing(url, BOOT_MS, () => {
      if (this.#relaunchError) return this.#relaunchError;
      const board = this.board!;
      if (!board.exitReason || board.guestReset) return undefined;
      return `${board.exitReason}; serial console:\n${serialTail(board.info.serialLog)}`;
    });
    await this.#relaunching;
    await this.afterBoot();
  }

  async afterBoot(): Promise<void> {
    await this.ssh!.waitReachable(READY_MS);
    // No RTC: the boot set the clock from the kernel command line; make it exact.
    await setGuestClock(this.ssh!);
    // The probe samples through resets and reboots; a new QEMU process needs a new one.
    if (this.probe?.sampling) return;
    this.#retireProbe();
    this.probe = new GpioProbe({ monitor: this.board!.qmp, machine: this.machine, line: LED_LINES[this.machine].offset });
    this.probe.startSampling(LED_SAMPLE_MS);
  }

  /**
   * Between spec files: the board as a fresh device. Resolves with whether its supervisor is
   * running (a board started from the ready state) or stopped (reset over SSH).
   */
  async reset(): Promise<'running' | 'stopped'> {
    if (this.#restorable && this.#untouched) {
      this.#untouched = false;
      return 'running';
    }
    if (this.#restorable && (this.#ready || (await this.#save()))) {
      const ports = this.board ? { api: Number(new URL(this.board.info.apiUrl).port), ssh: this.board.info.sshPort } : { api: await freePort(), ssh: await freePort() };
      await this.#retireBoard();
      if (await this.#restore(ports.api, ports.ssh)) {
        this.#untouched = false;
        return 'running';
      }
    }
    if (!this.running) await this.boot();
    await resetOverSsh(this.ssh!, this.bootDir);
    return 'stopped';
  }

  /**
   * The line's changes since `sinceMs`, across QEMU processes. Each probe records its first
   * sample, which is the level the line already had (off at power-on, or as a restored board
   * left it), not a change: kept, a spec file started from a saved board saw its LED go off.
   */
  ledTransitions(sinceMs: number): Array<{ at: number; value: 0 | 1 }> {
    let level: 0 | 1 = 0;
    const changes: Array<{ at: number; value: 0 | 1 }> = [];
    for (const t of [...this.#ledHistory, ...(this.probe?.transitions(0) ?? [])]) {
      if (t.value === level) continue;
      level = t.value;
      changes.push(t);
    }
    return changes.filter((t) => t.at >= sinceMs);
  }

  #retireProbe(): void {
    if (!this.probe) return;
    this.probe.stop();
    this.#ledHistory.push(...this.probe.transitions(0));
    this.probe = undefined;
    // No power, no level: the line drops with QEMU (the monitor cannot say so once it is gone).
    if (this.#ledHistory.at(-1)?.value === 1) this.#ledHistory.push({ at: Date.now(), value: 0 });
    this.#ledHistory = this.#ledHistory.slice(-10_000);
  }

  async quit(): Promise<void> {
    await this.board?.quit();
    this.#retireProbe();
    this.cut = true;
  }

  async shutdown(): Promise<void> {
    this.#retireProbe();
    await this.console?.close();
    this.console = undefined;
    await this.images?.close().catch(() => undefined);
    this.images = undefined;
    await this.ssh?.close().catch(() => undefined);
    await this.board?.stop().catch(() => undefined);
    if (this.runDir) await rm(this.runDir, { recursive: true, force: true });
    this.board = undefined;
    this.ssh = undefined;
  }
}

class QemuUnderTest implements DeviceUnderTest {
  readonly target = QEMU_TARGET;
  readonly capabilities: ReadonlySet<Capability> = new Set(QEMU_CAPABILITIES);
  readonly facts: TargetFacts;
  readonly api: ApiProtocol;
  readonly exec;
  readonly files;
  readonly journal;
  readonly led: LedProtocol;
  readonly power: PowerProtocol;
  readonly network: NetworkProtocol;
  readonly images: ImagesProtocol;
  readonly ports: QemuPorts;
  readonly paths: DevicePaths = { dataDir: GUEST.dataDir, lockRoot: GUEST.lockRoot };
  /** This file's API connections, ended with it: the next file may start from a restored snapshot. */
  readonly #connections = new Agent();
  /** The board's engine socket on this machine, forwarded over SSH the first time `ports` asks; ended with the file. */
  #engine: Promise<{ path: string; close(): Promise<void> }> | undefined;
  readonly #unwatchRelaunches: () => void;
  #closed = false;

  constructor(
    private readonly lab: QemuLab,
    identity: { uuid: string; apiKey: string },
    private readonly link: PartitionableLink | undefined,
  ) {
    const ssh = lab.ssh!;
    // Measured here: a container starts in ~30-60 s on raspi3b under TCG (1-2 s on the sim).
    this.facts = { engine: 'docker', imagesArePulled: false, timeScale: lab.machine === 'raspi3b' ? 8 : 4 };
    this.api = httpApi({
      url: lab.board!.info.apiUrl,
      apiKey: identity.apiKey,
      uuid: identity.uuid,
      vendor: 'platform',
      lockRoot: GUEST.lockRoot,
      hostPaths: { hostname: '/etc/hostname', proxyConfigDir: `${lab.bootDir}/system-proxy`, bootConfig: `${lab.bootDir}/config.txt` },
    }, { dispatcher: this.#connections });
    this.exec = ssh.exec;
    this.journal = ssh.journal;
    this.images = lab.images!.over(ssh);
    this.files = { ...ssh.files, volumePath: (appId: number, volume: string) => dockerVolumePath(ssh, identity.uuid, appId, volume) };
    // A board that is off has no QEMU to forward through.
    this.ports = new QemuPorts({ uuid: identity.uuid, engineSocket: () => this.#engineSocket(ssh), board: () => (lab.cut ? undefined : lab.board) });
    // A URL a spec holds leads to the board again after a reboot or power cycle, each a new QEMU.
    this.#unwatchRelaunches = lab.watchRelaunches((board) => this.ports.follow(board));
    const line = LED_LINES[lab.machine];
    this.led = {
      line: `${line.chip} pin ${line.offset}, read from the emulated ${lab.machine === 'raspi3b' ? 'BCM2835 GPLEV0' : 'PL061 data'} register through the QEMU monitor every ${LED_SAMPLE_MS} ms`,
      level: async () => (lab.cut || !lab.probe ? 0 : lab.probe.level()),
      transitions: async (sinceMs = 0) => lab.ledTransitions(sinceMs),
    };
    const url = this.api.identity.url;
    this.power = {
      reboot: async () => {
        const r = await ssh.run(LOGIN1, { timeoutMs: 30_000 }).catch((err: unknown) => ({ exitCode: 0, stdout: '', stderr: String(err) }));
        if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `login1 Reboot failed: ${r.stderr.trim()}`);
        await waitApiDown(url, DOWN_MS);
        await lab.waitUp();
      },
      // Power off and on: a new QEMU process (an in-place system_reset leaves raspi3b's
      // usb-net dead), the disk as it was.
      cycle: async () => {
        await lab.quit();
        await lab.powerOn();
      },
      off: async () => {
        await lab.quit();
      },
      on: () => lab.switchOn(),
    };
    const requireLink = () => {
      if (!link) throw new FleetlabError('SUP_ERR_BAD_REQUEST', 'network: this device was started without a cloud (test.use({ withCloud: true }))');
      return link;
    };
    this.network = {
      partition: async () => requireLink().partition(),
      heal: async () => requireLink().heal(),
    };
  }

  async #engineSocket(ssh: SshDevice): Promise<string> {
    this.#engine ??= ssh.forwardUnixSocket('/var/run/docker.sock');
    try {
      return (await this.#engine).path;
    } catch (err) {
      this.#engine = undefined; // the next ask tries again
      throw err;
    }
  }

  supervisorLog(): Promise<string> {
    return this.lab.ssh ? unitLog(this.lab.ssh, GUEST.unit) : Promise.resolve('(no SSH to the board)');
  }

  /** From the test's start (less a margin) as the console said it; the log's tail when it said nothing since. */
  async consoleLog(sinceMs?: number): Promise<string> {
    if (!this.lab.board) return '(no board)';
    const console_ = this.lab.console;
    if (console_ && sinceMs !== undefined && console_.lines(sinceMs).length > 0) return console_.slice(sinceMs);
    return serialTail(this.lab.board.info.serialLog, CONSOLE_LINES);
  }

  /** The board stays up for the worker's next spec file; only this file's cloud link goes. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#unwatchRelaunches();
    await this.ports.close();
    await this.#engine?.then((e) => e.close()).catch(() => undefined);
    await this.#connections.destroy().catch(() => undefined);
    await this.link?.close().catch(() => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/**
 * A reset board (supervisor stopped, nothing of a device left) put into a bundle's state, its
 * supervisor set to run as the captured one did; `startSupervisor` then starts it from there.
 */
async function replayOnto(ssh: SshDevice, bundle: string, bootDir: string): Promise<void> {
  const engine = await ssh.forwardUnixSocket('/var/run/docker.sock');
  try {
    const replayed = await prepareReplayOnBoard({
      bundle,
      board: {
        engineSocket: engine.path,
        files: ssh.files,
        runRaw: (argv, o) => ssh.runRaw(argv, o),
        dataDir: GUEST.dataDir,
        lockRoot: GUEST.lockRoot,
        proxyConfigDir: `${bootDir}/system-proxy`,
        setHostname: async (name) => {
          const r = await ssh.run(['hostnamectl', 'set-hostname', name]);
          if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `hostnamectl set-hostname ${name} on the board: ${r.stderr.trim()}`);
        },
        port: GUEST.apiPort,
        arch: 'aarch64',
      },
      log: (line) => process.stderr.write(`qemu target: ${line}\n`),
    });
    await ssh.files.write(GUEST.envFile, replayEnv(replayed));
    // The board has no RTC: its clock is what the harness sets, here off as the captured one was.
    if (replayed.clockOffsetMs) await ssh.run(['date', '-u', '-s', `@${((Date.now() + replayed.clockOffsetMs) / 1000).toFixed(3)}`]);
  } finally {
    await engine.close();
  }
}

/** The env file for a replayed device: its mode, vendor and device type as captured. */
export function replayEnv(o: { localMode: boolean; vendor: string; deviceType: string }): string {
  return `FLEETLAB_LOCAL_MODE=${o.localMode}\nFLEETLAB_VENDOR=${o.vendor}\nFLEETLAB_DEVICE_TYPE=${o.deviceType}\n`;
}

/** The image: the one the global setup built, else built (or found cached) now. */
async function resolveImage(): Promise<QemuImage> {
  const card = process.env[FLASH_IMAGE_VARIABLE];
  if (card) return flashImageForQemu({ image: card, progress: (line) => process.stderr.write(`qemu target: ${line}\n`) });
  const dir = process.env.FLEETLAB_QEMU_IMAGE_DIR;
  if (dir) return imageFromDir(dir);
  const repoRoot = fleetlabRoot(import.meta.url);
  const { image } = await buildImage({ repoRoot, progress: (e) => process.stderr.write(`qemu image ${formatBuildProgress(e)}\n`) });
  return image;
}

/**
 * A driver instance per worker (the registry constructs one per load): it holds that worker's
 * board between spec files.
 */
export function createQemuTarget(): TargetDriver<TargetStartOptions> {
  let lab: QemuLab | undefined;
  return {
    name: QEMU_TARGET,
    provides: QEMU_CAPABILITIES,
    startsFromBundle: true,
    async start(options: TargetStartOptions = {}) {
      lab ??= new QemuLab(await resolveImage(), machineFromEnv());
      if (!lab.running) await lab.boot();
      const supervisor = await lab.reset();
      const ssh = lab.ssh!;
      // A cloud link or a captured bundle is this file's own device: one that starts from them.
      const ownStart = Boolean(options.cloud || options.bundle);
      let link: PartitionableLink | undefined;
      try {
        if (ownStart && supervisor === 'running') await resetOverSsh(ssh, lab.bootDir);
        if (options.cloud) {
          const cloudUrl = new URL(options.cloud.url);
          link = await startPartitionableLink({ host: cloudUrl.hostname, port: Number(cloudUrl.port) });
          const guestUrl = new URL(link.url);
          guestUrl.hostname = HOST_FROM_GUEST;
          await ssh.files.write(GUEST.envFile, cloudEnv({ url: guestUrl.origin, provisioningKey: options.cloud.provisioningKey }));
        }
        if (options.bundle) await replayOnto(ssh, options.bundle, lab.bootDir);
        if (ownStart || supervisor === 'stopped') await startSupervisor(ssh, lab.board!);
        const stored = await storedIdentity(ssh, GUEST.dataDir);
        return new QemuUnderTest(lab, { uuid: stored.uuid, apiKey: stored.deviceKey }, link);
      } catch (err) {
        await link?.close().catch(() => undefined);
        throw err;
      }
    },
    async dispose() {
      await lab?.shutdown();
      lab = undefined;
    },
  };
}
