/** One spec file's device on the worker's emulated board: the protocols over SSH, QMP and the host. */
import { Agent } from 'undici';
import { FleetlabError } from '../../../src/errors.js';
import { serialTail } from '../../../qemu/boot.js';
import { GUEST } from '../../../device-image/recipe.js';
import type { PartitionableLink } from '../../../sim/network/partitionable-link.js';
import { httpApi } from '../../lib/http.js';
import type { SshDevice } from '../../../device-access/ssh-device.js';
import type { ApiProtocol, Capability, DevicePaths, DeviceUnderTest, DiskProtocol, EngineProtocol, ImagesProtocol, LedProtocol, NetworkProtocol, ObserveProtocol, PowerProtocol, SupervisorProtocol, TargetFacts } from '../../../device-access/protocols.js';
import { QemuPorts } from '../qemu-ports.js';
import { waitApiDown } from '../drivers/api-down.js';
import { supervisorKill, systemctlKill } from '../drivers/supervisor-kill.js';
import { systemdEngine } from '../drivers/engine-systemd.js';
import { diskFill } from '../drivers/disk-fill.js';
import { dockerVolumePath, unitLog } from '../drivers/device-facts.js';
import { sshObserve, unitMainPid } from '../drivers/observe-ssh.js';
import { LOGIN1_BUSCTL, LOGIN1_CALL_MS, login1Reboot } from '../drivers/reboot-login1.js';
import { deadlines, QEMU_TIMEOUTS } from '../timeouts.js';
import type { QemuLab } from './lab.js';

export const QEMU_TARGET = 'qemu';
export const QEMU_CAPABILITIES: readonly Capability[] = ['api', 'exec', 'led', 'power.reboot', 'power.cycle', 'power.cut', 'supervisor.kill', 'network', 'network.registry', 'engine.restart', 'disk.fill', 'journal', 'files', 'files.volumes', 'images', 'ports'];
/** Serial console lines attached to a failed test: enough for a whole boot's tail. */
const CONSOLE_LINES = 150;
const TIMEOUTS = deadlines(QEMU_TIMEOUTS);

export class QemuUnderTest implements DeviceUnderTest {
  readonly target = QEMU_TARGET;
  readonly capabilities: ReadonlySet<Capability> = new Set(QEMU_CAPABILITIES);
  readonly facts: TargetFacts;
  readonly api: ApiProtocol;
  readonly exec;
  readonly files;
  readonly journal;
  readonly led: LedProtocol;
  readonly power: PowerProtocol;
  readonly supervisor: SupervisorProtocol;
  readonly network: NetworkProtocol;
  readonly engine: EngineProtocol;
  readonly disk: DiskProtocol;
  readonly images: ImagesProtocol;
  readonly ports: QemuPorts;
  readonly paths: DevicePaths = { dataDir: GUEST.dataDir, lockRoot: GUEST.lockRoot };
  readonly observe: ObserveProtocol;
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
    this.#unwatchRelaunches = lab.power.watchRelaunches((board) => this.ports.follow(board));
    this.led = lab.led.protocol(() => lab.cut);
    const url = this.api.identity.url;
    this.power = {
      reboot: login1Reboot({
        run: (argv) => ssh.run(argv, { timeoutMs: LOGIN1_CALL_MS }),
        argv: LOGIN1_BUSCTL,
        // The guest going down may end the session before busctl answers, whatever it says.
        callLost: () => true,
        watchDown: () => () => waitApiDown(url, { timeoutMs: TIMEOUTS.down, intervalMs: 200, after: 'it was told to go down' }),
        up: () => lab.waitUp(),
      }),
      ...lab.power.protocol(),
    };
    this.supervisor = supervisorKill({
      kill: () => systemctlKill(ssh, GUEST.unit),
      url,
      downMs: TIMEOUTS.down,
      waitReady: () => this.api.waitReady(TIMEOUTS.ready),
    });
    // Its own SSH session, so that its attempts while the board is down never reach the test's.
    this.observe = sshObserve({ reach: () => lab.sshOptions(), supervisorPid: unitMainPid(GUEST.unit), engineSocketPath: '/var/run/docker.sock', console: () => lab.console });
    // The board's network: its link to the cloud, and its path to the registry once a release came that way.
    const links = () => {
      const all = [link, lab.images?.link].filter((l): l is PartitionableLink => l !== undefined);
      if (!all.length) throw new FleetlabError('SUP_ERR_BAD_REQUEST', 'network: this device has no network path yet: start it with a cloud (test.use({ withCloud: true })) or deploy a release first');
      return all;
    };
    this.network = {
      partition: async () => links().forEach((l) => l.partition()),
      heal: async () => links().forEach((l) => l.heal()),
    };
    this.engine = systemdEngine(ssh.exec, { unit: 'docker', readyMs: TIMEOUTS.ready });
    this.disk = diskFill(ssh.exec, ['/var/lib/docker', GUEST.dataDir]);
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
    await this.observe.close?.().catch(() => undefined);
    await this.ports.close();
    await this.#engine?.then((e) => e.close()).catch(() => undefined);
    await this.#connections.destroy().catch(() => undefined);
    await this.link?.close().catch(() => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
