/**
 * A QMP (QEMU Machine Protocol) client over QEMU's unix socket: the one way fleetlab drives an
 * emulated board from outside the guest (power, reset, network cut, GPIO reads via the
 * monitor). QMP is newline-delimited JSON; the server speaks first with a greeting, then waits
 * for `qmp_capabilities` before it accepts anything else.
 *
 * Commands go out strictly one at a time. QMP would accept pipelined commands, but one in
 * flight keeps error attribution trivial and matches how QEMU's main loop serves them anyway.
 * Every command carries an id so a reply that arrives after its caller gave up (timeout) is
 * recognised and dropped instead of being taken as the answer to the next command.
 */
import { EventEmitter } from 'node:events';
import { connect as netConnect, type Socket } from 'node:net';
import { FleetlabError, errorText } from '../src/errors.js';
import { until } from '../src/wait.js';

/** An asynchronous QMP event (SHUTDOWN, RESET, STOP, RESUME, ...). */
export interface QmpEvent {
  event: string;
  data?: Record<string, unknown>;
  /** Host time when QEMU emitted it, in epoch milliseconds. */
  at: number;
}

export interface QmpGreeting {
  version: { qemu: { major: number; minor: number; micro: number }; package: string };
  capabilities: string[];
}

export interface QmpConnectOptions {
  socketPath: string;
  /** How long to keep retrying while QEMU has not created or is not yet accepting on the socket. */
  connectTimeoutMs?: number;
  retryIntervalMs?: number;
  /** Default time a command may take before its caller gets an error; per-call override in execute(). */
  commandTimeoutMs?: number;
}

/**
 * A command QEMU answered with an error. `qmpClass` is QMP's error class (GenericError,
 * CommandNotFound, DeviceNotFound, ...) so callers can branch on it without parsing text.
 * The catalogue has no emulator-specific code; SUP_ERR_HOST is the nearest ("the services
 * under the supervisor failed"), and the QMP class carries the precise reason.
 */
export class QmpCommandError extends FleetlabError {
  constructor(
    readonly command: string,
    readonly qmpClass: string,
    readonly desc: string,
  ) {
    super('SUP_ERR_HOST', `QMP ${command} failed: ${qmpClass}: ${desc}`);
  }
}

/** The connection to QEMU went away (QEMU quit or crashed) or was closed by us. */
export class QmpClosedError extends FleetlabError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('SUP_ERR_HOST', message, options);
  }
}

interface Pending {
  id: string;
  command: string;
  args: Record<string, unknown> | undefined;
  timeoutMs: number;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer?: NodeJS.Timeout;
}

/** Only what other qemu/ modules need, so they can be tested against a fake. */
export interface HmpRunner {
  hmp(commandLine: string): Promise<string>;
}

export interface QmpClientEvents {
  event: [QmpEvent];
  close: [QmpClosedError];
}

export class QmpClient extends EventEmitter<QmpClientEvents> implements HmpRunner {
  /**
   * Connects, reads the greeting and negotiates capabilities. Retries ENOENT/ECONNREFUSED
   * until the deadline because QEMU creates the socket a moment after it is spawned.
   */
  static async connect(options: QmpConnectOptions): Promise<QmpClient> {
    const connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    const retryIntervalMs = options.retryIntervalMs ?? 50;
    const open = async (remainingMs: number): Promise<QmpClient> => {
      const started = Date.now();
      const socket = await openSocket(options.socketPath, Math.max(remainingMs, 1));
      const client = new QmpClient(socket, options.socketPath, options.commandTimeoutMs ?? 30_000);
      try {
        await client.handshake(Math.max(remainingMs - (Date.now() - started), 1));
        return client;
      } catch (err) {
        client.destroy();
        throw err;
      }
    };
    return until(`QMP on ${options.socketPath}`, open, () => true, {
      timeoutMs: connectTimeoutMs,
      intervalMs: retryIntervalMs,
      stopOn: (err) => !isRetryable(err),
      fail: (f) => {
        const lastErr = f.last && 'error' in f.last ? f.last.error : undefined;
        return new QmpClosedError(`could not open QMP on ${options.socketPath} within ${connectTimeoutMs} ms: ${errorText(lastErr)}`, { cause: lastErr });
      },
    });
  }

  greeting: QmpGreeting | undefined;
  private readonly queue: Pending[] = [];
  private inFlight: Pending | undefined;
  private buffer = '';
  private nextId = 1;
  private closedError: QmpClosedError | undefined;
  private greetingWaiter: { resolve: (g: QmpGreeting) => void; reject: (e: Error) => void } | undefined;

  /** Why the socket closed, when we know: a socket error, or our own close(). */
  private closeCause: Error | undefined;
  private closedByUs = false;

  private constructor(
    private readonly socket: Socket,
    private readonly socketPath: string,
    private readonly commandTimeoutMs: number,
  ) {
    super();
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => this.onData(chunk));
    // 'error' is always followed by 'close'; the close handler does the cleanup.
    socket.on('error', (err) => {
      this.closeCause ??= err;
    });
    socket.on('close', () => this.onClose());
  }

  /** True once the socket is gone; every later call fails with the reason. */
  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /**
   * Runs a QMP command and resolves with its `return` value. Rejects with QmpCommandError
   * when QEMU answers with an error, QmpClosedError when the connection is gone.
   * `quit` resolves even when QEMU closes the socket before its reply gets out: QEMU
   * exiting is what was asked for.
   */
  execute<T = unknown>(command: string, args?: Record<string, unknown>, options?: { timeoutMs?: number }): Promise<T> {
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise<T>((resolve, reject) => {
      this.queue.push({
        id: `fleetlab-${this.nextId++}`,
        command,
        args,
        timeoutMs: options?.timeoutMs ?? this.commandTimeoutMs,
        resolve: resolve as (v: unknown) => void,
        reject,
      });
      this.pump();
    });
  }

  /** Runs a human monitor command line (info, xp, savevm, ...) and returns its text output. */
  async hmp(commandLine: string, options?: { timeoutMs?: number }): Promise<string> {
    const out = await this.execute<string>('human-monitor-command', { 'command-line': commandLine }, options);
    return typeof out === 'string' ? out : '';
  }

  /** Resolves with the next event of that name, or rejects on timeout or when the connection closes. */
  waitForEvent(name: string, timeoutMs = 10_000): Promise<QmpEvent> {
    if (this.closedError) return Promise.reject(this.closedError);
    return new Promise((resolve, reject) => {
      const cleanup = () => {
        clearTimeout(timer);
        this.off('event', onEvent);
        this.off('close', onClose);
      };
      const onEvent = (e: QmpEvent) => {
        if (e.event !== name) return;
        cleanup();
        resolve(e);
      };
      const onClose = (err: QmpClosedError) => {
        cleanup();
        reject(err);
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new FleetlabError('SUP_ERR_HOST', `no QMP ${name} event within ${timeoutMs} ms on ${this.socketPath}`));
      }, timeoutMs);
      this.on('event', onEvent);
      this.on('close', onClose);
    });
  }

  /** Closes the connection (QEMU keeps running); pending commands are rejected. */
  async close(): Promise<void> {
    if (this.closedError) return;
    await new Promise<void>((resolve) => {
      this.socket.once('close', () => resolve());
      this.closedByUs = true;
      this.closeCause ??= new Error('closed by the client');
      this.socket.end();
      // A peer that never acknowledges the FIN must not hold close() up.
      setTimeout(() => this.socket.destroy(), 1_000).unref();
    });
  }

  private destroy(): void {
    this.closedByUs = true;
    this.closeCause ??= new Error('closed by the client');
    this.socket.destroy();
  }

  private handshake(timeoutMs: number): Promise<void> {
    // QEMU accepts one QMP client at a time; a second one connects but never gets a greeting,
    // so the greeting wait needs its own deadline.
    const greeting = new Promise<QmpGreeting>((resolve, reject) => {
      this.greetingWaiter = { resolve, reject };
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new QmpClosedError(`no QMP greeting from ${this.socketPath} within ${timeoutMs} ms (another client connected?)`)),
        timeoutMs,
      );
    });
    return Promise.race([greeting, timeout])
      .then(async (g) => {
        this.greeting = g;
        await this.execute('qmp_capabilities', undefined, { timeoutMs });
      })
      .finally(() => clearTimeout(timer));
  }

  private pump(): void {
    if (this.inFlight || this.closedError) return;
    const next = this.queue.shift();
    if (!next) return;
    this.inFlight = next;
    const message: Record<string, unknown> = { execute: next.command, id: next.id };
    if (next.args) message.arguments = next.args;
    next.timer = setTimeout(() => {
      if (this.inFlight !== next) return;
      this.inFlight = undefined;
      next.reject(new FleetlabError('SUP_ERR_HOST', `QMP ${next.command} got no answer within ${next.timeoutMs} ms on ${this.socketPath}`));
      this.pump();
    }, next.timeoutMs);
    this.socket.write(`${JSON.stringify(message)}\n`);
  }

  private onData(chunk: string): void {
    this.buffer += chunk;
    let nl: number;
    while ((nl = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, nl).trim();
      this.buffer = this.buffer.slice(nl + 1);
      if (line) this.onMessage(line);
    }
  }

  private onMessage(line: string): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(line) as Record<string, unknown>;
    } catch {
      // Not QMP: nothing sensible to attribute it to, and QEMU never sends partial lines.
      return;
    }
    if ('QMP' in msg) {
      this.greetingWaiter?.resolve(msg.QMP as QmpGreeting);
      this.greetingWaiter = undefined;
      return;
    }
    if (typeof msg.event === 'string') {
      const ts = msg.timestamp as { seconds?: number; microseconds?: number } | undefined;
      const at = ts?.seconds !== undefined ? ts.seconds * 1000 + Math.floor((ts.microseconds ?? 0) / 1000) : Date.now();
      const event: QmpEvent = { event: msg.event, at };
      if (msg.data && typeof msg.data === 'object') event.data = msg.data as Record<string, unknown>;
      this.emit('event', event);
      return;
    }
    const pending = this.inFlight;
    if (!pending || msg.id !== pending.id) return; // late reply to a command that timed out
    this.inFlight = undefined;
    clearTimeout(pending.timer);
    if ('error' in msg) {
      const err = msg.error as { class?: string; desc?: string };
      pending.reject(new QmpCommandError(pending.command, err.class ?? 'GenericError', err.desc ?? 'unknown error'));
    } else {
      pending.resolve(msg.return);
    }
    this.pump();
  }

  private onClose(): void {
    const cause = this.closeCause;
    const err = new QmpClosedError(
      `QMP connection to ${this.socketPath} closed (${cause ? errorText(cause) : 'QEMU exited'})`,
      cause ? { cause } : undefined,
    );
    this.closedError = err;
    this.greetingWaiter?.reject(err);
    this.greetingWaiter = undefined;
    const pending = this.inFlight ? [this.inFlight, ...this.queue] : [...this.queue];
    this.inFlight = undefined;
    this.queue.length = 0;
    for (const p of pending) {
      clearTimeout(p.timer);
      if (p.command === 'quit' && !this.closedByUs) p.resolve({});
      else p.reject(new QmpClosedError(`QMP ${p.command} not answered: ${err.message}`, { cause: err }));
    }
    this.emit('close', err);
  }
}

function openSocket(path: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ path });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(Object.assign(new Error(`connect to ${path} timed out`), { code: 'ETIMEDOUT' }));
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.removeAllListeners('error');
      resolve(socket);
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/** Errors that mean "QEMU is not listening yet" rather than "this will never work". */
function isRetryable(err: unknown): boolean {
  if (err instanceof QmpClosedError) return true; // closed during handshake: QEMU may still be starting
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOENT' || code === 'ECONNREFUSED' || code === 'EAGAIN' || code === 'ECONNRESET';
}
