/**
 * The lab board's serial capture against a real pseudo-terminal: `script` (util-linux) holds
 * the master side, as QEMU or a USB adapter's driver does, and the capture opens the slave as a
 * lab host opens /dev/ttyUSB0. What is written into the master is what the board "prints".
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SerialConsole, SLICE_MARGIN_MS } from '../device-access/serial-console.js';
import { pollUntil } from '../hil/lib/wait.js';

/** A pty whose slave path is printed by the shell script runs in it; stdin goes to the master. */
async function openPty(): Promise<{ path: string; board: ChildProcessWithoutNullStreams }> {
  const board = spawn('script', ['-q', '-c', 'tty; exec sleep 120', '/dev/null'], { stdio: 'pipe' });
  let out = '';
  board.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const path = await pollUntil("the pty name", async () => /\/dev\/pts\/\d+/.exec(out)?.[0], (p) => p !== undefined, { timeoutMs: 10_000 });
  return { path: path!, board };
}

describe('SerialConsole', () => {
  const cleanup: Array<() => unknown> = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0)) await c();
  });

  it('keeps each line with its arrival time and slices from a test\'s start, less the margin', async () => {
    const { path, board } = await openPty();
    cleanup.push(() => board.kill('SIGKILL'));
    const console_ = new SerialConsole(path, 115200);
    cleanup.push(() => console_.close());
    expect(await console_.waitOpen(10_000)).toBe(true);

    board.stdin.write('[    1.000] booting\r\n[\x1b[0;32m  OK  \x1b[0m] Started ssh\r\n');
    await pollUntil('two lines', async () => console_.lines(), (l) => l.length >= 2, { timeoutMs: 10_000 });
    const testStart = Date.now() + SLICE_MARGIN_MS + 200;
    await new Promise((r) => setTimeout(r, SLICE_MARGIN_MS + 400));
    board.stdin.write('kernel: oops in the middle of the test\r\npartial without newline');
    const slice = await pollUntil('the test\'s lines', async () => console_.slice(testStart), (s) => s.includes('partial without newline'), { timeoutMs: 10_000 });

    // Only what came within the margin before the test and after it; colour codes and CRs gone.
    expect(slice).not.toContain('booting');
    expect(slice).toMatch(/^\d\d:\d\d:\d\d\.\d{3} kernel: oops in the middle of the test$/m);
    expect(console_.lines(0).map((l) => l.text)).toEqual(['[    1.000] booting', '[  OK  ] Started ssh', 'kernel: oops in the middle of the test', 'partial without newline']);
  });

  it('notes when the console goes away and opens it again when it is back', async () => {
    // A stable name for a console whose pty changes, as qemu boot links <runDir>/console to each QEMU's pty.
    const dir = mkdtempSync(join(tmpdir(), 'fleetlab-serial-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const link = join(dir, 'console');
    const first = await openPty();
    symlinkSync(first.path, link);
    const console_ = new SerialConsole(link, 115200);
    cleanup.push(() => console_.close());
    expect(await console_.waitOpen(10_000)).toBe(true);
    // The board powered off: the master side gone.
    first.board.kill('SIGKILL');
    await pollUntil('the loss noted', async () => console_.lines(0).map((l) => l.text), (t) => t.some((l) => l.includes('went away')), { timeoutMs: 10_000 });
    // Powered on again, behind the same name.
    const second = await openPty();
    cleanup.push(() => second.board.kill('SIGKILL'));
    rmSync(link);
    symlinkSync(second.path, link);
    await pollUntil('open again', async () => console_.lines(0).map((l) => l.text), (t) => t.some((l) => l.includes('open again')), { timeoutMs: 10_000 });
    second.board.stdin.write('second boot\r\n');
    const texts = await pollUntil('the second boot', async () => console_.lines(0).map((l) => l.text), (t) => t.includes('second boot'), { timeoutMs: 10_000 });
    expect(texts.filter((t) => t.startsWith('[fleetlab serial]'))).toEqual([
      expect.stringContaining(`${link} went away`),
      ...texts.filter((t) => t.startsWith(`[fleetlab serial] cannot open ${link}`)),
      `[fleetlab serial] ${link} open again`,
    ]);
  });

  it('says what is wrong with a device that is not a terminal, and keeps trying', async () => {
    const console_ = new SerialConsole('/dev/null', 115200);
    cleanup.push(() => console_.close());
    expect(await console_.waitOpen(1500)).toBe(false);
    expect(console_.slice(0)).toContain('cannot open /dev/null: it is not a terminal');
    // One note per outage, not one a second.
    await new Promise((r) => setTimeout(r, 2500));
    expect(console_.lines(0).filter((l) => l.text.includes('cannot open'))).toHaveLength(1);
  });
});
