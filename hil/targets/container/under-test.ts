/** One device container and the protocols the harness reaches it through. */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type Docker from 'dockerode';
import type { StartedTestContainer } from 'testcontainers';
import { LED_TRANSITIONS_FILE, simDeviceFiles } from '../../../sim/device.js';
import { removeDeviceLeftovers } from '../../../sim/device-leftovers.js';
import { filesOverCommands } from '../../../device-access/files-over-commands.js';
import { FleetlabError } from '../../../src/errors.js';
import type { ApiProtocol, Capability, CommandProtocol, DeviceUnderTest, FilesProtocol, ImagesProtocol, JournalProtocol, DevicePaths, LedProtocol, ObserveProtocol, PortsProtocol, PowerProtocol, SupervisorProtocol, TargetFacts } from '../../../device-access/protocols.js';
import { httpApi } from '../../lib/http.js';
import { TARGET_NAME } from '../../lib/target-labels.js';
import { dockerExec, type ReadyLine } from '../container-docker.js';
import { removeTree } from '../engine-files.js';
import { enginePorts } from '../engine-ports.js';
import { hostShell } from '../host-shell.js';
import { waitApiDown } from '../drivers/api-down.js';
import { supervisorKill } from '../drivers/supervisor-kill.js';
import { engineVolumePath } from '../drivers/device-facts.js';
import { journalInDirectory } from '../drivers/journal-directory.js';
import { hostObserve } from '../drivers/observe-host.js';
import { hostDescendant } from '../drivers/supervisor-usage.js';
import { ledFromFiles } from '../drivers/led-file.js';
import { containerPower } from '../drivers/power-container.js';
import { login1DbusSend, login1Reboot } from '../drivers/reboot-login1.js';
import { CONTAINER_TIMEOUTS, deadlines } from '../timeouts.js';

/**
 * SIGKILL to the supervisor process in the device container, found by its command line (the
 * image has no pkill); the bracket keeps the pattern from matching this shell's own line.
 */
const KILL_SUPERVISOR = `found=; for p in /proc/[0-9]*; do if tr '\\0' ' ' < "$p/cmdline" 2>/dev/null | grep -q 'main.js supervis[o]r'; then kill -KILL "\${p#/proc/}" && found=1; fi; done; [ -n "$found" ]`;

export const CONTAINER_CAPABILITIES: readonly Capability[] = ['api', 'exec', 'led', 'power.reboot', 'power.cycle', 'power.cut', 'supervisor.kill', 'journal', 'files', 'files.volumes', 'images', 'ports'];
const LED_OFFSET = 17;
const LED_GPIO = 512 + LED_OFFSET;
const TIMEOUTS = deadlines(CONTAINER_TIMEOUTS);

export class ContainerUnderTest implements DeviceUnderTest {
  readonly target = TARGET_NAME;
  readonly capabilities: ReadonlySet<Capability> = new Set(CONTAINER_CAPABILITIES);
  readonly facts: TargetFacts = { engine: 'docker', imagesArePulled: false };
  readonly api: ApiProtocol;
  readonly exec: CommandProtocol;
  readonly led: LedProtocol;
  readonly power: PowerProtocol;
  readonly supervisor: SupervisorProtocol;
  readonly journal: JournalProtocol;
  readonly files: FilesProtocol;
  readonly images: ImagesProtocol;
  readonly ports: PortsProtocol;
  readonly paths: DevicePaths;
  readonly observe: ObserveProtocol;
  readonly #supervisorLogPath: string;
  readonly #uuid: string;
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

    const led = ledFromFiles({
      simFile: join(dataDir, LED_TRANSITIONS_FILE),
      powerLossFile: join(hostDir, 'led-power-loss.jsonl'),
      line: `gpio ${LED_GPIO} (pinctrl-bcm2835 pin ${LED_OFFSET}, simulated sysfs inside the device container)`,
    });
    this.led = led;
    this.power = {
      reboot: login1Reboot({
        run: (argv) => this.exec.run(argv),
        argv: login1DbusSend(`unix:path=${join(dataDir, 'dbus', 'system_bus_socket')}`),
        // The supervisor process goes away and comes back in the same container; see it go first.
        watchDown: () => () => waitApiDown(url, { timeoutMs: TIMEOUTS.down, intervalMs: 100, after: 'login1 Reboot' }),
        up: () => this.api.waitReady(TIMEOUTS.ready),
      }),
      ...containerPower({ docker, dockerSocket, id, uuid, dataDir, readyLines: ready.count, readyMs: TIMEOUTS.ready, waitReady: (ms) => this.api.waitReady(ms), lostPower: () => led.lostPower() }),
    };

    // The device container's init is `fleetlab sim device`, which starts its supervisor again as systemd would.
    this.supervisor = supervisorKill({
      kill: async () => {
        const r = await this.exec.run(['sh', '-c', KILL_SUPERVISOR]);
        if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `supervisor.kill: no supervisor process in the device container (${(r.stderr || r.stdout).trim() || `exit ${r.exitCode}`})`);
      },
      url,
      downMs: TIMEOUTS.down,
      waitReady: () => this.api.waitReady(TIMEOUTS.ready),
    });
    this.journal = journalInDirectory(this.exec.run, join(dataDir, 'journal'));

    this.files = {
      ...filesOverCommands(run, 'the device'),
      // dockerd's volume directory is bind-mounted at its own path, so Mountpoint is a device path too.
      volumePath: (appId, volume) => engineVolumePath(docker, uuid, appId, volume),
    };
    // The container's processes are this host's: the supervisor is found under the container's init.
    const supervisorPid = async () => {
      const init = (await docker.getContainer(id).inspect()).State.Pid;
      return init ? hostDescendant(init, /main\.js supervisor/) : undefined;
    };
    this.observe = hostObserve({ engineSocket: dockerSocket, supervisorPid, lockRoot: join(dataDir, 'locks') });
    this.#supervisorLogPath = join(dataDir, 'supervisor.log');
    this.#uuid = uuid;
  }

  supervisorLog(): Promise<string> {
    return readFile(this.#supervisorLogPath, 'utf8').catch((err) => `(no supervisor log: ${err})`);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // SIGTERM to the sim: it stops the supervisor and removes the containers and networks it made.
    await this.container.stop({ timeout: TIMEOUTS.stopGrace, remove: true }).catch(() => undefined);
    await this.docker.getContainer(this.container.getId()).remove({ force: true }).catch(() => undefined);
    await removeDeviceLeftovers(this.docker, this.#uuid).catch(() => undefined);
    // The device container wrote its data as root: a user other than root removes it through the engine.
    await removeTree(this.hostDir, this.dockerSocket);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
