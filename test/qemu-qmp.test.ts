import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { findTool } from '../src/tools.js';
import { GpioProbe, gpioRegister, parseXpWord, xpCommand, type MachineKind } from '../qemu/gpio-probe.js';
import { addHostForward, hostfwdAddCommand, hostfwdAddResult, hostfwdRemoveCommand, hostfwdRemoveResult, removeHostForward } from '../qemu/hostfwd.js';
import { buildQemuArgv, NETDEV_ID, NIC_ID } from '../qemu/qemu-argv.js';
import { QmpClient, QmpClosedError, QmpCommandError, type QmpEvent } from '../qemu/qmp.js';
import { qemuTools } from '../device-image/tools.js';

describe('xp output parser', () => {
  it('reads the word of `xp /1wx`', () => {
    expect(parseXpWord('000000003f200034: 0x00020000\r\n')).toBe(0x20000);
    expect(parseXpWord('00000000090303fc: 0x000000ff\r\n', 0x090303fc)).toBe(0xff);
    expect(parseXpWord('000000003f200034: 0xffffffff', 0x3f200034)).toBe(0xffffffff);
  });

  it('rejects monitor errors and answers for another address', () => {
    for (const out of ['000000003f200034: Cannot access memory\r\n', "unknown command: 'xp'\r\n", '']) {
      expect(() => parseXpWord(out)).toThrow(FleetlabError);
    }
    expect(() => parseXpWord('000000003f200038: 0x00000000', 0x3f200034)).toThrow(/expected 0x3f200034/);
  });

  it('maps lines to level registers', () => {
    expect(gpioRegister('raspi3b', 17)).toEqual({ address: 0x3f200034, bit: 17 });
    expect(gpioRegister('raspi3b', 40)).toEqual({ address: 0x3f200038, bit: 8 });
    expect(gpioRegister('virt', 3)).toEqual({ address: 0x090303fc, bit: 3 });
    expect(xpCommand(0x3f200034)).toBe('xp /1wx 0x3f200034');
    expect(() => gpioRegister('raspi3b', 54)).toThrow(FleetlabError);
    expect(() => gpioRegister('virt', 8)).toThrow(FleetlabError);
    expect(() => gpioRegister('virt', -1)).toThrow(FleetlabError);
  });
});

describe('host forwards added at run time (hostfwd_add, hostfwd_remove)', () => {
  const fwd = { hostAddress: '127.77.3.9', hostPort: 8080, guestPort: 80 };

  it('names the user netdev and the host side; an empty guest address is the guest\'s own', () => {
    expect(hostfwdAddCommand(fwd)).toBe(`hostfwd_add ${NETDEV_ID} tcp:127.77.3.9:8080-:80`);
    expect(hostfwdRemoveCommand(fwd)).toBe(`hostfwd_remove ${NETDEV_ID} tcp:127.77.3.9:8080`);
  });

  it('puts nothing but an IPv4 address and ports into the command line', () => {
    for (const bad of [{ ...fwd, hostAddress: '::1' }, { ...fwd, hostAddress: '127.0.0.1 net1' }, { ...fwd, hostPort: 0 }, { ...fwd, guestPort: 65536 }, { ...fwd, guestPort: 1.5 }]) {
      expect(() => hostfwdAddCommand(bad)).toThrow(FleetlabError);
    }
  });

  it('reads what QEMU 7.2 prints: nothing when added, a port in use as taken, anything else as its error', () => {
    expect(hostfwdAddResult('', fwd)).toBe('added');
    expect(hostfwdAddResult("Could not set up host forwarding rule 'tcp:127.77.3.9:8080-:80'\r\n", fwd)).toBe('taken');
    expect(() => hostfwdAddResult("Invalid host forwarding rule 'tcp:x' (Bad host address)\r\n", fwd)).toThrow(/QEMU refused the forward tcp:127.77.3.9:8080 to the guest's port 80: Invalid host/);
    expect(hostfwdRemoveResult('host forwarding rule for tcp:127.77.3.9:8080 removed\r\n', fwd)).toBe(true);
    expect(hostfwdRemoveResult('host forwarding rule for tcp:127.77.3.9:8080 not found\r\n', fwd)).toBe(false);
    expect(() => hostfwdRemoveResult('invalid format\r\n', fwd)).toThrow(FleetlabError);
  });
});

/** A monitor double that answers `xp` with scripted levels of one bit: the sampler's logic only. */
class ScriptedMonitor {
  calls = 0;
  constructor(
    private readonly levels: (0 | 1 | Error)[],
    private readonly bit: number,
  ) {}
  async hmp(commandLine: string): Promise<string> {
    const next = this.levels[Math.min(this.calls++, this.levels.length - 1)]!;
    if (next instanceof Error) throw next;
    const addr = commandLine.split(' ')[2]!.slice(2).padStart(16, '0');
    return `${addr}: 0x${((next << this.bit) >>> 0).toString(16).padStart(8, '0')}\r\n`;
  }
}

describe('GpioProbe sampler (fake timers)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 1000 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('records the first sample and then only changes', async () => {
    const monitor = new ScriptedMonitor([0, 0, 1, 1, 1, 0, 1], 17);
    const probe = new GpioProbe({ monitor, machine: 'raspi3b', line: 17 });
    probe.startSampling(10);
    await vi.advanceTimersByTimeAsync(65);
    probe.stop();
    expect(probe.transitions().map((t) => t.value)).toEqual([0, 1, 0, 1]);
    expect(probe.transitions().map((t) => t.at)).toEqual([1000, 1020, 1050, 1060]);
    expect(probe.transitions(1050).map((t) => t.value)).toEqual([0, 1]);
    const calls = monitor.calls;
    await vi.advanceTimersByTimeAsync(100);
    expect(monitor.calls).toBe(calls);
    expect(probe.sampling).toBe(false);
    expect(probe.lastError).toBeUndefined();
  });

  it('keeps at most maxTransitions, dropping the oldest', async () => {
    const levels = Array.from({ length: 50 }, (_, i) => (i % 2) as 0 | 1);
    const probe = new GpioProbe({ monitor: new ScriptedMonitor(levels, 2), machine: 'virt', line: 2, maxTransitions: 10 });
    probe.startSampling(1);
    await vi.advanceTimersByTimeAsync(60);
    probe.stop();
    expect(probe.transitions()).toHaveLength(10);
    expect(probe.dropped).toBe(40);
    expect(probe.transitions().at(-1)!.value).toBe(1);
  });

  it('stops quietly on a failed read and keeps the error', async () => {
    const gone = new QmpClosedError('QMP connection closed');
    const probe = new GpioProbe({ monitor: new ScriptedMonitor([1, 1, gone], 0), machine: 'virt', line: 0 });
    probe.startSampling(10);
    await vi.advanceTimersByTimeAsync(50);
    expect(probe.sampling).toBe(false);
    expect(probe.lastError).toBe(gone);
    expect(probe.transitions().map((t) => t.value)).toEqual([1]);
  });

  it('records the first sample of a new run even when the level did not change', async () => {
    const probe = new GpioProbe({ monitor: new ScriptedMonitor([1], 0), machine: 'virt', line: 0 });
    probe.startSampling(10);
    await vi.advanceTimersByTimeAsync(5);
    probe.stop();
    probe.startSampling(10);
    await vi.advanceTimersByTimeAsync(5);
    probe.stop();
    expect(probe.transitions().map((t) => t.value)).toEqual([1, 1]);
  });
});

/** A QMP server double for what real QEMU cannot be made to do on cue: late sockets, silence. */
async function fakeQmp(path: string, onCommand: (msg: { execute: string; id?: string; arguments?: unknown }, socket: Socket) => void): Promise<Server> {
  const server = createServer((socket) => {
    socket.write(`${JSON.stringify({ QMP: { version: { qemu: { major: 7, minor: 2, micro: 0 }, package: 'fake' }, capabilities: [] } })}\r\n`);
    let buf = '';
    socket.on('data', (chunk) => {
      buf += chunk.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const msg = JSON.parse(buf.slice(0, nl)) as { execute: string; id?: string };
        buf = buf.slice(nl + 1);
        if (msg.execute === 'qmp_capabilities') socket.write(`${JSON.stringify({ return: {}, id: msg.id })}\r\n`);
        else onCommand(msg, socket);
      }
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return server;
}

describe('QmpClient against a QMP double', () => {
  let dir: string;
  const servers: Server[] = [];
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fl-qmp-'));
  });
  afterEach(async () => {
    for (const s of servers.splice(0)) s.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('retries until the socket appears, then negotiates', async () => {
    const path = join(dir, 'q.sock');
    const connecting = QmpClient.connect({ socketPath: path, connectTimeoutMs: 3000, retryIntervalMs: 20 });
    await sleep(200);
    servers.push(await fakeQmp(path, (msg, socket) => socket.write(`${JSON.stringify({ return: { status: 'running' }, id: msg.id })}\n`)));
    const qmp = await connecting;
    expect(qmp.greeting?.version.package).toBe('fake');
    await expect(qmp.execute('query-status')).resolves.toEqual({ status: 'running' });
    await qmp.close();
    await expect(qmp.execute('query-status')).rejects.toBeInstanceOf(QmpClosedError);
  });

  it('gives up at the deadline with the reason', async () => {
    const started = Date.now();
    await expect(QmpClient.connect({ socketPath: join(dir, 'never.sock'), connectTimeoutMs: 300 })).rejects.toThrow(/could not open QMP.*ENOENT/);
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('surfaces events, maps errors, and drops a reply that comes after its timeout', async () => {
    const path = join(dir, 'q.sock');
    servers.push(
      await fakeQmp(path, (msg, socket) => {
        const reply = (body: object) => socket.write(`${JSON.stringify({ ...body, id: msg.id })}\r\n`);
        if (msg.execute === 'slow') setTimeout(() => reply({ return: 'late' }), 150);
        else if (msg.execute === 'bad') reply({ error: { class: 'GenericError', desc: 'nope' } });
        else {
          socket.write(`${JSON.stringify({ event: 'STOP', timestamp: { seconds: 10, microseconds: 5000 } })}\r\n`);
          reply({ return: msg.execute });
        }
      }),
    );
    const qmp = await QmpClient.connect({ socketPath: path });
    const events: QmpEvent[] = [];
    qmp.on('event', (e) => events.push(e));
    await expect(qmp.execute('slow', undefined, { timeoutMs: 50 })).rejects.toThrow(/no answer within 50 ms/);
    const err = await qmp.execute('bad').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QmpCommandError);
    expect(err).toMatchObject({ qmpClass: 'GenericError', desc: 'nope', command: 'bad' });
    await sleep(150); // the late 'slow' reply arrives now and must not be taken for the next answer
    await expect(qmp.execute('next')).resolves.toBe('next');
    expect(events).toEqual([{ event: 'STOP', at: 10_005 }]);
    await qmp.close();
  });

  it('rejects the command in flight and the queued ones when the peer goes away', async () => {
    const path = join(dir, 'q.sock');
    servers.push(await fakeQmp(path, (_msg, socket) => setTimeout(() => socket.destroy(), 50)));
    const qmp = await QmpClient.connect({ socketPath: path });
    const closed = new Promise<QmpClosedError>((resolve) => qmp.once('close', resolve));
    const results = await Promise.allSettled([qmp.execute('a'), qmp.execute('b')]);
    for (const r of results) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toBeInstanceOf(QmpClosedError);
      expect(String((r as PromiseRejectedResult).reason.message)).toMatch(/not answered: QMP connection to .* closed/);
    }
    expect(await closed).toBeInstanceOf(QmpClosedError);
    expect(qmp.closed).toBe(true);
  });
});

// ---------------------------------------------------------------------------------------------
// Real QEMU

const qemuBin = findTool(qemuTools.qemuSystem);
const qemuImg = findTool(qemuTools.qemuImg);
const haveQemu = qemuBin !== undefined && qemuImg !== undefined;

/**
 * A bare-metal program that blinks one GPIO line every ~67 ms (0x400000 ticks of the 62.5 MHz
 * generic timer), so the probe can be checked against real emulated hardware without a Linux
 * image. Hand-assembled AArch64; only core 0 runs it (the others park in wfe):
 *
 *   mrs x0, mpidr_el1 ; and x0, x0, #3 ; cbnz x0, park
 *   <machine setup: x1 = controller base, make the line an output, w3 = the line's bit>
 *   movz x5, #0x40, lsl #16                      // half period in timer ticks
 * loop: <set>  ; mrs x4, cntpct_el0 ; add x4, x4, x5
 *   1: mrs x6, cntpct_el0 ; cmp x6, x4 ; b.lo 1b
 *       <clear>; (same delay) ; b loop
 * park: wfe ; b park
 */
function blinkProgram(machine: MachineKind): Buffer {
  const delay = [0xd53be024, 0x8b050084, 0xd53be026, 0xeb0400df, 0x54ffffc3];
  const words =
    machine === 'raspi3b'
      ? [
          // GPIO 21: x1 = 0x3f200000; GPFSEL2 (0x08) = 1 << 3 (output); w3 = 1 << 21
          0xd53800a0, 0x92400400, 0xb5000260, 0xd2a7e401, 0x52800102, 0xb9000822, 0x52a00403, 0xd2a00805,
          0xb9001c23, ...delay, // str w3, [x1, #0x1c]   GPSET0
          0xb9002823, ...delay, // str w3, [x1, #0x28]   GPCLR0
          0x17fffff4, 0xd503205f, 0x17ffffff,
        ]
      : [
          // PL061 line 0: x1 = 0x09030000; GPIODIR (0x400) = 1; w3 = 1
          0xd53800a0, 0x92400400, 0xb5000260, 0xd2a12061, 0x52800022, 0xb9040022, 0x52800023, 0xd2a00805,
          0xb903fc23, ...delay, // str w3,  [x1, #0x3fc]  DATA = 1
          0xb903fc3f, ...delay, // str wzr, [x1, #0x3fc]  DATA = 0
          0x17fffff4, 0xd503205f, 0x17ffffff,
        ];
  const buf = Buffer.alloc(words.length * 4);
  words.forEach((w, i) => buf.writeUInt32LE(w >>> 0, i * 4));
  return buf;
}

const blinkLine: Record<MachineKind, number> = { raspi3b: 21, virt: 0 };

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

interface RunningQemu {
  proc: ChildProcess;
  qmp: QmpClient;
  exited: Promise<number | null>;
  stderr: () => string;
}

/** Starts QEMU from the argv builder; `kernel` empty means no program (QEMU accepts an empty file). */
async function startQemu(dir: string, machine: MachineKind, options: { paused: boolean; kernel: Buffer }): Promise<RunningQemu> {
  const kernel = join(dir, 'kernel');
  const initrd = join(dir, 'initrd');
  const disk = join(dir, 'disk.qcow2');
  await writeFile(kernel, options.kernel);
  await writeFile(initrd, '');
  await execa(qemuImg!, ['create', '-q', '-f', 'qcow2', disk, '64M']);
  const qmpSocket = join(dir, 'qmp.sock');
  // No -dtb: QEMU refuses an empty or fake device tree, and nothing here boots Linux.
  const argv = buildQemuArgv({
    machine,
    kernel,
    initrd,
    disk,
    hostfwd: { api: { host: await freePort(), guest: 48484 }, ssh: { host: await freePort(), guest: 22 } },
    qmpSocket,
    serialLog: join(dir, 'serial.log'),
    epochSeconds: Math.floor(Date.now() / 1000),
    paused: options.paused,
  });
  const proc = spawn(qemuBin!, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  try {
    const qmp = await Promise.race([
      QmpClient.connect({ socketPath: qmpSocket, connectTimeoutMs: 10_000 }),
      exited.then((code) => {
        throw new Error(`QEMU exited (${code}) before QMP was up: ${stderr}`);
      }),
    ]);
    return { proc, qmp, exited, stderr: () => stderr };
  } catch (err) {
    proc.kill('SIGKILL');
    throw err;
  }
}

async function stopQemu(q: RunningQemu | undefined): Promise<void> {
  if (!q) return;
  await q.qmp.close();
  if (q.proc.exitCode === null && q.proc.signalCode === null) q.proc.kill('SIGKILL');
  await q.exited;
}

for (const machine of ['raspi3b', 'virt'] as const) {
  describe.skipIf(!haveQemu)(`real QEMU ${machine} (skipped when qemu-system-aarch64 or qemu-img is missing: apt-get install qemu-system-arm qemu-utils)`, () => {
    let dir: string;
    let qemu: RunningQemu | undefined;
    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'fl-qemu-'));
    });
    afterEach(async () => {
      await stopQemu(qemu);
      qemu = undefined;
      await rm(dir, { recursive: true, force: true });
    });

    it('answers status, HMP, GPIO level, set_link, reset and run state events on a paused board', async () => {
      qemu = await startQemu(dir, machine, { paused: true, kernel: Buffer.alloc(0) });
      const { qmp } = qemu;
      expect(await qmp.execute('query-status')).toMatchObject({ status: 'prelaunch', running: false });

      const v = qmp.greeting!.version.qemu;
      expect(await qmp.hmp('info version')).toContain(`${v.major}.${v.minor}.${v.micro}`);

      // What -nodefaults must not have taken away: the disk, the NIC on its bus, the serial wiring.
      const blocks = await qmp.execute<{ inserted?: { file: string } }[]>('query-block');
      expect(blocks.map((b) => b.inserted?.file)).toContain(join(dir, 'disk.qcow2'));
      const network = await qmp.hmp('info network');
      expect(network).toContain(`${NIC_ID}: index=0,type=nic,model=${machine === 'raspi3b' ? 'usb-net' : 'virtio-net-device'}`);
      expect(network).toContain(`${NETDEV_ID}: index=0,type=user`);
      if (machine === 'raspi3b') expect(await qmp.hmp('info usb')).toContain(`ID: ${NIC_ID}`);
      const chardevs = await qmp.execute<{ label: string; filename: string }[]>('query-chardev');
      const serials = chardevs.filter((c) => c.label.startsWith('serial')).sort((a, b) => a.label.localeCompare(b.label));
      expect(serials.map((c) => c.filename)).toEqual(machine === 'raspi3b' ? ['null', 'file'] : ['file']);

      expect(await new GpioProbe({ monitor: qmp, machine, line: blinkLine[machine] }).level()).toBe(0);
      if (machine === 'raspi3b') expect(await new GpioProbe({ monitor: qmp, machine, line: 40 }).level()).toBe(0);

      for (const name of [NIC_ID, NETDEV_ID]) {
        await expect(qmp.execute('set_link', { name, up: false })).resolves.toEqual({});
        await expect(qmp.execute('set_link', { name, up: true })).resolves.toEqual({});
      }
      await expect(qmp.execute('set_link', { name: 'no-such-nic', up: false })).rejects.toMatchObject({ qmpClass: 'DeviceNotFound' });
      await expect(qmp.execute('no-such-command')).rejects.toMatchObject({ qmpClass: 'CommandNotFound' });

      const reset = qmp.waitForEvent('RESET', 5000);
      await expect(qmp.execute('system_reset')).resolves.toEqual({});
      expect((await reset).data).toMatchObject({ guest: false, reason: 'host-qmp-system-reset' });

      const resumed = qmp.waitForEvent('RESUME', 5000);
      await qmp.execute('cont');
      await resumed;
      const stopped = qmp.waitForEvent('STOP', 5000);
      await qmp.execute('stop');
      await stopped;
      expect(await qmp.execute('query-status')).toMatchObject({ status: 'paused', running: false });
    });

    it('adds a forward at run time, which QEMU binds on this machine until it is removed', async () => {
      qemu = await startQemu(dir, machine, { paused: true, kernel: Buffer.alloc(0) });
      const { qmp } = qemu;
      const fwd = { hostAddress: '127.64.39.7', hostPort: await freePort(), guestPort: 8080 };
      const bind = () => new Promise<string>((resolve) => {
        const server = createServer();
        server.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? String(err)));
        server.listen(fwd.hostPort, fwd.hostAddress, () => server.close(() => resolve('bound')));
      });
      expect(await addHostForward(qmp, fwd)).toBe('added');
      expect(await qmp.hmp('info usernet')).toMatch(new RegExp(`HOST_FORWARD.*127\\.64\\.39\\.7\\s+${fwd.hostPort}\\s+10\\.0\\.2\\.15\\s+8080`));
      expect(await bind()).toBe('EADDRINUSE');
      // The same host side again: in use, which the caller answers with another one.
      expect(await addHostForward(qmp, { ...fwd, guestPort: 8081 })).toBe('taken');
      expect(await removeHostForward(qmp, fwd)).toBe(true);
      expect(await removeHostForward(qmp, fwd)).toBe(false);
      expect(await bind()).toBe('bound');
      await expect(qmp.hmp(hostfwdAddCommand(fwd, 'no-such-netdev')).then((out) => hostfwdAddResult(out, fwd))).rejects.toThrow(/QEMU refused the forward .*no-such-netdev/);
    });

    it('quit: resolves, rejects the queued command, reports close, and QEMU exits', async () => {
      qemu = await startQemu(dir, machine, { paused: true, kernel: Buffer.alloc(0) });
      const { qmp } = qemu;
      const shutdown = qmp.waitForEvent('SHUTDOWN', 5000);
      const closed = new Promise<QmpClosedError>((resolve) => qmp.once('close', resolve));
      const [quit, after] = await Promise.allSettled([qmp.execute('quit'), qmp.execute('query-status')]);
      expect(quit.status).toBe('fulfilled');
      expect(after.status).toBe('rejected');
      expect((after as PromiseRejectedResult).reason).toBeInstanceOf(QmpClosedError);
      expect((await shutdown).data).toMatchObject({ reason: 'host-qmp-quit' });
      expect(await closed).toBeInstanceOf(QmpClosedError);
      expect(await qemu.exited).toBe(0);
      await expect(qmp.hmp('info version')).rejects.toBeInstanceOf(QmpClosedError);
    });

    it('samples a blinking line, keeps sampling across a reset, and stops quietly when QEMU quits', async () => {
      qemu = await startQemu(dir, machine, { paused: false, kernel: blinkProgram(machine) });
      const { qmp } = qemu;
      const probe = new GpioProbe({ monitor: qmp, machine, line: blinkLine[machine] });
      const t0 = Date.now();
      probe.startSampling(5);
      const seen = async (count: number, since: number) => {
        const deadline = Date.now() + 5000;
        while (probe.transitions(since).length < count && Date.now() < deadline) await sleep(20);
        return probe.transitions(since);
      };
      const before = await seen(4, t0);
      expect(before.length, qemu.stderr()).toBeGreaterThanOrEqual(4);
      before.slice(1).forEach((t, i) => expect(t.value).not.toBe(before[i]!.value));

      const tReset = Date.now();
      await qmp.execute('system_reset');
      const after = await seen(3, tReset);
      expect(after.length).toBeGreaterThanOrEqual(3);
      expect(probe.sampling).toBe(true);
      expect(probe.lastError).toBeUndefined();

      await qmp.execute('quit');
      await qemu.exited;
      const deadline = Date.now() + 2000;
      while (probe.sampling && Date.now() < deadline) await sleep(10);
      expect(probe.sampling).toBe(false);
      expect(probe.lastError).toBeInstanceOf(QmpClosedError);
      // What was recorded stays readable after the stop, for the report.
      expect(probe.transitions(t0)).toEqual(expect.arrayContaining([...before, ...after]));
    });
  });
}
