/**
 * The `container` target: the simulated device (`fleetlab sim device`: the supervisor with
 * its simulated D-Bus, GPIO and journal peers) inside a container started with testcontainers
 * from the locally built image (./container-image.ts). The host's docker socket is
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
import { accessSync, appendFileSync, constants, lstatSync, readFileSync, realpathSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import type { StartedTestContainer } from 'testcontainers';
import { LED_TRANSITIONS_FILE, simDeviceFiles } from '../../sim/device.js';
import { LABEL } from '../../src/protocol/engine-labels.js';
import { httpApi } from '../lib/http.js';
import { buildDeviceImage } from '../../device-image/container-sim/build.js';
import { removeTree } from './engine-files.js';
import { FleetlabError } from '../../src/errors.js';
import { userTmpDir } from '../../src/user-tmp.js';
import { filesOverCommands } from '../../device-access/files-over-commands.js';
import { CONTAINER_DIR_PREFIX, TARGET_LABEL, TARGET_NAME } from '../lib/target-labels.js';
import {
  dockerExec,
  stopDeviceContainers,
  waitReadyLine,
  type ReadyLine,
} from './container-docker.js';
import { journalEntries } from '../../device-access/journal-json.js';
import { removeDeviceLeftovers, storedUuid } from '../../sim/device-leftovers.js';
import { ensureTestImages } from '../../sim/images/test-images.js';
import type { ApiProtocol, Capability, CommandProtocol, DeviceUnderTest, FilesProtocol, ImagesProtocol, JournalProtocol, DevicePaths, LedProtocol, LedTransition, PortsProtocol, PowerProtocol, TargetFacts } from '../../device-access/protocols.js';
import type { TargetDriver } from './target-driver.js';
import { enginePorts } from './engine-ports.js';
import { devicePublishAddress } from '../../sim/publish-address.js';
import { freePort } from '../../src/free-port.js';
import { hostShell } from './host-shell.js';
import { readBundle } from '../capture/bundle.js';
import { capturedDevice, prepareReplayedDevice } from '../capture/replay.js';

export interface ContainerTargetOptions {
  /** Image to run; default `FLEETLAB_DEVICE_IMAGE`, else built (cached) from this checkout. */
  image?: string;
  dockerSocket?: string;
  vendor?: string;
  /** Start the device in the state this bundle captured (`fleetlab replay --engine docker` in the container). */
  bundle?: string;
}

const READY_MS = 90_000;
const STOP_GRACE_MS = 20_000;
const LED_OFFSET = 17;
const LED_GPIO = 512 + LED_OFFSET;
const LOGIN1 = { dest: 'org.freedesktop.login1', path: '/org/freedesktop/login1', method: 'org.freedesktop.login1.Manager.Reboot' };
export const CONTAINER_CAPABILITIES: readonly Capability[] = ['api', 'exec', 'led', 'power.reboot', 'power.cycle', 'power.cut', 'journal', 'files', 'files.volumes', 'images', 'ports'];


function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** testcontainers reads these when it first talks to the engine: offline, no Ryuk. */
function offlineTestcontainers(): void {
  process.env.TESTCONTAINERS_RYUK_DISABLED ??= 'true';
  process.env.TESTCONTAINERS_HOST_OVERRIDE ??= 'localhost';
}

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

function canWrite(path: string): boolean {
  try {
    accessSync(path, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * testcontainers takes a file lock before its first container (common/file-lock.js: proper-lockfile
 * on `<tmpdir>/testcontainers-node.lock`), a fixed name: one that an earlier run as another user
 * (root) left in a shared /tmp cannot be written, and its stale `.lock` directory cannot be taken
 * over, so the run would fail or wait forever. Its only setting for the place is TMPDIR, which
 * `fleetlab test` points at the user's own directory; started any other way, this says so first.
 */
function requireTestcontainersLock(): void {
  const dir = realpathSync(tmpdir());
  const uid = process.getuid?.() ?? 0;
  for (const name of ['testcontainers-node.lock', 'testcontainers-node.lock.lock']) {
    const path = join(dir, name);
    let st;
    try {
      st = lstatSync(path);
    } catch {
      continue;
    }
    // proper-lockfile refreshes a held lock's mtime every 5 s: an older one of another user is left over.
    const stuck = name.endsWith('.lock.lock') ? st.uid !== uid && Date.now() - st.mtimeMs > 10_000 : !canWrite(path);
    if (stuck) {
      throw new FleetlabError(
        'HIL_ERR_PERMISSION',
        `testcontainers' lock ${path} belongs to uid ${st.uid}, left by an earlier run as that user, and uid ${uid} cannot take it: run through npx fleetlab test (it gives each user a temporary directory of its own), set TMPDIR to a directory of yours, or remove it (sudo rm -rf ${join(dir, 'testcontainers-node.lock')}*)`,
      );
    }
  }
}

/** The LED transitions in these files (each line a JSON transition), oldest first. */
function readLed(...files: string[]): LedTransition[] {
  const out: LedTransition[] = [];
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n')) {
      if (!line) continue;
      try {
        const t = JSON.parse(line) as { value: number; at: number };
        out.push({ at: t.at, value: t.value ? 1 : 0 });
      } catch {
        // a line being appended right now
      }
    }
  }
  return out.sort((a, b) => a.at - b.at);
}

class ContainerUnderTest implements DeviceUnderTest {
  readonly target = TARGET_NAME;
  readonly capabilities: ReadonlySet<Capability> = new Set(CONTAINER_CAPABILITIES);
  readonly facts: TargetFacts = { engine: 'docker', imagesArePulled: false };
  readonly api: ApiProtocol;
  readonly exec: CommandProtocol;
  readonly led: LedProtocol;
  readonly power: PowerProtocol;
  readonly journal: JournalProtocol;
  readonly files: FilesProtocol;
  readonly images: ImagesProtocol;
  readonly ports: PortsProtocol;
  readonly paths: DevicePaths;
  readonly #supervisorLogPath: string;
  readonly #uuid: string;
  #readyCount: number;
  #closed = false;

  constructor(
    private readonly docker: Docker,
    private readonly container: StartedTestContainer,
    private readonly dockerSocket: string,
    private readonly hostDir: string,
    ready: ReadyLine & { count: number },
    url: string,
    vendor: string,
  ) {
    this.#readyCount = ready.count;
    // The device's supervisor drives the host's dockerd through the mounted socket.
    this.images = { prepare: async () => ({ engineSocket: dockerSocket }) };
    const dataDir = ready.dataDir;
    const uuid = ready.uuid;
    const id = container.getId();
    // The host's dockerd publishes the apps' ports on the host, at the device's own address;
    // host-network services listen in this container's namespace, at its bridge address.
    this.ports = enginePorts(dockerSocket, uuid);
    this.api = httpApi({
      url,
      apiKey: ready.apiKey,
      uuid,
      vendor,
      lockRoot: join(dataDir, 'locks'),
      hostPaths: { hostname: simDeviceFiles(dataDir).hostnameFile, proxyConfigDir: simDeviceFiles(dataDir).proxyConfigDir, bootConfig: join(dataDir, 'boot', 'config.txt') },
    });
    // The device's engine is the host's dockerd: its CLI runs here (the device image has none).
    this.paths = { dataDir: join(dataDir, 'supervisor'), lockRoot: join(dataDir, 'locks'), dockerHost: `unix://${dockerSocket}`, engineShell: hostShell };
    const run = (argv: readonly string[], opts: { input?: string | Buffer; timeoutMs?: number } = {}) => dockerExec(dockerSocket, id, argv, opts);
    this.exec = {
      run: async (argv, opts) => {
        const r = await run(argv, opts);
        return { exitCode: r.exitCode, stdout: r.stdout.toString('utf8'), stderr: r.stderr.toString('utf8') };
      },
    };

    // The sim's file (root's, in the container) and the observer's own record of power losses:
    // the observer sees the line drop, which the dead sim cannot write.
    const ledFiles = [join(dataDir, LED_TRANSITIONS_FILE), join(hostDir, 'led-power-loss.jsonl')] as const;
    this.led = {
      line: `gpio ${LED_GPIO} (pinctrl-bcm2835 pin ${LED_OFFSET}, simulated sysfs inside the device container)`,
      level: async () => readLed(...ledFiles).at(-1)?.value ?? 0,
      transitions: async (sinceMs = 0) => readLed(...ledFiles).filter((t) => t.at >= sinceMs),
    };
    const ledLosesPower = () => {
      if (readLed(...ledFiles).at(-1)?.value === 1) appendFileSync(ledFiles[1], `${JSON.stringify({ value: 0, at: Date.now() })}\n`);
    };

    const cut = async () => {
      // SIGKILL to everything in the container: no shutdown, state on disk kept.
      await docker.getContainer(id).kill().catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 409) throw err; // 409: not running (already off)
      });
      await docker.getContainer(id).wait().catch(() => undefined);
      await stopDeviceContainers(docker, uuid);
      ledLosesPower();
    };
    const powerOn = async () => {
      if ((await docker.getContainer(id).inspect()).State.Running) {
        await this.api.waitReady(READY_MS); // on() while on: nothing to do
        return;
      }
      // What does not survive a power loss on a board: tmpfs (the lock root) and sysfs (the GPIO tree).
      await removeTree(join(dataDir, 'locks'), dockerSocket);
      await removeTree(join(dataDir, 'gpio'), dockerSocket);
      await docker.getContainer(id).start();
      this.#readyCount = (await waitReadyLine(docker, id, this.#readyCount, READY_MS)).count;
      await this.api.waitReady(READY_MS);
    };
    this.power = {
      reboot: async () => {
        const r = await run(['dbus-send', `--bus=unix:path=${join(dataDir, 'dbus', 'system_bus_socket')}`, '--print-reply', `--dest=${LOGIN1.dest}`, LOGIN1.path, LOGIN1.method, 'boolean:false']);
        if (r.exitCode !== 0) throw new Error(`login1 Reboot failed: ${r.stderr.toString('utf8').trim()}`);
        // The supervisor process goes away and comes back in the same container; see it go first.
        await this.#waitApiDown(30_000);
        await this.api.waitReady(READY_MS);
      },
      cycle: async () => {
        await cut();
        await powerOn();
      },
      off: cut,
      on: powerOn,
    };

    const journalDir = join(dataDir, 'journal');
    this.journal = {
      entries: async (options = {}) => {
        const args = ['journalctl', '--directory', journalDir, '--no-pager', '-o', 'json', '--lines', String(options.lines ?? 500)];
        if (options.unit) args.push('--unit', options.unit);
        const r = await run(args);
        return journalEntries(r.stdout.toString('utf8'), r.exitCode);
      },
    };

    this.files = {
      ...filesOverCommands(run, 'the device'),
      // dockerd's volume directory is bind-mounted at its own path, so Mountpoint is a device path too.
      volumePath: async (appId, volume) => {
        const { Volumes } = await docker.listVolumes({ filters: { label: [`${LABEL.device}=${uuid}`, `${LABEL.appId}=${appId}`, `${LABEL.volume}=${volume}`] } });
        return Volumes?.[0]?.Mountpoint;
      },
    };
    this.#supervisorLogPath = join(dataDir, 'supervisor.log');
    this.#uuid = uuid;
  }

  async #waitApiDown(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      try {
        const res = await fetch(`${this.api.identity.url}/ping`, { signal: AbortSignal.timeout(1000) });
        await res.body?.cancel();
        if (!res.ok) return;
      } catch {
        return;
      }
      await sleep(100);
    }
    throw new Error(`the device API kept answering for ${timeoutMs / 1000} s after login1 Reboot`);
  }

  supervisorLog(): Promise<string> {
    return readFile(this.#supervisorLogPath, 'utf8').catch((err) => `(no supervisor log: ${err})`);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // SIGTERM to the sim: it stops the supervisor and removes the containers and networks it made.
    await this.container.stop({ timeout: STOP_GRACE_MS, remove: true }).catch(() => undefined);
    await this.docker.getContainer(this.container.getId()).remove({ force: true }).catch(() => undefined);
    await removeDeviceLeftovers(this.docker, this.#uuid).catch(() => undefined);
    // The device container wrote its data as root: a user other than root removes it through the engine.
    await removeTree(this.hostDir, this.dockerSocket);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Whether the engine confines containers with AppArmor (docker-default denies mount). */
async function usesAppArmor(docker: Docker): Promise<boolean> {
  const info = (await docker.info()) as { SecurityOptions?: string[] };
  return (info.SecurityOptions ?? []).some((o) => o.includes('apparmor'));
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
        .withStartupTimeout(READY_MS)
        .start();
      const ready = await waitReadyLine(docker, started.getId(), 0, READY_MS);
      const dut = new ContainerUnderTest(docker, started, dockerSocket, hostDir, ready, `http://127.0.0.1:${hostPort}`, vendor);
      await dut.api.waitReady(READY_MS);
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
