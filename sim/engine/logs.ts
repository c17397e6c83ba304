/**
 * Container output, as the json-file log driver keeps it: each line with its stream and time,
 * appended to `<dataDir>/containers/<id>/log.jsonl` so logs survive an engine restart, and
 * framed for clients in the multiplexed stream format (8-byte header: stream, 0, 0, 0,
 * big-endian length) unless the container has a TTY.
 */
import { EventEmitter } from 'node:events';
import { appendFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { WallClock } from './model.js';

export interface LogLine {
  stream: 'stdout' | 'stderr';
  /** ISO time with nanoseconds, as dockerd prints with `timestamps`. */
  time: string;
  ms: number;
  text: string;
}

/** In memory, the newest lines only; the file keeps everything. */
export class LogBook {
  private readonly lines: LogLine[] = [];
  private readonly emitter = new EventEmitter();
  private lastMs = 0;
  private seq = 0;

  constructor(
    private readonly file: string,
    private readonly clock: WallClock,
    private readonly keep: number,
  ) {
    this.emitter.setMaxListeners(0);
    if (existsSync(file)) {
      for (const l of readFileSync(file, 'utf8').split('\n')) {
        if (!l) continue;
        try {
          this.lines.push(JSON.parse(l) as LogLine);
        } catch {
          // a line torn by a kill mid-append: skip it, as dockerd skips a bad json-file line
        }
      }
      if (this.lines.length > keep) this.lines.splice(0, this.lines.length - keep);
    }
  }

  write(stream: LogLine['stream'], text: string): void {
    const now = this.clock();
    // Distinct, increasing nanosecond stamps so `since` and ordering are exact.
    this.seq = now === this.lastMs ? this.seq + 1 : 0;
    this.lastMs = now;
    const time = new Date(now).toISOString().replace(/\.(\d{3})Z$/, (_m, ms: string) => `.${ms}${String(this.seq).padStart(6, '0')}Z`);
    const line: LogLine = { stream, time, ms: now, text };
    mkdirSync(dirname(this.file), { recursive: true });
    appendFileSync(this.file, `${JSON.stringify(line)}\n`);
    this.lines.push(line);
    if (this.lines.length > this.keep) this.lines.shift();
    this.emitter.emit('line', line);
  }

  select(opts: { sinceSec?: number; untilSec?: number; tail?: number }): LogLine[] {
    let out = this.lines.filter((l) => (opts.sinceSec === undefined || l.ms / 1000 >= opts.sinceSec) && (opts.untilSec === undefined || l.ms / 1000 <= opts.untilSec));
    if (opts.tail !== undefined && opts.tail >= 0) out = opts.tail === 0 ? [] : out.slice(-opts.tail);
    return out;
  }

  onLine(fn: (l: LogLine) => void): () => void {
    this.emitter.on('line', fn);
    return () => this.emitter.off('line', fn);
  }
}

export function frame(line: LogLine, opts: { timestamps: boolean; tty: boolean }): Buffer {
  const payload = Buffer.from(`${opts.timestamps ? `${line.time} ` : ''}${line.text}\n`);
  if (opts.tty) return payload;
  const header = Buffer.alloc(8);
  header.writeUInt8(line.stream === 'stdout' ? 1 : 2, 0);
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}
