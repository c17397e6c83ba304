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
import { FleetlabError } from '../../src/errors.js';
import { fleetlabRoot } from '../../src/package-root.js';
import { FLASH_IMAGE_VARIABLE } from '../../device-image/card-plan.js';
import { flashImageForQemu } from '../../qemu/flash-boot.js';
import { buildImage, formatBuildProgress, imageFromDir, type QemuImage } from '../../device-image/build.js';
import { GUEST } from '../../device-image/recipe.js';
import type { MachineKind } from '../../qemu/qemu-argv.js';
import { startPartitionableLink, type PartitionableLink } from '../../sim/network/partitionable-link.js';
import { storedIdentity } from './drivers/device-facts.js';
import type { TargetDriver, TargetStartOptions } from './target-driver.js';
import { QemuLab } from './qemu/lab.js';
import { replayOnto } from './qemu/replay-onto.js';
import { resetOverSsh, startSupervisor } from './qemu/reset-ssh.js';
import { QEMU_CAPABILITIES, QEMU_TARGET, QemuUnderTest } from './qemu/under-test.js';

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

/** The env file that points the supervisor at a cloud (local mode off). */
export function cloudEnv(cloud: { url: string; provisioningKey: string }): string {
  const vars: Record<string, string> = { FLEETLAB_LOCAL_MODE: 'false', FLEETLAB_CLOUD_URL: cloud.url, FLEETLAB_PROVISIONING_KEY: cloud.provisioningKey, ...CLOUD_TIMINGS };
  return `${Object.entries(vars).map(([k, v]) => `${k}=${v}`).join('\n')}\n`;
}

/** The env file's line for the upstream supervisor version the board's supervisor answers as. */
export function versionEnv(version: string): string {
  return `FLEETLAB_SUPERVISOR_VERSION=${version}\n`;
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
      // A cloud link, a captured bundle or another supervisor version is this file's own device: one that starts from them.
      const ownStart = Boolean(options.cloud || options.bundle || options.supervisorVersion);
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
        // The env file the unit reads at every start (reset writes it anew): the image stays as built.
        if (options.supervisorVersion) await ssh.files.write(GUEST.envFile, `${(await ssh.files.read(GUEST.envFile)).toString('utf8')}${versionEnv(options.supervisorVersion)}`);
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
