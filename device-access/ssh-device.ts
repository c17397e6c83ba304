/**
 * One SSH session to a device's OS (ssh2), shared by the targets that reach a real or
 * emulated board over SSH (`board`, `qemu`). Every call runs as its own exec channel on one
 * connection; the connection is opened on first use and opened again after it drops, which
 * it does whenever the device reboots or loses power, so callers never manage it.
 *
 * The host key is not checked: lab boards are reflashed and regenerate it, and the harness
 * only ever talks to the address its config names.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { connect as tcpConnect, createServer, type Socket } from 'node:net';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, type ClientChannel } from 'ssh2';
import { FleetlabError, errorText } from '../src/errors.js';
import { joinStreams } from '../src/join-streams.js';
import { shellQuote } from '../src/shell-quote.js';
import { sleep, until } from '../src/wait.js';
import { journalEntries } from './journal-json.js';
import type { CommandProtocol, ExecResult, FilesProtocol, JournalProtocol } from './protocols.js';
import { filesOverCommands, type RawCommandResult } from './files-over-commands.js';

export interface SshDeviceOptions {
  readonly host: string;
  readonly port?: number;
  readonly username?: string;
  readonly privateKey: Buffer | string;
  /** Handshake plus authentication; default 10 s. */
  readonly readyTimeoutMs?: number;
  /**
   * Keepalive period; default 5 s. A board that loses power never closes its end, so an
   * idle connection is only found dead by unanswered keepalives (3 in a row).
   */
  readonly keepaliveIntervalMs?: number;
}

export interface RunOptions {
  /** Written to the command's stdin, which is then closed (binary-safe). */
  readonly input?: string | Buffer;
  /** Default 60 s; the call then rejects, and the device's `timeout` ends the command just after. */
  readonly timeoutMs?: number;
}

/** A long-running command whose stdout is handed over as it arrives (see `follow`). */
export interface FollowedCommand {
  /** Settles when the command ends, the connection drops or `stop()` gives up waiting: its exit code, null when unknown. */
  readonly done: Promise<number | null>;
  /** Closes the channel: the command ends at its next write (SIGPIPE) or stdin read (EOF). Idempotent. */
  stop(): void;
}

const DEFAULT_RUN_TIMEOUT_MS = 60_000;
/** How long the device lets a command outlive the harness's timeout before `timeout` ends it (TERM, then KILL 5 s later). */
const REMOTE_TIMEOUT_GRACE_MS = 1_000;
/** After stop(), how long `done` waits for the device to confirm the channel closed. */
const STOP_WAIT_MS = 2_000;
// OpenSSH's default MaxSessions is 10; stay under it so a burst of calls rarely sees "open failed".
const MAX_CHANNELS = 8;
/**
 * sshd frees a session a little after the client has seen its channel close, so a burst of
 * short commands can find the server's sessions full even under MAX_CHANNELS (measured: 6 of
 * 100 calls, 20 at a time, each 0.1 s, against OpenSSH 10 with MaxSessions 10). The command
 * never started, so the call waits these pauses in turn and opens its channel again.
 */
const SESSION_RETRY_MS = [50, 100, 200, 400, 800, 1_600] as const;
/** While a remote forward is wanted and the connection is down, how often to try again. */
const FORWARD_RECONNECT_MS = 2_000;

/** A port on the device's loopback served from this host (see `forwardRemote`). */
interface RemoteForward {
  readonly remotePort: number;
  readonly to: { readonly host: string; readonly port: number };
}

function sshError(message: string, cause?: unknown): FleetlabError {
  return new FleetlabError('SUP_ERR_HOST', message, cause === undefined ? undefined : { cause });
}

/** 128 + signal number, as a shell reports a process killed by a signal. */
function signalExitCode(signal: string | undefined): number {
  const number = signal ? (constants.signals as Record<string, number>)[signal] : undefined;
  return number === undefined ? 255 : 128 + number;
}

/** The channel could not be opened on a dead connection: the command never started, so a retry is safe. */
class ChannelNotOpened extends Error {}

/** The server refused the channel on a live connection (its sessions full): the command never started. */
class SessionRefused extends Error {
  constructor(readonly refusal: Error) {
    super(refusal.message);
  }
}

/** ssh2's error for a channel open the server answered with a failure (it carries the reason code). */
function channelOpenRefused(err: Error): boolean {
  return typeof (err as { reason?: unknown }).reason === 'number';
}

/**
 * ssh2's answer to a channel open on a connection that closed under it. Any other refusal
 * (the server's session limit) leaves the connection, and the other calls on it, alone.
 */
function connectionGone(err: Error): boolean {
  return err.message === 'No response from server' || err.message === 'Not connected';
}

export class SshDevice {
  readonly #options: SshDeviceOptions;
  readonly #where: string;
  /** The connection being opened or open; cleared when it closes, so the next call reconnects. */
  #client: Promise<Client> | undefined;
  /** The same connection once ready, so a caller holding it can forget it without awaiting. */
  #ready: Client | undefined;
  #closed = false;
  #channels = 0;
  /** Errors retrying cannot cure (key unreadable, key refused): waitReachable gives up on them at once. */
  readonly #permanent = new WeakSet<Error>();
  readonly #waiting: Array<() => void> = [];
  readonly #forwards = new Map<number, RemoteForward>();
  /** Set by `disconnect()`: the device is being rewound, so no reconnect until the next call. */
  #paused = false;
  #reconnectTimer: NodeJS.Timeout | undefined;

  readonly exec: CommandProtocol;
  readonly files: FilesProtocol;
  readonly journal: JournalProtocol;

  constructor(options: SshDeviceOptions) {
    this.#options = options;
    this.#where = `${options.username ?? 'root'}@${options.host}:${options.port ?? 22}`;
    this.exec = { run: (argv, opts) => this.run(argv, opts) };
    this.files = this.#filesProtocol();
    this.journal = {
      entries: async (opts = {}) => {
        const argv = ['journalctl', '--no-pager', '-o', 'json', '--lines', String(opts.lines ?? 500)];
        if (opts.unit) argv.push('--unit', opts.unit);
        const r = await this.runRaw(argv);
        return journalEntries(r.stdout.toString('utf8'), r.exitCode);
      },
    };
  }

  /** `user@host:port`, for messages. */
  get where(): string {
    return this.#where;
  }

  /** Runs argv on the device; resolves with its exit code whatever it is. */
  async run(argv: readonly string[], options: RunOptions = {}): Promise<ExecResult> {
    const r = await this.runRaw(argv, options);
    return { exitCode: r.exitCode, stdout: r.stdout.toString('utf8'), stderr: r.stderr.toString('utf8') };
  }

  /** Like `run`, with stdout and stderr as bytes (file reads). */
  async runRaw(argv: readonly string[], options: RunOptions = {}): Promise<RawCommandResult> {
    if (argv.length === 0) throw sshError('run: empty argv');
    const timeoutMs = options.timeoutMs ?? DEFAULT_RUN_TIMEOUT_MS;
    // OpenSSH refuses signal requests on root sessions ("session signalling requires privilege
    // separation"), so the harness cannot kill a command it gave up on: the device's own
    // `timeout` does, a little after the harness has rejected.
    const remoteSeconds = Math.ceil((timeoutMs + REMOTE_TIMEOUT_GRACE_MS) / 1000);
    const command = shellQuote(['timeout', '-k', '5', String(remoteSeconds), ...argv]);
    await this.#acquire();
    try {
      // A connection that died unnoticed (device rebooted since the last call) fails the
      // channel open; the command did not start, so one retry on a fresh connection is safe.
      // A live connection whose server refuses the session is tried again after a pause.
      let reconnected = false;
      for (let refused = 0; ; ) {
        const client = await this.#connection();
        try {
          return await this.#exec(client, command, argv, options.input, timeoutMs);
        } catch (err) {
          if (err instanceof SessionRefused && refused < SESSION_RETRY_MS.length) {
            await sleep(SESSION_RETRY_MS[refused++]!);
            continue;
          }
          if (err instanceof SessionRefused) {
            throw sshError(`SSH to ${this.#where}: cannot run ${argv[0]}: the device refused a session ${refused + 1} times (${err.message}); is its sshd's MaxSessions below ${MAX_CHANNELS + 1}?`, err.refusal);
          }
          if (!(err instanceof ChannelNotOpened) || reconnected) {
            throw err instanceof ChannelNotOpened ? sshError(`SSH to ${this.#where}: cannot run ${argv[0]}: ${err.message}`, err) : err;
          }
          reconnected = true;
          this.#drop(client);
        }
      }
    } finally {
      this.#release();
    }
  }

  /**
   * Starts a long-running command and hands its stdout to `onData` as it arrives (observers
   * that stream samples). Not counted against the channel limit of `run`: a follower holds
   * its channel for as long as it runs. No signal can reach it (see runRaw), so a followed
   * command must write regularly or read its stdin, which stays open, to notice `stop()`.
   */
  async follow(argv: readonly string[], onData: (chunk: Buffer) => void): Promise<FollowedCommand> {
    const client = await this.#connection();
    const channel = await new Promise<ClientChannel>((resolve, reject) => {
      try {
        client.exec(shellQuote(argv), (err, ch) => {
          if (!err) return resolve(ch);
          if (connectionGone(err)) this.#drop(client);
          reject(sshError(`SSH to ${this.#where}: cannot run ${argv[0]}: ${err.message}`, err));
        });
      } catch (err) {
        this.#drop(client);
        reject(sshError(`SSH to ${this.#where}: cannot run ${argv[0]}: ${errorText(err)}`, err));
      }
    });
    let exitCode: number | null = null;
    channel.on('exit', (code: number | null, signal?: string) => {
      exitCode = code ?? signalExitCode(signal);
    });
    channel.on('data', onData);
    channel.stderr.resume();
    let settle: (code: number | null) => void = () => undefined;
    const done = new Promise<number | null>((resolve) => {
      settle = resolve;
      channel.on('close', () => resolve(exitCode));
      channel.on('error', () => undefined);
    });
    let stopped = false;
    return {
      done,
      stop: () => {
        if (stopped) return;
        stopped = true;
        channel.close();
        // sshd confirms the close only once the command has exited; a silent one may never.
        setTimeout(() => settle(exitCode), STOP_WAIT_MS).unref();
      },
    };
  }

  /** Opens the connection if none is open (a forward's first user then finds it ready); rejects as a call would. */
  async connect(): Promise<void> {
    await this.#connection();
  }

  /** Resolves once a command runs on the device (boot and reboot waits); rejects after `timeoutMs`. */
  async waitReachable(timeoutMs: number): Promise<void> {
    await until(`SSH to ${this.#where}`, (left) => this.runRaw(['true'], { timeoutMs: Math.max(1000, left) }), (r) => r.exitCode === 0, {
      timeoutMs,
      intervalMs: 500,
      // A closed session or a refused key does not come right by asking again.
      stopOn: (err) => this.#closed || (err instanceof Error && this.#permanent.has(err)),
      fail: (f) => {
        if (f.end !== 'timeout') return undefined;
        const last = f.last === undefined ? undefined : 'error' in f.last ? f.last.error : new Error(`true exited ${f.last.value.exitCode}`);
        return sshError(`SSH to ${this.#where}: not reachable within ${timeoutMs} ms (${last === undefined ? 'no attempt finished' : errorText(last)})`, last);
      },
    });
  }

  /**
   * Serves `127.0.0.1:<remotePort>` on the device from `to` on this host (an SSH remote
   * forward), for as long as this session lives: a registry the device pulls from, without
   * TLS or a daemon setting (dockerd trusts loopback registries). Set up again on every new
   * connection, and the connection is kept up meanwhile, so a device that rebooted or lost
   * power gets it back as soon as SSH answers. Resolves once the device listens; the same
   * forward asked for again is a no-op.
   */
  async forwardRemote(remotePort: number, to: { host: string; port: number }): Promise<void> {
    const known = this.#forwards.get(remotePort);
    if (known && known.to.host === to.host && known.to.port === to.port) return;
    const forward = { remotePort, to };
    // Bound here first, then remembered: a connection opened meanwhile binds only what it finds.
    // As with a command, a connection that died unnoticed is replaced once.
    for (let attempt = 0; ; attempt++) {
      const client = await this.#connection();
      try {
        await this.#bind(client, forward);
        break;
      } catch (err) {
        if (!(err instanceof ChannelNotOpened) || attempt > 0) throw err instanceof ChannelNotOpened ? sshError(`SSH to ${this.#where}: ${err.message}`, err) : err;
        this.#drop(client);
      }
    }
    this.#forwards.set(remotePort, forward);
  }

  /**
   * A unix socket on this host that reaches `remotePath` on the device (an SSH stream-local
   * forward per connection): the device's Engine API for dockerode, with no TCP port opened
   * on the device and no docker CLI needed there. Closed with `close()` of the result.
   */
  async forwardUnixSocket(remotePath: string): Promise<{ path: string; close(): Promise<void> }> {
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-ssh-socket-'));
    const path = join(dir, 'forwarded.sock');
    const sockets = new Set<Socket>();
    const server = createServer((local) => {
      sockets.add(local);
      local.on('error', () => local.destroy());
      local.once('close', () => sockets.delete(local));
      this.#connection()
        .then((client) => client.openssh_forwardOutStreamLocal(remotePath, (err, remote) => {
          if (err) return void local.destroy(err);
          // Either end may go first: dockerode drops a socket mid-answer, the device closes an idle stream.
          joinStreams(local, remote);
        }))
        .catch((err: unknown) => local.destroy(err instanceof Error ? err : new Error(String(err))));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => resolve());
    });
    return {
      path,
      close: async () => {
        for (const s of sockets) s.destroy();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        await rm(dir, { recursive: true, force: true });
      },
    };
  }

  /** Closes the connection; later calls reject. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#reconnectTimer);
    this.#forwards.clear();
    await this.disconnect();
  }

  /**
   * Ends the current connection, not the session: the next call connects again. For a device
   * whose state is about to be rewound (a VM snapshot restore), which would leave the old
   * connection pointing at a session the device no longer has.
   */
  async disconnect(): Promise<void> {
    this.#paused = true;
    const pending = this.#client;
    this.#client = undefined;
    this.#ready = undefined;
    const client = await pending?.catch(() => undefined);
    client?.end();
  }

  #connection(): Promise<Client> {
    if (this.#closed) return Promise.reject(sshError(`SSH to ${this.#where}: session closed`));
    this.#paused = false;
    this.#client ??= this.#connect();
    return this.#client;
  }

  #bind(client: Client, forward: RemoteForward): Promise<void> {
    return new Promise((resolve, reject) => {
      const failed = (err: Error) => {
        if (connectionGone(err)) reject(new ChannelNotOpened(err.message));
        else reject(sshError(`SSH to ${this.#where}: cannot listen on the device's 127.0.0.1:${forward.remotePort} (${err.message}); is that port taken there, or AllowTcpForwarding off in its sshd_config?`, err));
      };
      try {
        client.forwardIn('127.0.0.1', forward.remotePort, (err) => (err ? failed(err) : resolve()));
      } catch (err) {
        failed(err instanceof Error ? err : new Error(String(err)));
      }
    });
  }

  /** A connection the device opened to a forwarded port: joined to its host end. */
  #forwarded(info: { destPort: number }, accept: () => ClientChannel, refuse: () => void): void {
    const forward = this.#forwards.get(info.destPort);
    if (!forward) return refuse();
    joinStreams(accept(), tcpConnect(forward.to.port, forward.to.host));
  }

  /** With forwards wanted, a lost connection is opened again in the background (bounded by `close`). */
  #keepForwards(): void {
    if (this.#closed || this.#paused || this.#forwards.size === 0 || this.#reconnectTimer) return;
    this.#reconnectTimer = setTimeout(() => {
      this.#reconnectTimer = undefined;
      if (this.#closed || this.#paused || this.#client) return;
      this.#connection().catch(() => this.#keepForwards());
    }, FORWARD_RECONNECT_MS);
    this.#reconnectTimer.unref();
  }

  /** Forgets `client` if it is still the current connection, so the next call opens a new one. */
  #drop(client: Client): void {
    if (this.#ready === client) {
      this.#ready = undefined;
      this.#client = undefined;
    }
    client.destroy();
  }

  #connect(): Promise<Client> {
    const o = this.#options;
    const attempt = new Promise<Client>((resolve, reject) => {
      const client = new Client();
      let ready = false;
      client.on('ready', () => {
        ready = true;
        if (this.#client === attempt) this.#ready = client;
        for (const forward of this.#forwards.values()) this.#bind(client, forward).catch(() => undefined);
        resolve(client);
      });
      client.on('tcp connection', (info, accept, refuse) => this.#forwarded(info, accept, refuse));
      client.on('error', (err: Error & { level?: string }) => {
        // After ready, errors end the connection and 'close' follows; calls in flight see their channel close.
        if (ready) return;
        const failure = sshError(`SSH to ${this.#where} failed: ${err.message}`, err);
        if (err.level === 'client-authentication') this.#permanent.add(failure);
        reject(failure);
      });
      client.on('close', () => {
        if (!ready) reject(sshError(`SSH to ${this.#where} failed: connection closed during the handshake`));
        if (this.#client === attempt) this.#client = undefined;
        if (this.#ready === client) this.#ready = undefined;
        this.#keepForwards();
      });
      try {
        client.connect({
          host: o.host,
          port: o.port ?? 22,
          username: o.username ?? 'root',
          privateKey: o.privateKey,
          readyTimeout: o.readyTimeoutMs ?? 10_000,
          keepaliveInterval: o.keepaliveIntervalMs ?? 5_000,
          keepaliveCountMax: 3,
          hostVerifier: () => true,
        });
      } catch (err) {
        // ssh2 throws here, before any I/O, on a key it cannot parse.
        const failure = sshError(`SSH to ${this.#where}: ${errorText(err)}`, err);
        this.#permanent.add(failure);
        reject(failure);
      }
    });
    // A failed attempt is not kept: the next call tries again (the device may be booting).
    attempt.catch(() => {
      if (this.#client === attempt) this.#client = undefined;
    });
    return attempt;
  }

  #exec(client: Client, command: string, argv: readonly string[], input: string | Buffer | undefined, timeoutMs: number): Promise<RawCommandResult> {
    return new Promise<RawCommandResult>((resolve, reject) => {
      const stdout: Buffer[] = [];
      const stderr: Buffer[] = [];
      let exitCode: number | undefined;
      let settled = false;
      let channel: ClientChannel | undefined;
      const finish = (err: Error | undefined, result?: RawCommandResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) reject(err);
        else resolve(result!);
      };
      const timer = setTimeout(() => {
        channel?.close();
        finish(sshError(`SSH to ${this.#where}: ${argv[0]} did not finish within ${timeoutMs} ms`));
      }, timeoutMs);
      try {
        client.exec(command, (err, ch) => {
          if (err) return finish(connectionGone(err) ? new ChannelNotOpened(err.message) : channelOpenRefused(err) ? new SessionRefused(err) : sshError(`SSH to ${this.#where}: cannot run ${argv[0]}: ${err.message}`, err));
          channel = ch;
          ch.on('data', (chunk: Buffer) => stdout.push(chunk));
          ch.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
          ch.on('exit', (code: number | null, signal?: string) => {
            exitCode = code ?? signalExitCode(signal);
          });
          ch.on('error', (e: Error) => finish(sshError(`SSH to ${this.#where}: ${argv[0]}: ${e.message}`, e)));
          ch.on('close', () => {
            if (exitCode === undefined) {
              // The channel closed without an exit status: the connection went away under it.
              finish(sshError(`SSH to ${this.#where}: connection lost while running ${argv[0]}`));
              return;
            }
            finish(undefined, { exitCode, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) });
          });
          // Always close stdin, or a command reading it would wait forever.
          if (input === undefined) ch.end();
          else ch.end(input);
        });
      } catch (err) {
        // exec throws "Not connected" when the socket is already gone.
        finish(new ChannelNotOpened(errorText(err)));
      }
    });
  }

  async #acquire(): Promise<void> {
    if (this.#channels < MAX_CHANNELS) {
      this.#channels++;
      return;
    }
    await new Promise<void>((r) => this.#waiting.push(r));
  }

  #release(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#channels--;
  }

  #filesProtocol(): FilesProtocol {
    return filesOverCommands((argv, options) => this.runRaw(argv, options), this.#where, sshError);
  }
}
