/**
 * `ports` on the qemu target. An app's published port is bound by the board's dockerd inside
 * the guest, which this machine reaches only through QEMU's user-network forwards; which guest
 * port that is, is known once the app runs. So the binding is read from the board's engine
 * (the container's NetworkSettings.Ports, as ./engine-ports.ts reads it on dockerd, over the
 * engine socket forwarded through SSH), and a forward to it is added to the running QEMU
 * (qemu/hostfwd.ts) the first time a spec asks. Its host side is a loopback address of the
 * device's own with the port's own number, as on the sim and container targets: two devices of
 * a run both answer on 8080, each at its address. A forward belongs to one QEMU process: when
 * the board starts again after a reboot or a power cycle (each a new QEMU, see qemu/boot.ts),
 * the target adds the device's forwards to it at the same addresses and ports (`follow`), so a
 * URL a spec holds leads to the board again. They are removed when the device's spec file
 * ends (a raspi3b board keeps its QEMU for the next file).
 */
import Docker from 'dockerode';
import { FleetlabError, errorText } from '../../src/errors.js';
import { freePort } from '../../src/free-port.js';
import { addHostForward, GUEST_ADDRESS, removeHostForward, type HostForward } from '../../qemu/hostfwd.js';
import type { HmpRunner } from '../../qemu/qmp.js';
import { devicePublishAddress } from '../../sim/publish-address.js';
import { engineBinding, portDescription, type EngineBinding } from './engine-ports.js';
import type { PortsProtocol, PublishedPort } from '../../device-access/protocols.js';

/** Host sides tried before giving up: the port's own number at the device's address, then other numbers there. */
const TRIES = 4;

/** The running QEMU of the board, as far as forwards go: each process has its own. */
export interface ForwardingBoard {
  readonly qmp: HmpRunner;
  /** Set once this QEMU has exited. */
  readonly exitReason: string | undefined;
}

/**
 * The guest port a forward reaches for a binding of the board's engine: one on all of the
 * board's addresses, or on the address the forward arrives at. A binding to another of the
 * board's addresses (its loopback) is out of reach from this machine, and says how to publish.
 */
export function guestPortFor(binding: EngineBinding, containerPort: number, what: string): number {
  const ip = binding.hostIp ?? '';
  if (ip === '' || ip === '0.0.0.0' || ip === '::' || ip === GUEST_ADDRESS) return binding.port;
  throw new FleetlabError('HIL_ERR_DEPLOY', `${what}: the board's engine binds it at ${ip}:${binding.port} only, which a forward from this machine cannot reach (it arrives at the board's ${GUEST_ADDRESS}); publish it on all of the board's addresses, e.g. ports: ["${binding.port}:${containerPort}"]`);
}

export interface QemuPortsOptions {
  readonly uuid: string;
  /** A socket path of this machine where the board's dockerd answers. */
  readonly engineSocket: () => Promise<string>;
  /** The board's QEMU now; undefined while it has none (powered off). */
  readonly board: () => ForwardingBoard | undefined;
  /** The loopback address the device's ports are reached at; drawn from 127.64.0.0/10 when absent. */
  readonly address?: string;
}

interface Forwarded {
  readonly fwd: HostForward;
  /** The QEMU process it was added to. */
  readonly board: ForwardingBoard;
}

export class QemuPorts implements PortsProtocol {
  readonly address: string;
  /** By guest port: where it is reached, and on which QEMU that was set up. */
  readonly #forwards = new Map<number, Forwarded>();
  /** One forward is set up at a time, so two asks for one port add it once. */
  #queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly options: QemuPortsOptions) {
    this.address = options.address ?? devicePublishAddress();
  }

  async published(service: string, containerPort: number, options: { readonly appId?: number; readonly protocol?: 'tcp' | 'udp' } = {}): Promise<PublishedPort> {
    const what = portDescription(service, containerPort, options);
    // QEMU's user network forwards udp as well, but nothing here was tried with it: not offered until a spec needs it (device.address asks for tcp).
    if (options.protocol === 'udp') throw new FleetlabError('HIL_ERR_CAPABILITY', `${what}: the qemu target forwards tcp ports only`);
    const docker = new Docker({ socketPath: await this.options.engineSocket() });
    const guestPort = guestPortFor(await engineBinding(docker, this.options.uuid, service, containerPort, options), containerPort, what);
    const next = this.#queue.then(() => this.#forward(guestPort, what));
    this.#queue = next.catch(() => undefined);
    const { fwd } = await next;
    return { host: fwd.hostAddress, port: fwd.hostPort };
  }

  async #forward(guestPort: number, what: string): Promise<Forwarded> {
    const board = this.options.board();
    if (!board || board.exitReason) throw new FleetlabError('HIL_ERR_DEPLOY', `${what}: the board is not running (${board?.exitReason ?? 'powered off'}); power it on (device.faults.powerRestore()) before asking where a port is`);
    const kept = this.#forwards.get(guestPort);
    if (kept?.board === board) return kept;
    // The same host side as before this QEMU first, so a URL a spec holds still leads here.
    const first = kept?.fwd ?? { hostAddress: this.address, hostPort: guestPort, guestPort };
    let fwd: HostForward = first;
    for (let i = 0; i < TRIES; i++) {
      if ((await addHostForward(board.qmp, fwd)) === 'added') {
        const forwarded = { fwd, board };
        this.#forwards.set(guestPort, forwarded);
        return forwarded;
      }
      // Taken at that address (a port below 1024 for a user other than root, or another process): another number there.
      fwd = { ...fwd, hostPort: await freePort() };
    }
    throw new FleetlabError('HIL_ERR_DEPLOY', `${what}: QEMU could not bind a forward to the board's port ${guestPort} at ${this.address} (${first.hostPort} and ${TRIES - 1} free ports tried); see what holds ports there (ss -ltn)`);
  }

  /**
   * A new QEMU of the board (after a reset or a power cycle): the device's forwards added to it
   * at the same host sides, so the URLs `published` gave lead to the board again. One whose
   * host side is taken meanwhile is left to the next ask, which picks another port.
   */
  async follow(board: ForwardingBoard): Promise<void> {
    const next = this.#queue.then(async () => {
      for (const [guestPort, { fwd, board: on }] of this.#forwards) {
        if (on === board) continue;
        if ((await addHostForward(board.qmp, fwd)) === 'added') this.#forwards.set(guestPort, { fwd, board });
        else process.stderr.write(`qemu target: ${fwd.hostAddress}:${fwd.hostPort} is taken since the board started again; its port ${guestPort} is forwarded from another port at the next device.address()\n`);
      }
    });
    this.#queue = next.catch(() => undefined);
    await next;
  }

  /** Removes the device's forwards from the board's QEMU, if it is the one they were added to; says on stderr when one cannot be. */
  async close(): Promise<void> {
    await this.#queue;
    const board = this.options.board();
    for (const { fwd, board: on } of this.#forwards.values()) {
      if (on !== board || on.exitReason) continue; // gone with its QEMU
      await removeHostForward(on.qmp, fwd).catch((err: unknown) => process.stderr.write(`qemu target: the forward to the board's port ${fwd.guestPort} stays: ${errorText(err)}\n`));
    }
    this.#forwards.clear();
  }
}
