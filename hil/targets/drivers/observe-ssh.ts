/**
 * What the timeline watches on a board reached over SSH (the qemu and board targets): the
 * board's dockerd through a forwarded socket, the supervisor unit's /proc through one streaming
 * channel, and the serial console the lab host reads. Update locks are not polled: a file check
 * over SSH every second would cost an emulated board more than the test it watches; the
 * journal lane carries the supervisor's own "Updates are locked" lines instead.
 *
 * The observer has an SSH connection of its own. It tries again while the board is down
 * (rebooted, powered off, restored from a snapshot), and the test's connection must never see
 * those attempts: on a shared one they surfaced as the test's SSH errors. After a failed
 * attempt it rests a few seconds, so a board that stays off costs one bounded attempt per rest.
 */
import { FleetlabError } from '../../../src/errors.js';
import type { ObserveProtocol } from '../../../device-access/protocols.js';
import type { SerialConsole } from '../../../device-access/serial-console.js';
import { SshDevice, type SshDeviceOptions } from '../../../device-access/ssh-device.js';
import { sshPidUsage } from './supervisor-usage.js';

/** How long the observer leaves a board alone after an attempt failed. */
const REST_MS = 5000;
/** An attempt to a board that is booting may hang in the handshake: bounded below the test's own. */
const OBSERVER_READY_MS = 5000;

/** The systemd unit's main pid, as the usage loop asks for it (only when the pid it had is gone). */
export const unitMainPid = (unit: string) => `systemctl show -p MainPID --value '${unit.replace(/'/g, '')}'`;

/**
 * The observer's own session to the board: made on first use, made again when the board moved
 * (a relaunched QEMU listens on another port), resting after a failure.
 */
export class ObserverSession {
  #device: SshDevice | undefined;
  #key: string | undefined;
  #forward: Promise<{ path: string; close(): Promise<void> }> | undefined;
  #restUntil = 0;
  #lastFailure = '';
  #closed = false;

  constructor(
    /** Where the board answers now; undefined while it has none (powered off). */
    private readonly reach: () => SshDeviceOptions | undefined,
    private readonly restMs = REST_MS,
  ) {}

  /** The session, connected; rejects at once while resting, off or closed. */
  async device(): Promise<SshDevice> {
    if (this.#closed) throw new FleetlabError('SUP_ERR_HOST', 'the observer was closed');
    if (Date.now() < this.#restUntil) throw new FleetlabError('SUP_ERR_HOST', `the observer rests after a failed attempt (${this.#lastFailure})`);
    const options = this.reach();
    if (!options) throw new FleetlabError('SUP_ERR_HOST', 'the board has no SSH now (powered off)');
    const key = `${options.host}:${options.port ?? 22}`;
    if (key !== this.#key) await this.#forget();
    this.#key = key;
    this.#device ??= new SshDevice({ ...options, readyTimeoutMs: OBSERVER_READY_MS });
    try {
      await this.#device.connect();
    } catch (err) {
      this.failed(err);
      throw err;
    }
    return this.#device;
  }

  /** A unix socket here reaching `remotePath` on the board over this session. */
  async forwardUnixSocket(remotePath: string): Promise<string> {
    const device = await this.device();
    this.#forward ??= device.forwardUnixSocket(remotePath);
    try {
      return (await this.#forward).path;
    } catch (err) {
      this.#forward = undefined;
      throw err;
    }
  }

  /** Something over the session failed: the next attempt waits out the rest. */
  failed(err: unknown): void {
    this.#lastFailure = err instanceof Error ? err.message : String(err);
    this.#restUntil = Date.now() + this.restMs;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#forget();
  }

  async #forget(): Promise<void> {
    const forward = this.#forward;
    const device = this.#device;
    this.#forward = undefined;
    this.#device = undefined;
    await forward?.then((f) => f.close()).catch(() => undefined);
    await device?.close().catch(() => undefined);
  }
}

/** `console`: the serial console the lab host reads, where the board has one. */
export function sshObserve(board: { reach: () => SshDeviceOptions | undefined; supervisorPid: string; engineSocketPath: string; console?: () => SerialConsole | undefined; restMs?: number }): ObserveProtocol {
  const session = new ObserverSession(board.reach, board.restMs);
  const usage = sshPidUsage(session, board.supervisorPid);
  const console_ = board.console;
  return {
    engineSocket: () => session.forwardUnixSocket(board.engineSocketPath),
    supervisorUsage: () => usage.usage(),
    ...(console_ ? { consoleLines: async (sinceMs: number) => console_()?.lines(sinceMs) ?? [] } : {}),
    missing: ["update locks: not read over SSH (too costly once a second); the journal shows the supervisor's \"Updates are locked\" lines"],
    close: async () => {
      await usage.close();
      await session.close();
    },
  };
}
