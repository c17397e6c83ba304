/**
 * The SSH layer of the board/qemu targets against a real OpenSSH server: a private sshd on
 * loopback with its own host key and authorized key, run as root like a lab board's. Killing
 * it with its per-connection processes is what a reboot does to the harness's connection.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, get as httpGet, type Server } from 'node:http';
import { connect, createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FleetlabError } from '../src/errors.js';
import { findTool, missingToolError, type ToolSpec } from '../src/tools.js';
import { journalEntries } from '../device-access/journal-json.js';
import { checkBindings } from '../hil/targets/bindings.js';
import { boardCapabilities, loadBoardConfig, parseBoardConfig, type BoardConfig } from '../hil/lab/board-config.js';
import { startBoard } from '../hil/targets/board.js';
import { observeLedByCommand } from '../hil/targets/drivers/led-command.js';
import { gpioNumberOnBoard, observeSysfsLed } from '../hil/targets/drivers/led-sysfs.js';
import { sshObserve } from '../hil/targets/drivers/observe-ssh.js';
import { readHostBaseline, restoreHostFiles } from '../device-access/ssh-reset.js';
import { SshDevice } from '../device-access/ssh-device.js';
import { readBundle } from '../hil/capture/bundle.js';
import { runCapture } from '../hil/harness/capture-command.js';
import { showBundle } from '../hil/capture/show.js';
import { SimDevice } from '../sim/device.js';
import { removeDeviceLeftovers } from '../sim/device-leftovers.js';
import { ensureTestImages } from '../sim/images/test-images.js';
import { prepareReplayOnBoard } from '../hil/capture/replay.js';
import Docker from 'dockerode';
import { shellQuote } from '../src/shell-quote.js';
import { freePort } from '../src/free-port.js';

const sshdTool: ToolSpec = { candidates: ['/usr/sbin/sshd'], debianPackage: 'openssh-server' };
const sshKeygenTool: ToolSpec = { candidates: ['ssh-keygen'], debianPackage: 'openssh-client' };


function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

/** Every descendant of `pid`, from /proc (sshd's per-connection children call setsid, so no group kill reaches them). */
function descendants(pid: number): number[] {
  const parentOf = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
      parentOf.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // exited meanwhile
    }
  }
  const found: number[] = [];
  const walk = (p: number) => {
    for (const [child, parent] of parentOf) if (parent === p) (found.push(child), walk(child));
  };
  walk(pid);
  return found;
}

/** Processes of this machine running an observer's loop over SSH (its $0 is fleetlab-led, or fleetlab-usage for the timeline's). */
function observerProcesses(name = 'fleetlab-led'): number[] {
  return readdirSync('/proc')
    .filter((pid) => /^[0-9]+$/.test(pid))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(name);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** A private sshd on 127.0.0.1:port, root login by key only. */
class PrivateSshd {
  #child: ChildProcess | undefined;
  #stderr = '';

  constructor(readonly dir: string, readonly port: number) {}

  static async create(dir: string, port: number, clientPublicKey: string, extraConfig: readonly string[] = []): Promise<PrivateSshd> {
    const keygen = findTool(sshKeygenTool);
    if (!keygen) throw missingToolError(sshKeygenTool);
    const hostKey = join(dir, 'host_ed25519');
    const r = spawnSync(keygen, ['-q', '-t', 'ed25519', '-N', '', '-f', hostKey]);
    if (r.status !== 0) throw new Error(`ssh-keygen: ${r.stderr}`);
    await writeFile(join(dir, 'authorized_keys'), clientPublicKey, { mode: 0o600 });
    await writeFile(
      join(dir, 'sshd_config'),
      [
        `Port ${port}`,
        'ListenAddress 127.0.0.1',
        `HostKey ${hostKey}`,
        'PidFile none',
        'UsePAM no',
        'StrictModes no',
        `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
        'PermitRootLogin prohibit-password',
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'LogLevel ERROR',
        // bash sources ~/.bashrc for a command sshd runs when it is the top-level shell. This
        // host's root has one that starts pyenv (a hundred processes, half a second for every
        // command); a lab board's root does not. SHLVL=1 makes each command's bash the second level.
        'SetEnv SHLVL=1',
        ...extraConfig,
        '',
      ].join('\n'),
    );
    // Debian's unit creates the privilege separation directory; a private sshd needs it too.
    mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
    return new PrivateSshd(dir, port);
  }

  async start(): Promise<void> {
    const sshd = findTool(sshdTool);
    if (!sshd) throw missingToolError(sshdTool);
    const child = spawn(sshd, ['-D', '-e', '-f', join(this.dir, 'sshd_config')], { stdio: ['ignore', 'ignore', 'pipe'] });
    child.stderr!.on('data', (c: Buffer) => (this.#stderr += c.toString('utf8')));
    this.#child = child;
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`sshd exited ${child.exitCode}: ${this.#stderr}`);
      if (await accepts(this.port)) return;
      await sleep(50);
    }
    throw new Error(`sshd did not listen on ${this.port} within 10 s: ${this.#stderr}`);
  }

  /** Kills the listener and every session it spawned: the harness's connection drops. */
  async stop(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (!child?.pid || child.exitCode !== null) return;
    for (const pid of descendants(child.pid)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }
}

const sshdMissing = findTool(sshdTool) === undefined;

describe('shellQuote', () => {
  it('single-quotes every word, quotes inside included', () => {
    expect(shellQuote(['echo', "it's", '$HOME'])).toBe(`'echo' 'it'\\''s' '$HOME'`);
  });
});

describe('SshDevice against a real sshd', () => {
  if (sshdMissing) {
    it('needs sshd', () => {
      throw missingToolError(sshdTool);
    });
    return;
  }
  let dir: string;
  let sshd: PrivateSshd;
  let privateKey: Buffer;
  let ssh: SshDevice;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-sshd-'));
    const keygen = findTool(sshKeygenTool);
    if (!keygen) throw missingToolError(sshKeygenTool);
    const clientKey = join(dir, 'client_ed25519');
    const r = spawnSync(keygen, ['-q', '-t', 'ed25519', '-N', '', '-f', clientKey]);
    if (r.status !== 0) throw new Error(`ssh-keygen: ${r.stderr}`);
    privateKey = readFileSync(clientKey);
    sshd = await PrivateSshd.create(dir, await freePort(), readFileSync(`${clientKey}.pub`, 'utf8'));
    await sshd.start();
    ssh = new SshDevice({ host: '127.0.0.1', port: sshd.port, username: 'root', privateKey, readyTimeoutMs: 5000 });
  });

  afterAll(async () => {
    await ssh?.close();
    await sshd?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('runs argv and reports the exit code and both streams without rejecting', async () => {
    expect(await ssh.run(['true'])).toEqual({ exitCode: 0, stdout: '', stderr: '' });
    const r = await ssh.run(['sh', '-c', 'echo out; echo err >&2; exit 3']);
    expect(r).toEqual({ exitCode: 3, stdout: 'out\n', stderr: 'err\n' });
    const missing = await ssh.run(['/nonexistent/tool']);
    expect(missing.exitCode).toBe(127);
  });

  it('passes argv through the remote shell untouched', async () => {
    const words = ['a b', "it's", '$HOME', '`id`', '"q"', ';', '*', 'x\\y', '', '\n'];
    const r = await ssh.run(['printf', '[%s]', ...words]);
    expect(r.stdout).toBe(words.map((w) => `[${w}]`).join(''));
  });

  it('writes input to stdin and closes it', async () => {
    expect((await ssh.run(['cat'], { input: 'hello\nworld' })).stdout).toBe('hello\nworld');
    // No input: stdin is closed at once, so a reader ends instead of hanging.
    expect((await ssh.run(['cat'])).stdout).toBe('');
    expect((await ssh.run(['wc', '-c'], { input: Buffer.alloc(100_000, 7) })).stdout.trim()).toBe('100000');
  });

  it('runs concurrent calls on the one connection, opening a channel again when sshd has not yet freed a finished session', async () => {
    // Without the retry, about 6 calls in 100 of these bursts failed with "open failed".
    for (let round = 0; round < 3; round++) {
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => ssh.run(['sh', '-c', `sleep 0.1; echo ${i}`])));
      expect(results.map((r) => r.stdout.trim())).toEqual(Array.from({ length: 20 }, (_, i) => String(i)));
    }
  });

  it('rejects a command that outlives its timeout', async () => {
    const started = Date.now();
    await expect(ssh.run(['sleep', '30'], { timeoutMs: 300 })).rejects.toThrow(/sleep did not finish within 300 ms/);
    expect(Date.now() - started).toBeLessThan(5000);
    expect((await ssh.run(['echo', 'still fine'])).stdout).toBe('still fine\n');
    // No signal reaches a root session: the device's own timeout ends the command soon after.
    await expect(ssh.run(['sh', '-c', 'sleep 30; : fleetlab-abandoned'], { timeoutMs: 200 })).rejects.toThrow(/did not finish/);
    let left = '';
    for (let i = 0; i < 40; i++) {
      left = (await ssh.run(['pgrep', '-f', 'fleetlab-abandone[d]'])).stdout;
      if (left === '') break;
      await sleep(250);
    }
    expect(left).toBe('');
  });

  it('files: binary round trip, list, exists, remove', async () => {
    const root = join(dir, 'files');
    const bytes = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), randomBytes(300_000)]);
    await ssh.files.write(join(root, 'deep', 'blob.bin'), bytes);
    expect((await ssh.files.read(join(root, 'deep', 'blob.bin'))).equals(bytes)).toBe(true);
    await ssh.files.write(join(root, "it's a file"), 'text');
    expect((await ssh.files.read(join(root, "it's a file"))).toString()).toBe('text');
    expect(await ssh.files.list(root)).toEqual(['deep', "it's a file"]);
    expect(await ssh.files.exists(join(root, 'deep'))).toBe(true);
    await ssh.files.remove(join(root, 'deep'));
    expect(await ssh.files.exists(join(root, 'deep'))).toBe(false);
    await expect(ssh.files.read(join(root, 'deep', 'blob.bin'))).rejects.toThrow(/read .*blob\.bin on root@127\.0\.0\.1:\d+: .*No such file/);
    await expect(ssh.files.list(join(root, 'absent'))).rejects.toThrow(/list/);
  });

  it('host baseline: read as found, then put back after the supervisor changed the files', async () => {
    const root = join(dir, 'host');
    const paths = { hostname: join(root, 'hostname'), proxyConfigDir: join(root, 'boot', 'system-proxy'), bootConfig: join(root, 'boot', 'config.txt') };
    await ssh.files.write(paths.hostname, 'lab-pi-7\n');
    await ssh.files.write(join(paths.proxyConfigDir, 'no_proxy'), '10.0.0.0/8\n');
    const baseline = await readHostBaseline(ssh, paths);
    expect(baseline.hostname).toBe('lab-pi-7');
    expect([...baseline.files.keys()].sort()).toEqual([paths.bootConfig, join(paths.proxyConfigDir, 'no_proxy')].sort());
    expect(baseline.files.get(paths.bootConfig)).toBeUndefined();
    // What a spec file leaves: a boot config, a changed no_proxy (a new redsocks.conf is wiped with the directory).
    await ssh.files.write(paths.bootConfig, 'dtoverlay=gpio-fan\n');
    await ssh.files.write(join(paths.proxyConfigDir, 'no_proxy'), '192.168.0.0/16\n');
    await restoreHostFiles(ssh, baseline);
    expect(await ssh.files.exists(paths.bootConfig)).toBe(false);
    expect((await ssh.files.read(join(paths.proxyConfigDir, 'no_proxy'))).toString()).toBe('10.0.0.0/8\n');
    // Without a hostname file, the running hostname is the board's.
    await ssh.files.remove(paths.hostname);
    expect((await readHostBaseline(ssh, paths)).hostname).toBe((await ssh.run(['hostname'])).stdout.trim());
  });

  it('journal: entries is an array (empty without journald) and the parser reads journalctl JSON', async () => {
    const entries = await ssh.journal.entries({ lines: 5 });
    expect(Array.isArray(entries)).toBe(true);
    expect(entries.length).toBeLessThanOrEqual(5);
    const line = JSON.stringify({ MESSAGE: 'hi', _SYSTEMD_UNIT: 'fleetlab-supervisor.service', __REALTIME_TIMESTAMP: '1700000000000000' });
    const binary = JSON.stringify({ MESSAGE: [104, 105], __REALTIME_TIMESTAMP: '1700000000000001' });
    expect(journalEntries(`${line}\n${binary}\n`, 0)).toEqual([
      { unit: 'fleetlab-supervisor.service', message: 'hi', realtimeUs: 1700000000000000 },
      { message: 'hi', realtimeUs: 1700000000000001 },
    ]);
  });

  it('follows a long-running command and stops it', async () => {
    const seen: string[] = [];
    const followed = await ssh.follow(['sh', '-c', 'i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done'], (c) => seen.push(c.toString()));
    const count = () => seen.join('').split('\n').filter(Boolean).length;
    for (let i = 0; i < 200 && count() < 3; i++) await sleep(50);
    followed.stop();
    await followed.done;
    expect(count()).toBeGreaterThanOrEqual(3);
  });

  it('a forwarded unix socket whose client hangs up mid-stream ends that stream only (no EPIPE thrown)', async () => {
    // The device end streams without pause, as the engine does a log or an image; the host end
    // reads one chunk and hangs up. 20 times: the write into the closed end races the close.
    const remotePath = join(dir, 'streaming.sock');
    const chunk = Buffer.alloc(64 * 1024, 7);
    const remote = createNetServer((s) => {
      s.on('error', () => s.destroy());
      const pump = () => {
        while (!s.destroyed && s.write(chunk));
        if (!s.destroyed) s.once('drain', pump);
      };
      pump();
    });
    await new Promise<void>((resolve) => remote.listen(remotePath, resolve));
    const forward = await ssh.forwardUnixSocket(remotePath);
    const errors: unknown[] = [];
    const onUncaught = (err: unknown) => errors.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      for (let i = 0; i < 20; i++) {
        await new Promise<void>((resolve, reject) => {
          const client = connect(forward.path);
          client.once('error', reject);
          client.once('data', () => {
            client.destroy();
            resolve();
          });
        });
      }
      // The forward still serves a new client after the hang-ups.
      const bytes = await new Promise<number>((resolve, reject) => {
        const client = connect(forward.path);
        client.once('error', reject);
        client.once('data', (data: Buffer) => (client.destroy(), resolve(data.length)));
      });
      expect(bytes).toBeGreaterThan(0);
      await sleep(300);
      expect(errors.map(String)).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
      await forward.close();
      remote.close();
    }
  });

  it('observes a sysfs LED line by chip label over SSH', async () => {
    const gpio = join(dir, 'gpio');
    await mkdir(join(gpio, 'gpiochip512'), { recursive: true });
    await mkdir(join(gpio, 'gpiochip0'), { recursive: true });
    await mkdir(join(gpio, 'gpio529'), { recursive: true });
    for (const [chip, label, base, n] of [['gpiochip512', 'pinctrl-bcm2835', 512, 54], ['gpiochip0', 'raspberrypi-exp-gpio', 0, 8]] as const) {
      await writeFile(join(gpio, chip, 'label'), `${label}\n`);
      await writeFile(join(gpio, chip, 'base'), `${base}\n`);
      await writeFile(join(gpio, chip, 'ngpio'), `${n}\n`);
    }
    const value = join(gpio, 'gpio529', 'value');
    await writeFile(value, '0\n');
    const since = Date.now();
    const led = await observeSysfsLed(ssh, { chip: 'pinctrl-bcm2835', offset: 17 }, 10, gpio);
    try {
      expect(led.line).toMatch(/gpio 529, pinctrl-bcm2835 pin 17/);
      await sleep(400);
      for (const v of ['1', '0', '1']) {
        await writeFile(value, `${v}\n`);
        await sleep(250);
      }
      const transitions = await led.transitions(since);
      expect(transitions.map((t) => t.value)).toEqual([0, 1, 0, 1]);
      expect(transitions.every((t, i) => i === 0 || t.at > transitions[i - 1]!.at)).toBe(true);
      expect(await led.level()).toBe(1);
      // One process samples, and forks nothing per sample (a `sleep` child would show up).
      const [loop, ...others] = observerProcesses();
      expect(others).toEqual([]);
      for (let i = 0; i < 20; i++) {
        expect(descendants(loop!)).toEqual([]);
        await sleep(7);
      }
      expect(observerProcesses()).toEqual([loop]);
    } finally {
      await led.stop();
    }
    // Closing the channel ends the loop on the device: it reads EOF where it paused.
    for (let i = 0; i < 40 && observerProcesses().length > 0; i++) await sleep(50);
    expect(observerProcesses()).toEqual([]);
    await expect(observeSysfsLed(ssh, { chip: 'nope', offset: 1 }, 10, gpio)).rejects.toThrow(/chip "nope" not found in the board's \/sys\/class\/gpio; chips present: .*pinctrl-bcm2835 \(base 512\)/);
  });

  it('opens a new connection after the server restarts (the device rebooted)', async () => {
    expect((await ssh.run(['echo', 'before'])).stdout).toBe('before\n');
    const pidBefore = (await ssh.run(['sh', '-c', 'echo $PPID'])).stdout;
    await sshd.stop();
    await expect(ssh.run(['true'])).rejects.toThrow(FleetlabError);
    await sshd.start();
    expect((await ssh.run(['echo', 'after'])).stdout).toBe('after\n');
    expect((await ssh.run(['sh', '-c', 'echo $PPID'])).stdout).not.toBe(pidBefore);
  });

  it('disconnect ends the connection, not the session: the next call opens a new one', async () => {
    // Client address and port: the same for every channel of one TCP connection.
    const connection = async () => (await ssh.run(['sh', '-c', 'echo $SSH_CONNECTION'])).stdout;
    const before = await connection();
    expect(before).toMatch(/^127\.0\.0\.1 \d+ /);
    expect(await connection()).toBe(before);
    await ssh.disconnect();
    expect(await connection()).not.toBe(before);
  });

  it('opens a new connection on the first call after a silent drop', async () => {
    await sshd.stop();
    await sshd.start();
    // No call saw the drop: this one finds the old connection dead and reconnects.
    expect((await ssh.run(['echo', 'again'])).stdout).toBe('again\n');
  });

  it("forwards a port on the device's loopback to this host, and brings it back after the connection drops", async () => {
    const server: Server = createServer((_req, res) => res.end('from the host'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const hostPort = (server.address() as { port: number }).port;
    try {
      const devicePort = await freePort();
      await ssh.forwardRemote(devicePort, { host: '127.0.0.1', port: hostPort });
      // The device here is this machine through sshd: its loopback is ours.
      const fetched = await ssh.run(['busybox', 'wget', '-q', '-O-', `http://127.0.0.1:${devicePort}/`]);
      expect(fetched).toMatchObject({ exitCode: 0, stdout: 'from the host' });
      // Asked again: a no-op. The same device port for somewhere else: the device refuses it, said so.
      await ssh.forwardRemote(devicePort, { host: '127.0.0.1', port: hostPort });
      await expect(ssh.forwardRemote(devicePort, { host: '127.0.0.1', port: hostPort + 1 })).rejects.toThrow(`cannot listen on the device's 127.0.0.1:${devicePort}`);

      await sshd.stop();
      // The session's processes were sent SIGKILL; their listener goes with them, not at once.
      let gone = false;
      for (let i = 0; i < 50 && !gone; i++) {
        gone = !(await accepts(devicePort));
        if (!gone) await sleep(100);
      }
      expect(gone).toBe(true);
      await sshd.start();
      // No call is made: the session reconnects by itself because a forward is wanted.
      let back = false;
      for (let i = 0; i < 100 && !back; i++) {
        back = await accepts(devicePort);
        if (!back) await sleep(100);
      }
      expect(back).toBe(true);
      expect((await ssh.run(['busybox', 'wget', '-q', '-O-', `http://127.0.0.1:${devicePort}/`])).stdout).toBe('from the host');
    } finally {
      server.close();
    }
  });

  it("the timeline's observer has a session of its own: it rests while the board is down and comes back after, beside the test's connection", async () => {
    const sleeper = spawn('sleep', ['600'], { stdio: 'ignore' });
    const pidFile = join(dir, 'supervisor.pid');
    await writeFile(pidFile, `${sleeper.pid}\n`);
    const engineSocket = join(dir, 'engine.sock');
    const engine: Server = createServer((_req, res) => res.end('the engine'));
    await new Promise<void>((r) => engine.listen(engineSocket, r));
    const observe = sshObserve({ reach: () => ({ host: '127.0.0.1', port: sshd.port, username: 'root', privateKey }), supervisorPid: `cat ${pidFile}`, engineSocketPath: engineSocket, console: () => undefined, restMs: 1000 });
    const sampled = async (want: boolean) => {
      for (let i = 0; i < 100; i++) {
        const u = await observe.supervisorUsage!();
        if (Boolean(u) === want) return u;
        await sleep(100);
      }
      throw new Error(`no ${want ? '' : 'empty '}sample within 10 s`);
    };
    const viaEngine = async () => {
      const path = await observe.engineSocket!();
      return new Promise<string>((resolve, reject) => {
        httpGet({ socketPath: path, path: '/' }, (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString('utf8')));
          res.on('end', () => resolve(body));
        }).on('error', reject);
      });
    };
    try {
      const first = await sampled(true);
      expect(first!.rssBytes).toBeGreaterThan(0);
      expect(first!.cpuSeconds).toBeGreaterThanOrEqual(0);
      expect(await viaEngine()).toBe('the engine');
      // The observer's session is not the test's: the test ending its own leaves the samples going.
      await ssh.disconnect();
      expect((await ssh.run(['echo', 'test'])).stdout).toBe('test\n');
      await sampled(true);

      await sshd.stop();
      await sampled(false);
      // Down: its next ask fails, and then it rests, answering at once and saying why.
      await expect(observe.engineSocket!()).rejects.toThrow(FleetlabError);
      const resting = Date.now();
      await expect(observe.engineSocket!()).rejects.toThrow(/rests after a failed attempt/);
      expect(Date.now() - resting).toBeLessThan(500);

      await sshd.start();
      // The test's connection is not held up by the observer's attempts.
      expect((await ssh.run(['echo', 'back'])).stdout).toBe('back\n');
      // After its rest the observer is back: samples and the engine's socket.
      expect((await sampled(true))!.rssBytes).toBeGreaterThan(0);
      let engineBack: string | undefined;
      for (let i = 0; i < 30 && engineBack === undefined; i++) engineBack = await viaEngine().catch(() => sleep(100).then(() => undefined));
      expect(engineBack).toBe('the engine');
      expect(observerProcesses('fleetlab-usage')).toHaveLength(1);
    } finally {
      await observe.close!();
      sleeper.kill();
      engine.close();
    }
    // Closing ends the loop on the device: it reads EOF where it paused.
    for (let i = 0; i < 40 && observerProcesses('fleetlab-usage').length > 0; i++) await sleep(50);
    expect(observerProcesses('fleetlab-usage')).toEqual([]);
  });

  it('waitReachable waits for a server that comes up later', async () => {
    await sshd.stop();
    const waiting = ssh.waitReachable(15_000);
    await sleep(1500);
    await sshd.start();
    await waiting;
    expect((await ssh.run(['true'])).exitCode).toBe(0);
  });

  it('the board target connects, reads its identity from the store and checks its bindings', async () => {
    const dataDir = join(dir, 'board-data');
    await mkdir(dataDir, { recursive: true });
    await writeFile(join(dataDir, 'device.json'), JSON.stringify({ uuid: 'u-1234', deviceKey: 'k-secret', generation: 3 }));
    await writeFile(join(dir, 'client_key_copy'), privateKey, { mode: 0o600 });
    const api: Server = createServer((req, res) => res.writeHead(req.url === '/ping' ? 200 : 404).end('OK'));
    await new Promise<void>((r) => api.listen(0, '127.0.0.1', () => r()));
    const apiPort = (api.address() as { port: number }).port;
    const config = parseBoardConfig(
      // No reset: it would stop units and remove containers on this machine.
      { host: '127.0.0.1', sshPort: sshd.port, privateKey: 'client_key_copy', apiUrl: `http://127.0.0.1:${apiPort}`, dataDir, reset: false, led: { gpio: 529, observe: { command: "printf '0\\n1\\n'; sleep 30" } } },
      { source: 'test', baseDir: dir },
    );
    const device = await startBoard(config);
    try {
      checkBindings({ name: 'board', provides: boardCapabilities(config), start: async () => device }, device);
      expect([...device.capabilities].sort()).toEqual(['api', 'disk.fill', 'engine.restart', 'exec', 'files', 'files.volumes', 'images', 'journal', 'led', 'power.reboot', 'supervisor.kill']);
      expect(device.api.identity).toMatchObject({ uuid: 'u-1234', apiKey: 'k-secret', vendor: 'platform', lockRoot: '/tmp/fleetlab/locks', hostPaths: { hostname: '/etc/hostname', proxyConfigDir: '/mnt/boot/system-proxy', bootConfig: '/mnt/boot/config.txt' } });
      expect((await device.exec!.run(['echo', 'on the board'])).stdout).toBe('on the board\n');
      expect(typeof (await device.supervisorLog())).toBe('string');
      await sleep(300);
      expect((await device.led!.transitions()).map((t) => t.value)).toEqual([0, 1]);
      await expect(device.power!.cycle()).rejects.toThrow(/no command for it/);
    } finally {
      await device.close();
      await new Promise((r) => api.close(r));
    }
  });
  it('fleetlab capture --board: the device over SSH, its key from its store, a bundle a replay starts from; replayed onto a board over SSH', async () => {
    // The "board" is a simulated device on this host, reached over the private sshd; its engine is dockerd.
    const docker = new Docker({ socketPath: '/var/run/docker.sock' });
    // An image only the field device has: the replay stands it in.
    const fieldOnly = `fleetlab-test/field-only-${process.pid}`;
    await ensureTestImages('/var/run/docker.sock');
    await docker.getImage('fleetlab/test-app:1').tag({ repo: fieldOnly, tag: '1' });
    const sim = await SimDevice.start({ port: 0, engine: 'docker', dockerSocket: '/var/run/docker.sock', localMode: true });
    // Read while the sim runs: its store is in the data dir the sim made, which its stop removes.
    const uuid = sim.info().uuid;
    let replayed: SimDevice | undefined;
    const boardDir = await mkdtemp(join(tmpdir(), 'fleetlab-board-replay-'));
    try {
      const key = sim.info().apiKey;
      const target = { local: { name: 'pi', config: {}, apps: { 1: { name: 'a', commit: 'c1', releaseId: '1', volumes: {}, networks: {}, services: { 11: { serviceName: 'main', serviceId: 11, imageId: 1, image: `${fieldOnly}:1`, environment: {}, labels: {} } } } } } };
      const posted = await fetch(`${sim.url}/v2/local/target-state`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(target) });
      expect(posted.status).toBe(200);
      for (let i = 0; i < 200 && !(await fetch(`${sim.url}/v2/state/status?apikey=${key}`).then((r) => r.json() as Promise<{ appState: string; containers: unknown[] }>).then((st) => st.appState === 'applied' && st.containers.length === 1)); i++) await sleep(100);
      await mkdir(join(sim.lockRoot, '1', 'main'), { recursive: true });
      await writeFile(join(sim.lockRoot, '1', 'main', 'updates.lock'), '');
      // Release 2 waits for the app's lock: the stuck point.
      const next = structuredClone(target);
      Object.assign(next.local.apps[1], { commit: 'c2', releaseId: '2' });
      next.local.apps[1].services[11] = { ...next.local.apps[1].services[11], imageId: 2, image: 'fleetlab/test-app:2' };
      expect((await fetch(`${sim.url}/v2/local/target-state`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(next) })).status).toBe(200);
      for (let i = 0; i < 200 && !readFileSync(sim.supervisorLog, 'utf8').includes('holds the update lock'); i++) await sleep(100);
      await writeFile(join(dir, 'capture_key'), privateKey, { mode: 0o600 });
      const config = join(dir, 'capture-board.json');
      await writeFile(config, JSON.stringify({ host: '127.0.0.1', sshPort: sshd.port, privateKey: 'capture_key', apiUrl: sim.url, dataDir: sim.paths.dataDir, lockRoot: sim.lockRoot, reset: false }));
      const out = join(dir, 'board.tar.gz');
      const progress: string[] = [];
      await runCapture({ board: config, out, redaction: 'default', force: false, log: (line) => progress.push(line) });
      expect(progress[0]).toBe(`capturing ssh root@127.0.0.1:${sshd.port} (device ${sim.info().uuid}) into ${out}`);

      const bundle = await readBundle(out);
      expect(bundle.manifest.source).toEqual({ kind: 'ssh', address: `root@127.0.0.1:${sshd.port}`, uuid: sim.info().uuid });
      expect(bundle.manifest.steps.filter((st) => st.status === 'failed').map((st) => st.name)).toEqual(['tags']);
      expect(bundle.json('supervisor/locks.json')).toEqual({ root: sim.lockRoot, files: [{ path: '1/main/updates.lock', content: '' }] });
      expect(bundle.json<Array<{ Name: string }>>('engine/containers.json').map((c) => c.Name)).toEqual([`/${sim.info().uuid.slice(0, 7)}_main_1`]);
      expect(readFileSync(out).includes(key)).toBe(false);
      expect(showBundle(bundle)).toMatch(/update lock of service main of app 1, held by the app: /);
      const original = await fetch(`${sim.url}/v2/state/status?apikey=${key}`).then((r) => r.json() as Promise<{ appState: string; containers: Array<{ serviceName: string; status: string }> }>);

      // The original goes, with its containers, volumes and data dir, and the image only it had.
      await sim.stop();
      await docker.getImage(`${fieldOnly}:1`).remove();

      // Replayed onto a "board" reached over SSH: its engine through a forwarded socket, its files by SSH.
      const engine = await ssh.forwardUnixSocket('/var/run/docker.sock');
      const port = await freePort();
      const lines: string[] = [];
      let options;
      try {
        options = await prepareReplayOnBoard({
          bundle: out,
          board: {
            engineSocket: engine.path,
            files: ssh.files,
            runRaw: (argv, o) => ssh.runRaw(argv, o),
            dataDir: join(boardDir, 'supervisor'),
            lockRoot: join(boardDir, 'locks'),
            proxyConfigDir: join(boardDir, 'boot', 'system-proxy'),
            // This "board" is the test's host: its name is the simulated one's file, never the host's.
            setHostname: (name) => ssh.files.write(join(boardDir, 'host', 'hostname'), `${name}\n`),
            port,
            arch: 'amd64',
          },
          log: (line) => lines.push(line),
        });
      } finally {
        await engine.close();
      }
      expect(lines).toContain(`images stood in (same tags, config and labels): ${fieldOnly}:1`);
      expect(lines).toEqual(expect.arrayContaining(["image fleetlab/test-app:1: the engine's own", "image fleetlab/test-app:2: the engine's own"]));
      expect(lines.join('\n')).toMatch(/stand-ins made from the board's fleetlab\/(busybox:latest|test-app:1)/);
      expect(lines).toContain(`lock files: ${join(boardDir, 'locks')}/1/main/updates.lock`);
      expect(readFileSync(join(boardDir, 'locks', '1', 'main', 'updates.lock'), 'utf8')).toBe('');
      // The stand-in has the captured image's config, on the board's own base.
      const standIn = await docker.getImage(`${fieldOnly}:1`).inspect();
      const capturedImage = bundle.json<{ present: Array<{ RepoTags: string[]; Config: { Cmd: string[] } }> }>('engine/images.json').present.find((i) => i.RepoTags.includes(`${fieldOnly}:1`))!;
      expect(standIn.Config.Cmd).toEqual(capturedImage.Config.Cmd);

      // The board's supervisor then starts from what the replay put there, and is stuck where the original was.
      replayed = await SimDevice.start({ port, dataDir: boardDir, engine: 'docker', dockerSocket: '/var/run/docker.sock', ...options });
      const replayKey = replayed.info().apiKey;
      expect(replayed.info().uuid).toBe(uuid);
      let now: typeof original | undefined;
      for (let i = 0; i < 100; i++) {
        now = await fetch(`${replayed.url}/v2/state/status?apikey=${replayKey}`).then((r) => r.json() as Promise<typeof original>);
        if (readFileSync(replayed.supervisorLog, 'utf8').includes('holds the update lock')) break;
        await sleep(200);
      }
      const brief = (s: typeof original) => [s.appState, ...s.containers.map((c) => `${c.serviceName} ${c.status}`)];
      expect(brief(now!)).toEqual(brief(original));
    } finally {
      await sim.stop();
      await replayed?.stop();
      // The replayed device ran in boardDir, which it does not own: its volumes stay with it.
      await removeDeviceLeftovers(docker, uuid);
      await docker.getImage(`${fieldOnly}:1`).remove({ force: true }).catch(() => undefined);
      await rm(boardDir, { recursive: true, force: true });
    }
  }, 180_000);

  it('fleetlab capture says which device to capture when told none, or two ways', async () => {
    await expect(runCapture({ redaction: 'default', force: false, log: () => undefined })).rejects.toThrow(/say which device: --device URL --api-key KEY .*, --board CONFIG .*, or --cloud URL --cloud-key KEY --uuid UUID/);
    await expect(runCapture({ board: 'b.json', device: 'http://127.0.0.1:1', redaction: 'default', force: false, log: () => undefined })).rejects.toThrow(/--device and --board are two ways to reach a device: give one/);
    await expect(runCapture({ device: 'http://127.0.0.1:1', redaction: 'default', force: false, log: () => undefined })).rejects.toThrow(/--device needs --api-key/);
  });
});

describe('SshDevice against an sshd that allows no sessions', () => {
  it('gives up after its retries, saying the device refused the session', async () => {
    if (sshdMissing) throw missingToolError(sshdTool);
    const dir = await mkdtemp(join(tmpdir(), 'fleetlab-sshd-'));
    const keygen = findTool(sshKeygenTool);
    if (!keygen) throw missingToolError(sshKeygenTool);
    spawnSync(keygen, ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'client')]);
    // MaxSessions 0: logins and forwarding only, every command's session refused.
    const sshd = await PrivateSshd.create(dir, await freePort(), readFileSync(join(dir, 'client.pub'), 'utf8'), ['MaxSessions 0']);
    await sshd.start();
    const ssh = new SshDevice({ host: '127.0.0.1', port: sshd.port, username: 'root', privateKey: readFileSync(join(dir, 'client')), readyTimeoutMs: 5000 });
    try {
      const err = await ssh.run(['true']).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FleetlabError);
      expect((err as Error).message).toMatch(/^SSH to root@127\.0\.0\.1:\d+: cannot run true: the device refused a session 7 times \(.*open failed\); is its sshd's MaxSessions below 9\?$/);
    } finally {
      await ssh.close();
      await sshd.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('SshDevice with nothing listening', () => {
  let dir: string;
  let privateKey: Buffer;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-ssh-key-'));
    const keygen = findTool(sshKeygenTool);
    if (!keygen) throw missingToolError(sshKeygenTool);
    spawnSync(keygen, ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'k')]);
    privateKey = readFileSync(join(dir, 'k'));
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('rejects with an error naming the address', async () => {
    const port = await freePort();
    const ssh = new SshDevice({ host: '127.0.0.1', port, privateKey, readyTimeoutMs: 2000 });
    try {
      const err = await ssh.run(['true']).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FleetlabError);
      expect((err as Error).message).toMatch(new RegExp(`SSH to root@127\\.0\\.0\\.1:${port} failed: .*ECONNREFUSED`));
      await expect(ssh.waitReachable(1200)).rejects.toThrow(/not reachable within 1200 ms \(.*ECONNREFUSED/);
    } finally {
      await ssh.close();
    }
  });

  it('fails at once on a key it cannot use', async () => {
    const ssh = new SshDevice({ host: '127.0.0.1', port: await freePort(), privateKey: 'not a key' });
    try {
      const started = Date.now();
      await expect(ssh.waitReachable(10_000)).rejects.toThrow(/Cannot parse privateKey/);
      expect(Date.now() - started).toBeLessThan(2000);
    } finally {
      await ssh.close();
    }
  });
});

describe('LED observed by a lab-host command', () => {
  it('records 0/1 lines as transitions and stops the command', async () => {
    const led = observeLedByCommand("printf '0\\n0\\n1\\nnoise\\n0\\n'; sleep 30", 'gpio 529');
    try {
      await sleep(500);
      expect((await led.transitions()).map((t) => t.value)).toEqual([0, 1, 0]);
      expect(await led.level()).toBe(0);
    } finally {
      await led.stop();
    }
  });
});

describe('board config', () => {
  const where = { source: 'lab.json', baseDir: '/etc/fleetlab', home: '/root' };
  const parse = (raw: unknown) => parseBoardConfig(raw, where);
  const minimal = { host: '10.1.2.3', privateKey: 'keys/lab' };

  it('fills the defaults', () => {
    const c = parse(minimal);
    expect(c).toEqual({
      host: '10.1.2.3',
      sshPort: 22,
      user: 'root',
      privateKey: '/etc/fleetlab/keys/lab',
      apiUrl: 'http://10.1.2.3:48484',
      dataDir: '/var/lib/fleetlab',
      vendor: 'platform',
      lockRoot: '/tmp/fleetlab/locks',
      supervisorUnit: 'fleetlab-supervisor.service',
      timeScale: 1,
      reset: true,
      hostPaths: { hostname: '/etc/hostname', proxyConfigDir: '/mnt/boot/system-proxy', bootConfig: '/mnt/boot/config.txt' },
      power: {},
    } satisfies BoardConfig);
    expect(boardCapabilities(c)).toEqual(['api', 'exec', 'files', 'files.volumes', 'journal', 'power.reboot', 'supervisor.kill', 'engine.restart', 'disk.fill', 'images']);
    expect(parse({ ...minimal, privateKey: '~/.ssh/k' }).privateKey).toBe('/root/.ssh/k');
    expect(parse({ ...minimal, host: 'fe80::1' }).apiUrl).toBe('http://[fe80::1]:48484');
  });

  it('takes every field', () => {
    const c = parse({
      ...minimal,
      sshPort: 2222,
      user: 'pi',
      apiUrl: 'http://bench:9000/',
      apiKey: 'k',
      dataDir: '/data/fleetlab',
      vendor: 'balena',
      lockRoot: '/tmp/balena/locks',
      hostPaths: { bootConfig: '/boot/firmware/config.txt' },
      led: { gpio: 'pinctrl-bcm2711:17', observe: 'sysfs', pollMs: 5 },
      power: { off: 'pdu off 3', on: 'pdu on 3' },
      reset: false,
    });
    expect(c).toMatchObject({ sshPort: 2222, user: 'pi', apiUrl: 'http://bench:9000', apiKey: 'k', vendor: 'balena', reset: false, led: { gpio: { chip: 'pinctrl-bcm2711', offset: 17 }, observe: { kind: 'sysfs', pollMs: 5 } } });
    expect(c.hostPaths).toEqual({ hostname: '/etc/hostname', proxyConfigDir: '/mnt/boot/system-proxy', bootConfig: '/boot/firmware/config.txt' });
    expect(boardCapabilities(c)).toEqual(['api', 'exec', 'files', 'files.volumes', 'journal', 'power.reboot', 'supervisor.kill', 'engine.restart', 'disk.fill', 'images', 'led', 'power.cycle', 'power.cut']);
    expect(boardCapabilities(parse({ ...minimal, power: { cycle: 'pdu cycle 3' } }))).toContain('power.cycle');
    expect(boardCapabilities(parse({ ...minimal, power: { cycle: 'pdu cycle 3' } }))).not.toContain('power.cut');
    expect(parse({ ...minimal, led: { gpio: 529, observe: { command: 'lab-gpio watch 4' } } }).led).toEqual({ gpio: 529, observe: { kind: 'command', command: 'lab-gpio watch 4' } });
  });

  it.each([
    [[1], /must be a JSON object/],
    [{ privateKey: 'k' }, /"host" is required/],
    [{ host: '10.1.2.3' }, /"privateKey" is required/],
    [{ ...minimal, hots: 'x' }, /unknown field "hots"/],
    [{ ...minimal, sshPort: '22' }, /"sshPort" must be an integer 1-65535, got "22"/],
    [{ ...minimal, sshPort: 70000 }, /"sshPort"/],
    [{ ...minimal, apiUrl: 'ftp://x' }, /"apiUrl" must be an http\(s\) URL/],
    [{ ...minimal, vendor: 'Bad-Word' }, /"vendor" must be a lowercase word/],
    [{ ...minimal, dataDir: 'relative' }, /"dataDir" must be an absolute device path/],
    [{ ...minimal, hostPaths: { hostname: 'etc/hostname' } }, /"hostPaths.hostname" must be an absolute/],
    [{ ...minimal, led: { gpio: 'pin17' } }, /"led.gpio" must be "<chip label>:<offset>"/],
    [{ ...minimal, led: { gpio: 17, observe: 'camera' } }, /"led.observe" must be "sysfs" or \{"command"/],
    [{ ...minimal, power: { off: 'pdu off' } }, /"power.off" and "power.on" go together/],
    [{ ...minimal, power: { reset: 'x' } }, /unknown field "power.reset"/],
    [{ ...minimal, power: { cycle: '' } }, /"power.cycle" must be a non-empty shell command/],
    [{ ...minimal, reset: 'yes' }, /"reset" must be true or false, got "yes"/],
  ])('rejects %j', (raw, message) => {
    let caught: unknown;
    try {
      parse(raw);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(FleetlabError);
    expect((caught as Error).message).toMatch(message);
    expect((caught as Error).message).toMatch(/^board config lab\.json: /);
    expect((caught as Error).message).toContain('example (FLEETLAB_BOARD_CONFIG=hil/boards/example.json)');
  });

  it('names the variable when it is unset or points nowhere', () => {
    expect(() => loadBoardConfig({})).toThrow(/set FLEETLAB_BOARD_CONFIG to the path/);
    expect(() => loadBoardConfig({ FLEETLAB_BOARD_CONFIG: '/nonexistent/board.json' })).toThrow(/board config \/nonexistent\/board\.json: cannot read it/);
  });

  it('reads the example config', () => {
    const c = loadBoardConfig({ FLEETLAB_BOARD_CONFIG: fileURLToPath(new URL('../hil/boards/example.json', import.meta.url)), HOME: '/root' });
    expect(boardCapabilities(c)).toContain('led');
    expect(c.serial).toEqual({ device: '/dev/ttyUSB0', baud: 115200 });
  });

  it('takes how long a board may take to come back after its power control', () => {
    const where = { source: 't.json', baseDir: '/lab' };
    const base = { host: '192.0.2.10', privateKey: '/k' };
    expect(parseBoardConfig({ ...base, power: { cycle: 'pdu 3 cycle', timeoutSeconds: 90 } }, where).power).toEqual({ cycle: 'pdu 3 cycle', timeoutSeconds: 90 });
    expect(() => parseBoardConfig({ ...base, power: { cycle: 'x', timeoutSeconds: 0 } }, where)).toThrow(/"power.timeoutSeconds" must be a whole number of seconds from 1 to 3600/);
    expect(() => parseBoardConfig({ ...base, power: { cycel: 'x' } }, where)).toThrow(/unknown field "power.cycel" \(known: cycle, off, on, timeoutSeconds\)/);
  });

  it('takes the serial console as a path or with its speed, and says what is wrong', () => {
    const where = { source: 't.json', baseDir: '/lab' };
    const base = { host: '192.0.2.10', privateKey: '/k' };
    expect(parseBoardConfig({ ...base, serial: { device: '/dev/ttyAMA1', baud: 921600 } }, where).serial).toEqual({ device: '/dev/ttyAMA1', baud: 921600 });
    expect(parseBoardConfig(base, where).serial).toBeUndefined();
    expect(() => parseBoardConfig({ ...base, serial: 'ttyUSB0' }, where)).toThrow(/serial must be the serial device's absolute path/);
    expect(() => parseBoardConfig({ ...base, serial: { device: '/dev/ttyUSB0', baud: 12345 } }, where)).toThrow(/"serial.baud" must be one of 9600, .*115200/);
    expect(() => parseBoardConfig({ ...base, serial: { device: '/dev/ttyUSB0', parity: 'none' } }, where)).toThrow(/unknown field "serial.parity" \(known: device, baud\)/);
  });

  it('resolves the LED line from chip labels as the supervisor does', () => {
    const chips = [{ label: 'pinctrl-bcm2835', base: 512, ngpio: 54 }, { label: 'raspberrypi-exp-gpio', base: 570, ngpio: 8 }];
    expect(gpioNumberOnBoard({ chip: 'pinctrl-bcm2835', offset: 17 }, chips)).toBe(529);
    expect(gpioNumberOnBoard(17, [])).toBe(17);
    expect(() => gpioNumberOnBoard({ chip: 'pinctrl-bcm2835', offset: 54 }, chips)).toThrow(/outside chip/);
    expect(() => gpioNumberOnBoard({ chip: 'x', offset: 1 }, [...chips, { label: 'x', base: 1, ngpio: 2 }, { label: 'x', base: 3, ngpio: 2 }])).toThrow(/ambiguous/);
  });
});
