/**
 * A D-Bus method-call client over dbus-next that fails instead of hanging. dbus-next leaves
 * pending calls unanswered forever when the bus goes away and throws from an unhandled
 * 'error' event; this wrapper rejects every pending call when its connection breaks,
 * reconnects lazily on the next call, and turns every failure into a FleetlabError
 * (SUP_ERR_HOST) that names the interface and method. Everything dbus-next specific for
 * callers stays in this file.
 *
 * dbus-next is loaded by the first call, not with the supervisor: a device calls the host
 * (hostname, proxy, reboot) rarely, and setting up dbus-next and its XML parser at start
 * took 0.2-0.3 MiB of the device bundle's idle RSS on Node 24 (bench/supervisor-idle.bench.ts).
 */
import type * as DbusNext from '@jellybrick/dbus-next';
import { FleetlabError, errorText } from '../../errors.js';

export interface DbusClientOptions {
  /** D-Bus address; default DBUS_SYSTEM_BUS_ADDRESS or the standard system bus socket. */
  busAddress?: string;
  /** How long a call may stay unanswered; the libdbus default is 25 s. */
  callTimeoutMs?: number;
}

export interface DbusMethodCall {
  destination: string;
  path: string;
  interface: string;
  member: string;
  signature?: string;
  body?: unknown[];
}

export const DEFAULT_SYSTEM_BUS_ADDRESS = 'unix:path=/run/dbus/system_bus_socket';
const DEFAULT_CALL_TIMEOUT_MS = 25_000;

type Dbus = typeof DbusNext;

interface Connection {
  bus: DbusNext.MessageBus;
  ready: Promise<void>;
  /** Rejecters of everything in flight on this connection. */
  pending: Set<(err: Error) => void>;
  broken?: Error;
}

/**
 * Listens for a bus connection's 'error' event. The bus emits it (socket errors, a failed
 * handshake), but the library's typings leave it out of the bus's event map.
 */
export function onBusError(bus: DbusNext.MessageBus, listener: (err: unknown) => void, once = false): void {
  const emitter = bus as unknown as NodeJS.EventEmitter;
  if (once) emitter.once('error', listener);
  else emitter.on('error', listener);
}

/** Stops listening for a bus connection's 'error' event (see onBusError). */
export function offBusError(bus: DbusNext.MessageBus, listener: (err: unknown) => void): void {
  (bus as unknown as NodeJS.EventEmitter).off('error', listener);
}

/**
 * dbus-next's DBusError, known by its name and error name: only a client that has loaded
 * dbus-next holds its class, and a failure can only come from one that has.
 */
function asDbusError(err: unknown): DbusNext.DBusError | undefined {
  return err instanceof Error && err.name === 'DBusError' && typeof (err as { type?: unknown }).type === 'string' ? (err as DbusNext.DBusError) : undefined;
}

/** The D-Bus error name (e.g. org.freedesktop.DBus.Error.InvalidArgs) behind a failure, if any. */
export function dbusErrorName(err: unknown): string | undefined {
  return asDbusError(err instanceof FleetlabError ? err.cause : err)?.type;
}

export class DbusClient {
  readonly busAddress: string;
  private readonly callTimeoutMs: number;
  private connection: Connection | undefined;
  private closed = false;
  /** dbus-next, loaded by the first call. */
  private dbus: Promise<Dbus> | undefined;

  constructor(options: DbusClientOptions = {}) {
    this.busAddress = options.busAddress ?? process.env.DBUS_SYSTEM_BUS_ADDRESS ?? DEFAULT_SYSTEM_BUS_ADDRESS;
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
  }

  /** Calls a method and returns the reply body. */
  call(call: DbusMethodCall): Promise<unknown[]> {
    return this.invoke(call, `D-Bus call ${call.interface}.${call.member} on ${call.destination} ${call.path}`);
  }

  /** org.freedesktop.DBus.Properties.Get, unwrapped from its variant. */
  async getProperty(destination: string, path: string, iface: string, name: string): Promise<unknown> {
    const what = `reading D-Bus property ${iface}.${name} on ${destination} ${path}`;
    const [variant] = await this.invoke(
      { destination, path, interface: 'org.freedesktop.DBus.Properties', member: 'Get', signature: 'ss', body: [iface, name] },
      what,
    );
    const { Variant } = await this.library();
    if (!(variant instanceof Variant)) {
      throw new FleetlabError('SUP_ERR_HOST', `${what}: the reply is not a variant`);
    }
    return variant.value;
  }

  private library(): Promise<Dbus> {
    return (this.dbus ??= import('@jellybrick/dbus-next'));
  }

  /** The connection, after the bus has answered Hello. */
  private async connected(what: string): Promise<Connection> {
    let conn: Connection | undefined;
    try {
      if (this.closed) throw new Error('the D-Bus client is closed');
      const dbus = await this.library();
      if (this.closed) throw new Error('the D-Bus client is closed');
      conn = this.connect(dbus);
      await this.track(conn, conn.ready);
      return conn;
    } catch (err) {
      // A connection that never completed its handshake is not worth waiting on again.
      if (conn) this.breakConnection(conn, toError(err));
      throw new FleetlabError('SUP_ERR_HOST', `${what} failed: cannot connect to the bus at ${this.busAddress}: ${describe(err)}`, {
        cause: err,
      });
    }
  }

  private async invoke(call: DbusMethodCall, what: string): Promise<unknown[]> {
    const conn = await this.connected(what);
    try {
      const { Message } = await this.library();
      const message = new Message({
        destination: call.destination,
        path: call.path,
        interface: call.interface,
        member: call.member,
        signature: call.signature ?? '',
        body: call.body ?? [],
      });
      const reply = await this.track(conn, conn.bus.call(message));
      return reply?.body ?? [];
    } catch (err) {
      throw new FleetlabError('SUP_ERR_HOST', `${what} failed: ${describe(err)}`, { cause: err });
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const conn = this.connection;
    this.connection = undefined;
    if (conn) this.breakConnection(conn, new Error('the D-Bus client was closed'));
  }

  private connect(dbus: Dbus): Connection {
    if (this.connection && !this.connection.broken) return this.connection;
    // dbus-next's sessionBus() takes any address; systemBus() would ignore ours.
    const bus = dbus.sessionBus({ busAddress: this.busAddress });
    const conn: Connection = {
      bus,
      pending: new Set(),
      ready: new Promise<void>((resolve) => bus.once('connect', () => resolve())),
    };
    // Without an 'error' listener dbus-next's EventEmitter would throw and crash the process.
    onBusError(bus, (err) => this.breakConnection(conn, toError(err)));
    // A closed socket is not an error to dbus-next: it only stops answering. Its internal
    // connection emits 'end'; listen there so calls in flight fail now.
    const internal = (bus as unknown as { _connection?: { on?: (event: string, cb: () => void) => void } })._connection;
    internal?.on?.('end', () => this.breakConnection(conn, new Error('the bus closed the connection')));
    this.connection = conn;
    return conn;
  }

  private breakConnection(conn: Connection, err: Error): void {
    if (conn.broken) return;
    conn.broken = err;
    if (this.connection === conn) this.connection = undefined;
    for (const reject of conn.pending) reject(err);
    conn.pending.clear();
    try {
      conn.bus.disconnect();
    } catch {
      // The stream is already gone; nothing left to release.
    }
  }

  /** Settles with the operation, or rejects when the connection breaks or the call times out. */
  private track<T>(conn: Connection, operation: Promise<T>): Promise<T> {
    if (conn.broken) return Promise.reject(conn.broken);
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => settle(() => reject(new Error(`no reply within ${this.callTimeoutMs} ms`))),
        this.callTimeoutMs,
      );
      timer.unref();
      const onBroken = (err: Error) => settle(() => reject(err));
      const settle = (fn: () => void) => {
        clearTimeout(timer);
        conn.pending.delete(onBroken);
        fn();
      };
      conn.pending.add(onBroken);
      operation.then(
        (value) => settle(() => resolve(value)),
        (err: unknown) => settle(() => reject(err)),
      );
    });
  }
}

function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

const SOCKET_ERRORS: Record<string, string> = {
  ENOENT: 'no bus socket there (ENOENT)',
  ECONNREFUSED: 'nothing is listening on the bus socket (ECONNREFUSED)',
  EACCES: 'permission denied on the bus socket (EACCES)',
};

function describe(err: unknown): string {
  const dbusError = asDbusError(err);
  if (dbusError) return `${dbusError.type}: ${dbusError.text}`;
  const code = (err as NodeJS.ErrnoException | undefined)?.code ?? /^(E[A-Z]+)\b/.exec(errorText(err))?.[1];
  if (code && SOCKET_ERRORS[code]) return SOCKET_ERRORS[code];
  return code && !errorText(err).includes(code) ? `${code}: ${errorText(err)}` : errorText(err);
}
