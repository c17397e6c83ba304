/**
 * A private system-like D-Bus daemon for simulated devices and tests: the host peer exports
 * systemd's interfaces on it and the supervisor's host adapter talks to it exactly as it
 * talks to the real system bus on a board. Needs no root: the config sets no <user>.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { stoppedWithParent } from '../../src/processes.js';
import { FleetlabError, errorText } from '../../src/errors.js';
import { requireTool, tools } from '../../src/tools.js';
import { DbusClient } from '../../src/supervisor/adapters/dbus-client.js';

export interface PrivateBus extends AsyncDisposable {
  /** The address dbus-daemon printed (`unix:path=...,guid=...`); pass it as busAddress. */
  readonly address: string;
  readonly socketPath: string;
  readonly pid: number;
  /** Terminates the daemon and waits until it has exited. Idempotent. */
  stop(): Promise<void>;
  /** Ends the daemon at once (a forced stop); `stop` then finds it gone. */
  kill(): void;
}

export interface PrivateBusOptions {
  /** Directory for the config file and the socket; created when missing. */
  dir: string;
  /** The daemon's environment (default: this process's), e.g. with a session label. */
  env?: NodeJS.ProcessEnv;
  /**
   * Its own process group, out of reach of a Ctrl-C meant for its owner, which stops it after
   * the programs that use it.
   */
  detached?: boolean;
}

// sockaddr_un.sun_path is 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH = 107;

// dbus-next does not unescape %xx in addresses, so only paths that need no escaping work.
const PLAIN_ADDRESS_VALUE = /^[-0-9A-Za-z_/.]+$/;

function busConfig(socketPath: string): string {
  // Like the system bus (type, EXTERNAL auth) but open: any local user may own any name and
  // call anything, because the only clients are the simulated device's own processes.
  return `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=${socketPath}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
</busconfig>
`;
}

function waitForExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolvePromise) => child.once('exit', () => resolvePromise()));
}

/** Resolves with the first line dbus-daemon prints on stdout (its address). */
function readAddress(child: ChildProcess, stderr: () => string): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    let out = '';
    const onData = (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const newline = out.indexOf('\n');
      if (newline >= 0) {
        cleanup();
        resolvePromise(out.slice(0, newline).trim());
      }
    };
    const onExit = (code: number | null, signal: NodeJS.Signals | null) => {
      cleanup();
      reject(
        new FleetlabError(
          'SUP_ERR_HOST',
          `dbus-daemon exited (${signal ?? `code ${code}`}) before it was listening: ${stderr().trim() || 'no output'}`,
        ),
      );
    };
    const onError = (err: Error) => {
      cleanup();
      reject(new FleetlabError('SUP_ERR_HOST', `dbus-daemon could not be started: ${errorText(err)}`, { cause: err }));
    };
    const cleanup = () => {
      child.stdout?.off('data', onData);
      child.off('exit', onExit);
      child.off('error', onError);
    };
    child.stdout?.on('data', onData);
    child.once('exit', onExit);
    child.once('error', onError);
  });
}

/** Round trip to the bus driver: the daemon is ready when it answers a method call. */
async function waitUntilAnswering(address: string): Promise<void> {
  const client = new DbusClient({ busAddress: address });
  try {
    await client.call({
      destination: 'org.freedesktop.DBus',
      path: '/org/freedesktop/DBus',
      interface: 'org.freedesktop.DBus',
      member: 'GetId',
    });
  } finally {
    await client.close();
  }
}

export async function startPrivateBus(options: PrivateBusOptions): Promise<PrivateBus> {
  const daemon = requireTool(tools.dbusDaemon);
  const dir = resolve(options.dir);
  const socketPath = join(dir, 'system_bus_socket');
  if (socketPath.length > MAX_SOCKET_PATH) {
    throw new FleetlabError('SUP_ERR_HOST', `bus socket path is longer than ${MAX_SOCKET_PATH} bytes: ${socketPath}`);
  }
  if (!PLAIN_ADDRESS_VALUE.test(socketPath)) {
    throw new FleetlabError(
      'SUP_ERR_HOST',
      `bus socket path may only contain letters, digits and - _ / . (D-Bus address escaping is not supported by dbus-next): ${socketPath}`,
    );
  }
  await mkdir(dir, { recursive: true });
  const configPath = join(dir, 'bus.conf');
  await writeFile(configPath, busConfig(socketPath));

  const argv = [`--config-file=${configPath}`, '--nofork', '--nopidfile', '--nosyslog', '--print-address=1'];
  // A bus that is not detached belongs to this process: it ends with it, even by kill -9.
  const child = spawn(...(options.detached ? [daemon, argv] as const : stoppedWithParent(daemon, argv)), {
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(options.env ? { env: options.env } : {}),
    detached: options.detached ?? false,
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    // Keep only the tail: it is for error messages, and the daemon may run for hours.
    stderr = (stderr + chunk.toString('utf8')).slice(-4096);
  });

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      const exited = waitForExit(child);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    })();
    return stopping;
  };

  try {
    const address = await readAddress(child, () => stderr);
    await waitUntilAnswering(address);
    if (child.pid === undefined) throw new FleetlabError('SUP_ERR_HOST', 'dbus-daemon has no pid');
    const pid = child.pid;
    const kill = () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    };
    return { address, socketPath, pid, stop, kill, [Symbol.asyncDispose]: stop };
  } catch (err) {
    // A daemon that never became ready is torn down before the error is rethrown.
    await stop();
    throw err;
  }
}
