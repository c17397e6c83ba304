/**
 * The `container` target: the simulated device (`fleetlab sim device`: the supervisor with
 * its simulated D-Bus, GPIO and journal peers) inside a container started with testcontainers
 * from the locally built image (device-image/container-sim/). The host's docker socket is
 * bind-mounted, so the app containers the supervisor starts run on the host's dockerd.
 *
 * The device's networks are the container's, as a board's are the board's: the supervisor
 * connects the container to its supervisor network, so a labelled service on a bridge or
 * user-defined network reaches the API at the container's address there, and services with
 * `network_mode: host` share the container's namespace (`container:<it>`), where the API is on
 * loopback and their ports are the device's, reached at the container's bridge address
 * (`--device-container`, sim/device.ts).
 *
 * Paths the supervisor hands to that dockerd (the lock root it bind-mounts into services)
 * are resolved on the host, so the device's data dir is a host directory bind-mounted at the
 * identical path; so is dockerd's volume directory, for `files.volumePath`. "The device" is
 * the container: `exec`, `files` and `journal` run inside it.
 *
 * Privileges: CAP_SYS_ADMIN only (not privileged mode). The GPIO sim runs the supervisor in a
 * private mount namespace (`unshare --mount`) with a sysfs-shaped tree bind-mounted over
 * /sys/class; both need CAP_SYS_ADMIN, and Docker's default seccomp profile allows unshare
 * and mount once that capability is granted. Where AppArmor confines containers, its
 * docker-default profile denies mount, so the container is then started unconfined.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, stat } from 'node:fs/promises';
import { join } from 'node:path';
import Docker from 'dockerode';
import type { StartedTestContainer } from 'testcontainers';
import { buildDeviceImage } from '../../device-image/container-sim/build.js';
import { removeTree } from './engine-files.js';
import { userTmpDir } from '../../src/user-tmp.js';
import { CONTAINER_DIR_PREFIX, TARGET_LABEL, TARGET_NAME } from '../lib/target-labels.js';
import { waitReadyLine } from './container-docker.js';
import { removeDeviceLeftovers, storedUuid } from '../../sim/device-leftovers.js';
import { ensureTestImages } from '../../sim/images/test-images.js';
import type { TargetDriver } from './target-driver.js';
import { devicePublishAddress } from '../../sim/publish-address.js';
import { freePort } from '../../src/free-port.js';
import { readBundle } from '../capture/bundle.js';
import { capturedDevice, prepareReplayedDevice } from '../capture/replay.js';
import { CONTAINER_TIMEOUTS, deadlines } from './timeouts.js';
import { offlineTestcontainers, requireTestcontainersLock, usesAppArmor } from './container/testcontainers.js';
import { CONTAINER_CAPABILITIES, ContainerUnderTest } from './container/under-test.js';

export interface ContainerTargetOptions {
  /** The upstream supervisor version the device answers as (`fleetlab sim device --supervisor-version` inside). */
  supervisorVersion?: string;
  /** Image to run; default `FLEETLAB_DEVICE_IMAGE`, else built (cached) from this checkout. */
  image?: string;
  dockerSocket?: string;
  vendor?: string;
  /** Start the device in the state this bundle captured (`fleetlab replay --engine docker` in the container). */
  bundle?: string;
}

const TIMEOUTS = deadlines(CONTAINER_TIMEOUTS);

async function resolveImage(options: ContainerTargetOptions, dockerSocket: string): Promise<string> {
  const given = options.image ?? process.env.FLEETLAB_DEVICE_IMAGE;
  if (given) return given;
  // Normally the global setup built it and set FLEETLAB_DEVICE_IMAGE; a cached rebuild only hashes inputs.
  // No repoRoot: the builder finds its own fleetlab, a checkout or the installed package
  // (a lockfile above an installed one is the team's, not fleetlab's).
  const image = await buildDeviceImage({
    dockerSocket,
    prune: false,
    progress: (e) => process.stderr.write(`container target image [${(e.elapsedMs / 1000).toFixed(1)} s] ${e.stage}: ${e.detail}\n`),
  });
  process.env.FLEETLAB_DEVICE_IMAGE = image.ref;
  return image.ref;
}

export const containerTarget: TargetDriver<ContainerTargetOptions> = {
  name: TARGET_NAME,
  provides: CONTAINER_CAPABILITIES,
  startsFromBundle: true,
  async start(options: ContainerTargetOptions = {}) {
    offlineTestcontainers();
    requireTestcontainersLock();
    const dockerSocket = options.dockerSocket ?? process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
    // A bundle that cannot be replayed is refused here, before a container starts.
    if (options.bundle) capturedDevice(await readBundle(options.bundle), options.bundle);
    let vendor = options.vendor ?? 'platform';
    const docker = new Docker({ socketPath: dockerSocket });
    const image = await resolveImage(options, dockerSocket);
    await ensureTestImages(dockerSocket);
    const { GenericContainer, Wait } = await import('testcontainers');
    const volumeRoot = join(((await docker.info()) as { DockerRootDir?: string }).DockerRootDir ?? '/var/lib/docker', 'volumes');
    const apparmor = await usesAppArmor(docker);
    // Root's alone (/var/lib/docker is 0710): a user in the docker group gets EACCES, not absence.
    const volumeRootThere = await stat(volumeRoot).then(() => true, (err: NodeJS.ErrnoException) => err.code === 'EACCES');

    /** Publishes on loopback only (testcontainers binds all interfaces) and adds the security options. */
    class DeviceContainer extends GenericContainer {
      protected override async beforeContainerCreated(): Promise<void> {
        for (const bindings of Object.values(this.hostConfig.PortBindings ?? {}) as Array<Array<{ HostIp?: string }>>) {
          for (const b of bindings) b.HostIp = '127.0.0.1';
        }
        if (apparmor) this.hostConfig.SecurityOpt = [...(this.hostConfig.SecurityOpt ?? []), 'apparmor=unconfined'];
      }
    }

    // The user's own directory: a run as another user may not enter it or take its name.
    const hostDir = await mkdtemp(join(userTmpDir(), CONTAINER_DIR_PREFIX));
    const dataDir = join(hostDir, 'device');
    await mkdir(dataDir, { recursive: true });
    let started: StartedTestContainer | undefined;
    try {
      // The host's port inside too, so the device API has one address, whichever side calls it.
      const hostPort = await freePort();
      // Named before it exists: the supervisor inside is told it, to join its networks from there.
      const name = `fleetlab-device-${randomBytes(6).toString('hex')}`;
      let localMode = true;
      let deviceType: string[] = [];
      let clock: string[] = [];
      if (options.bundle) {
        // Replayed: the host puts the device's engine objects, lock files and store in place
        // (the dockerd is the host's, the data dir a bind mount); the sim boots from them.
        const replayed = await prepareReplayedDevice({ bundle: options.bundle, dataDir, port: hostPort, dockerSocket });
        ({ localMode, vendor } = replayed);
        deviceType = ['--device-type', replayed.deviceType];
        if (replayed.clockOffsetMs) clock = ['--clock-offset-ms', String(replayed.clockOffsetMs)];
      }
      started = await new DeviceContainer(image)
        .withCommand([
          'sim', 'device',
          '--engine', 'docker',
          '--docker-socket', '/var/run/docker.sock',
          '--port', String(hostPort),
          '--listen-address', '0.0.0.0',
          // An address on the host, where the host's dockerd binds the apps' ports: the device's own (sim/publish-address.ts).
          '--publish-address', devicePublishAddress(),
          ...(localMode ? ['--local-mode'] : []),
          '--vendor', vendor,
          ...deviceType,
          ...clock,
          ...(options.supervisorVersion ? ['--supervisor-version', options.supervisorVersion] : []),
          '--data-dir', dataDir,
          '--device-container', name,
        ])
        .withName(name)
        // A fixed host port: dockerd picks a new ephemeral one at every container start, and
        // the device keeps its address across power cycles.
        .withExposedPorts({ container: hostPort, host: hostPort })
        .withBindMounts([
          { source: dockerSocket, target: '/var/run/docker.sock' },
          { source: hostDir, target: hostDir },
          ...(volumeRootThere ? [{ source: volumeRoot, target: volumeRoot }] : []),
        ])
        .withAddedCapabilities('SYS_ADMIN')
        .withLabels({ [TARGET_LABEL.target]: TARGET_NAME, [TARGET_LABEL.owner]: String(process.pid), [TARGET_LABEL.dir]: hostDir })
        .withWaitStrategy(Wait.forLogMessage(/"event":"ready"/))
        .withStartupTimeout(TIMEOUTS.ready)
        .start();
      const ready = await waitReadyLine(docker, started.getId(), 0, TIMEOUTS.ready);
      const dut = new ContainerUnderTest(docker, started, dockerSocket, hostDir, ready, `http://127.0.0.1:${hostPort}`, vendor);
      await dut.api.waitReady(TIMEOUTS.ready);
      return dut;
    } catch (err) {
      if (started) await started.stop({ timeout: 0, remove: true }).catch(() => undefined);
      const uuid = storedUuid(dataDir);
      if (uuid) await removeDeviceLeftovers(docker, uuid).catch(() => undefined);
      await removeTree(hostDir, dockerSocket).catch(() => undefined);
      throw err;
    }
  },
};
