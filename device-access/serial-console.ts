/**
 * A lab board's serial console, read on the lab host for as long as a worker holds the board:
 * every line the board prints is kept with the time it arrived, and a failed test gets the
 * lines from its start (plus a little before) attached to its report, so what the kernel or
 * systemd said when SSH went quiet is not lost.
 *
 * The device is opened as a terminal (raw, no echo, not our controlling tty) through Node's tty
 * stream, which reads without holding a thread. A console that goes away (a USB adapter
 * powered by the board, an emulated board's QEMU started again) is noted in the capture and
 * opened again every second until it is back.
 */
import { closeSync, constants, openSync } from 'node:fs';
import { ReadStream, isatty } from 'node:tty';
import { execa } from 'execa';
import { errorText } from '../src/errors.js';

export interface ConsoleLine {
  readonly at: number;
  readonly text: string;
}

/** Lines kept per board: hours of a chatty boot log, a few MB at most. */
const MAX_LINES = 50_000;
const REOPEN_MS = 1000;
/** How far before a test's start its slice begins: what led up to it. */
export const SLICE_MARGIN_MS = 5000;
// Colour and cursor sequences from systemd's status lines: noise in a text report.
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-Za-z]/g;

export class SerialConsole {
  readonly #device: string;
  readonly #baud: number;
  readonly #lines: ConsoleLine[] = [];
  #partial = '';
  #stream: ReadStream | undefined;
  #retry: NodeJS.Timeout | undefined;
  #closed = false;
  /** Why the last open failed, noted once per outage rather than every second. */
  #down: string | undefined;
  readonly #opened: Promise<void>;
  #markOpened: () => void = () => undefined;

  constructor(device: string, baud: number) {
    this.#device = device;
    this.#baud = baud;
    this.#opened = new Promise((r) => (this.#markOpened = r));
    void this.#open();
  }

  get device(): string {
    return this.#device;
  }

  /** Resolves once the console has been opened (or after `ms`, for a console that is not there yet). */
  waitOpen(ms: number): Promise<boolean> {
    return Promise.race([this.#opened.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref())]);
  }

  async #open(): Promise<void> {
    if (this.#closed) return;
    let fd: number | undefined;
    try {
      fd = openSync(this.#device, constants.O_RDONLY | constants.O_NOCTTY | constants.O_NONBLOCK);
      if (!isatty(fd)) throw new Error('it is not a terminal (a serial adapter is a tty such as /dev/ttyUSB0)');
      // Node sets raw mode but not the line speed; a pseudo-terminal ignores it.
      const speed = await execa('stty', ['-F', this.#device, String(this.#baud)], { reject: false, all: true });
      if (speed.exitCode !== 0) throw new Error(`stty ${this.#baud}: ${speed.all?.trim()}`);
      const stream = new ReadStream(fd);
      fd = undefined;
      stream.setRawMode(true);
      stream.on('data', (chunk: Buffer) => this.#take(chunk));
      const lost = (why: string) => {
        if (this.#stream !== stream) return;
        this.#stream = undefined;
        stream.destroy();
        this.#note(`${this.#device} went away (${why}); opening it again every ${REOPEN_MS / 1000} s`);
        this.#scheduleOpen();
      };
      stream.on('error', (err) => lost(errorText(err)));
      stream.on('end', () => lost('end of input'));
      this.#stream = stream;
      if (this.#down !== undefined || this.#lines.length > 0) this.#note(`${this.#device} open again`);
      this.#down = undefined;
      this.#markOpened();
    } catch (err) {
      if (fd !== undefined) closeSync(fd);
      const why = errorText(err);
      if (this.#down !== why) this.#note(`cannot open ${this.#device}: ${why}; trying every ${REOPEN_MS / 1000} s`);
      this.#down = why;
      this.#scheduleOpen();
    }
  }

  #scheduleOpen(): void {
    if (this.#closed) return;
    this.#retry = setTimeout(() => void this.#open(), REOPEN_MS);
    this.#retry.unref();
  }

  #take(chunk: Buffer): void {
    const parts = (this.#partial + chunk.toString('utf8')).split('\n');
    this.#partial = parts.pop() ?? '';
    const at = Date.now();
    for (const p of parts) this.#push({ at, text: p.replace(/\r/g, '').replace(ANSI, '') });
  }

  /** The capture's own remarks, in the same log so gaps are visible where they happened. */
  #note(text: string): void {
    this.#push({ at: Date.now(), text: `[fleetlab serial] ${text}` });
  }

  #push(line: ConsoleLine): void {
    this.#lines.push(line);
    if (this.#lines.length > MAX_LINES) this.#lines.splice(0, this.#lines.length - MAX_LINES);
  }

  /** The lines from `sinceMs - SLICE_MARGIN_MS` on, each with its arrival time. */
  lines(sinceMs = 0): ConsoleLine[] {
    const from = sinceMs - SLICE_MARGIN_MS;
    const out = this.#lines.filter((l) => l.at >= from);
    const tail = this.#partial.replace(/\r/g, '').replace(ANSI, '');
    return tail ? [...out, { at: Date.now(), text: tail }] : out;
  }

  /** The slice as text for a report. */
  slice(sinceMs: number): string {
    const lines = this.lines(sinceMs);
    if (lines.length === 0) return `(the board printed nothing on ${this.#device} since ${new Date(sinceMs - SLICE_MARGIN_MS).toISOString()})`;
    return lines.map((l) => `${new Date(l.at).toISOString().slice(11, 23)} ${l.text}`).join('\n');
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retry);
    const stream = this.#stream;
    this.#stream = undefined;
    stream?.destroy();
  }
}
