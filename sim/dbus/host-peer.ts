/**
 * The simulated host OS on D-Bus: hostnamed, PID 1's Manager and logind, exported on a bus
 * (normally a private one from ./private-bus.ts) under their real names, paths and
 * signatures, so the supervisor's production host adapter talks to it unchanged.
 *
 * What a test or a simulated device observes: the hostname (persisted in
 * `<stateDir>/hostname` like /etc/hostname, so it survives a simulated reboot), the unit
 * jobs, the power requests, and events ('reboot', 'poweroff', 'hostname', 'job'). Power
 * events fire after the D-Bus reply has been sent, so the caller sees its call succeed
 * before the device goes down.
 */
import { EventEmitter } from 'node:events';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as dbus from '@jellybrick/dbus-next';
import { FleetlabError, errorText } from '../../src/errors.js';
import { removeFileDurable, writeFileAtomic } from '../../src/atomic-file.js';
import { isValidHostname } from '../../src/supervisor/adapters/hostname-rules.js';
import { offBusError, onBusError } from '../../src/supervisor/adapters/dbus-client.js';
import { HOSTNAME1_NAME, HOSTNAME1_PATH, Hostname1 } from './hostnamed.js';
import { LOGIN1_NAME, LOGIN1_PATH, Login1Manager, type PowerAction } from './logind-manager.js';
import { SYSTEMD1_NAME, SYSTEMD1_PATH, Systemd1Manager, type UnitJob } from './systemd-manager.js';

export type { PowerAction } from './logind-manager.js';
export type { UnitJob, JobType } from './systemd-manager.js';

export interface HostPeerOptions {
  busAddress: string;
  /** Holds the `hostname` file; created when missing. */
  stateDir: string;
  /** What Hostname reads when no static hostname is configured (the OS default). */
  defaultHostname: string;
  /** Units that exist for systemd1; default: any well-formed unit name. */
  units?: readonly string[];
  onReboot?: () => void;
  onPowerOff?: () => void;
}

export interface UnitRestart {
  unit: string;
  mode: string;
  at: number;
}

export interface PowerRequest {
  action: PowerAction;
  at: number;
}

export interface HostPeerEvents {
  reboot: [];
  poweroff: [];
  /** The effective hostname after a change. */
  hostname: [hostname: string];
  job: [job: UnitJob];
}

const PROPERTIES = 'org.freedesktop.DBus.Properties';
const DO_NOT_QUEUE = 4;
const PRIMARY_OWNER = 1;

async function readStaticHostname(path: string): Promise<string> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return '';
    throw err;
  }
  // Like hostnamed reading /etc/hostname: first line that is not a comment; invalid means unset.
  const line = text.split('\n').map((l) => l.trim()).find((l) => l !== '' && !l.startsWith('#')) ?? '';
  return isValidHostname(line) ? line : '';
}

/** An error reply to a method call. */
function errorReply(call: dbus.Message, name: string, text: string): dbus.Message {
  return dbus.Message.newError(call, name, text);
}

/** Connects and resolves once the bus has answered Hello. */
function connect(busAddress: string): Promise<dbus.MessageBus> {
  return new Promise((resolve, reject) => {
    let bus: dbus.MessageBus;
    try {
      bus = dbus.sessionBus({ busAddress });
    } catch (err) {
      reject(err);
      return;
    }
    const onError = (err: unknown) => {
      bus.off('connect', onConnect);
      reject(err);
    };
    const onConnect = () => {
      offBusError(bus, onError);
      resolve(bus);
    };
    onBusError(bus, onError, true);
    bus.once('connect', onConnect);
  });
}

export class HostPeer extends EventEmitter<HostPeerEvents> {
  /** Every unit job accepted by systemd1, in order. */
  readonly unitJobs: UnitJob[] = [];
  readonly powerRequests: PowerRequest[] = [];
  private brokenBy: Error | undefined;

  private closing: Promise<void> | undefined;
  private readonly broken: Promise<never>;

  private constructor(
    private readonly bus: dbus.MessageBus,
    private readonly hostname1: Hostname1,
    private readonly exported: ReadonlyArray<{ name: string; path: string; iface: dbus.Interface }>,
  ) {
    super();
    this.broken = new Promise<never>((_, reject) => {
      const fail = (err: Error) => {
        this.brokenBy ??= err;
        reject(err);
      };
      onBusError(bus, (err) => fail(err instanceof Error ? err : new Error(String(err))));
      const internal = (bus as unknown as { _connection?: { on?: (event: string, cb: () => void) => void } })._connection;
      internal?.on?.('end', () => fail(new Error('the bus closed the connection')));
    });
    this.broken.catch(() => undefined);
  }

  static async start(options: HostPeerOptions): Promise<HostPeer> {
    const hostnamePath = join(options.stateDir, 'hostname');
    const staticHostname = await readStaticHostname(hostnamePath);
    let bus: dbus.MessageBus;
    try {
      bus = await connect(options.busAddress);
    } catch (err) {
      throw new FleetlabError('SUP_ERR_HOST', `host peer cannot connect to the bus at ${options.busAddress}: ${errorText(err)}`, {
        cause: err,
      });
    }

    // The interfaces call back into the peer, which exists only after they do.
    let peer: HostPeer | undefined;
    const hostname1 = new Hostname1({
      defaultHostname: options.defaultHostname,
      staticHostname,
      persist: (name) => (name === '' ? removeFileDurable(hostnamePath) : writeFileAtomic(hostnamePath, `${name}\n`)),
      onChange: (hostname) => peer?.emit('hostname', hostname),
    });
    const manager = new Systemd1Manager({
      units: options.units,
      onJob: (job) => {
        peer?.unitJobs.push(job);
        peer?.emit('job', job);
      },
    });
    const login1 = new Login1Manager({
      onPower: (action) => {
        peer?.powerRequests.push({ action, at: Date.now() });
        // After the reply: a real reboot would not let the caller hear back either, but
        // logind answers before it starts shutting down, and so do we.
        setImmediate(() => {
          if (action === 'reboot') {
            peer?.emit('reboot');
            options.onReboot?.();
          } else {
            peer?.emit('poweroff');
            options.onPowerOff?.();
          }
        });
      },
    });
    const exported = [
      { name: HOSTNAME1_NAME, path: HOSTNAME1_PATH, iface: hostname1 },
      { name: SYSTEMD1_NAME, path: SYSTEMD1_PATH, iface: manager },
      { name: LOGIN1_NAME, path: LOGIN1_PATH, iface: login1 },
    ];
    peer = new HostPeer(bus, hostname1, exported);

    try {
      bus.addMethodHandler((msg: dbus.Message) => peer!.handleSpecialCases(msg));
      for (const { path, iface } of exported) bus.export(path, iface);
      for (const { name } of exported) {
        const reply = await Promise.race([bus.requestName(name, DO_NOT_QUEUE), peer.broken]);
        if (reply !== PRIMARY_OWNER) {
          throw new FleetlabError('SUP_ERR_HOST', `host peer cannot own ${name} on ${options.busAddress}: another connection owns it`);
        }
      }
    } catch (err) {
      bus.disconnect();
      if (err instanceof FleetlabError) throw err;
      throw new FleetlabError('SUP_ERR_HOST', `host peer failed to start on ${options.busAddress}: ${errorText(err)}`, { cause: err });
    }
    return peer;
  }

  /** Why the bus connection broke (for example, the bus was stopped); undefined while it is up. */
  get connectionError(): Error | undefined {
    return this.brokenBy;
  }

  /** The effective hostname: the static one, else the OS default (what Hostname reads). */
  get hostname(): string {
    return this.hostname1.Hostname;
  }

  /** The configured static hostname; '' when none (what StaticHostname reads). */
  get staticHostname(): string {
    return this.hostname1.StaticHostname;
  }

  /** What `hostnamectl set-hostname` does on a board: hostnamed's SetStaticHostname, persisted. */
  setStaticHostname(name: string): Promise<void> {
    return this.hostname1.SetStaticHostname(name, false);
  }

  get unitRestarts(): UnitRestart[] {
    return this.unitJobs.filter((job) => job.type === 'restart').map(({ unit, mode, at }) => ({ unit, mode, at }));
  }

  /** Releases the names (so a new peer can take them at once) and disconnects. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.hostname1.idle();
      if (!this.brokenBy) {
        try {
          for (const { name } of this.exported) await Promise.race([this.bus.releaseName(name), this.broken]);
        } catch {
          // The bus is gone, and the names with it.
        }
      }
      for (const { path, iface } of this.exported) this.bus.unexport(path, iface);
      this.bus.disconnect();
    })();
    return this.closing;
  }

  /**
   * What dbus-next gets wrong or does not do: Set on a read-only property must fail with
   * PropertyReadOnly (dbus-next replies twice, an error and then success), and each object
   * lives only under its own service's name, as the three daemons are separate processes.
   */
  private handleSpecialCases(msg: dbus.Message): boolean {
    const owner = this.exported.find((entry) => entry.path === msg.path);
    if (owner && msg.destination && !msg.destination.startsWith(':') && msg.destination !== owner.name) {
      this.bus.send(errorReply(msg, 'org.freedesktop.DBus.Error.UnknownObject', `Unknown object '${msg.path}'.`));
      return true;
    }
    if (msg.interface === PROPERTIES && msg.member === 'Set' && msg.signature === 'ssv' && owner) {
      const [ifaceName, property] = msg.body as [string, string];
      if (owner.iface === this.hostname1 && ifaceName === HOSTNAME1_NAME && Hostname1.readOnlyProperties.includes(property)) {
        this.bus.send(errorReply(msg, 'org.freedesktop.DBus.Error.PropertyReadOnly', `Property '${property}' is not writable.`));
        return true;
      }
    }
    return false;
  }
}

export function startHostPeer(options: HostPeerOptions): Promise<HostPeer> {
  return HostPeer.start(options);
}
