/**
 * The simulated journal peer: a systemd-journal-remote process that turns a Journal Export
 * Format stream on its stdin into a real journal file, read back by the production journal
 * adapter with `journalctl --directory`. No fake reader: the sim only writes.
 *
 * Visibility: journal-remote appends each entry as soon as it has read the empty line that
 * ends it (measured on systemd 252: under 2 ms after the pipe write, and `journalctl
 * --follow` is woken within the same millisecond). There is no buffering setting to tune, but
 * "written to the pipe" is not "in the file", so callers that read right after writing await
 * `flush()`, which waits until the file's header counts every entry written so far.
 *
 * Gotchas worth knowing when using this peer:
 * - `journalctl --follow` implies "current boot" and, with --directory, that is the last
 *   boot in the files: on a journal with no entry of that boot it exits 1 ("Data from the
 *   specified boot (+0) is not available"). A real boot always starts with the kernel's
 *   messages, so each simulated boot (the first and every `newBoot()`) starts with one kernel
 *   entry too; a follow started before `newBoot()` does not show the new boot's entries (a
 *   real device kills it on reboot anyway).
 * - journalctl expects realtime timestamps that do not go backwards within a file (its
 *   --since/--until bisect the file). Entries without `timestamp` never go backwards; entries
 *   with one are written as given, so callers writing explicit times keep them in order,
 *   unless they mean to reproduce a clock jump (a Raspberry Pi has no RTC).
 */
import { once } from 'node:events';
import { openSync, readSync, closeSync, readdirSync, existsSync } from 'node:fs';
import { release } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import { execa } from 'execa';
import { FleetlabError, badRequest } from '../../src/errors.js';
import { requireTool, tools } from '../../src/tools.js';
import { until } from '../../src/wait.js';
import { encodeEntry, type TrustedField } from './export-format.js';

/** The unit the simulated device journals the supervisor process's output under. */
export const supervisorUnit = 'fleetlab-supervisor.service';

export type Transport = 'journal' | 'stdout' | 'syslog' | 'kernel';

/** What an entry says about its source; everything but the message. */
export interface SimEntryMeta {
  /** _SYSTEMD_UNIT, what `journalctl --unit` matches. */
  unit?: string;
  /** SYSLOG_IDENTIFIER, what `journalctl --identifier` matches and short formats print. */
  identifier?: string;
  /** 0 (emerg) to 7 (debug); default 6 (info). */
  priority?: number;
  /** _PID */
  pid?: number;
  /** _TRANSPORT; default "journal" for write(), "stdout" for pipeLines(). */
  transport?: Transport;
  /** Extra user fields: A-Z0-9_ names, not starting with "_". */
  fields?: Record<string, string>;
}

export interface SimEntry extends SimEntryMeta {
  message: string;
  /** __REALTIME_TIMESTAMP; default now (never earlier than the previous entry). */
  timestamp?: Date;
}

export interface ContainerLogSource {
  /** Full 64-hex-digit container id. */
  id: string;
  name: string;
  imageName?: string;
  /** Unit of the engine (docker.service, balena.service): dockerd is the sender. */
  engineUnit?: string;
}

export interface JournalSimOptions {
  directory: string;
  /** journal-remote's environment (default: this process's), e.g. with a session label. */
  env?: NodeJS.ProcessEnv;
  /** Its own process group, out of reach of a Ctrl-C meant for its owner, which closes it in order. */
  detached?: boolean;
  /** _HOSTNAME of every entry; default "fleetlab-sim". */
  hostname?: string;
}

export interface JournalSim extends AsyncDisposable {
  readonly directory: string;
  /** The journal file journal-remote writes. */
  readonly file: string;
  /** _BOOT_ID of entries written now (32 lowercase hex digits). */
  readonly bootId: string;
  readonly machineId: string;
  /** Resolves once the entry is written to journal-remote's stdin; see flush(). */
  write(entry: SimEntry): Promise<void>;
  /** Journals each line of `readable` until it ends; resolves when the last line is written. */
  pipeLines(readable: Readable, meta: SimEntryMeta): Promise<void>;
  /** Resolves once every entry written so far is readable by journalctl. */
  flush(): Promise<void>;
  /** Starts a simulated boot: a new boot id, monotonic time from near zero. Returns the id. */
  newBoot(): string;
  /** Ends the stream and waits for journal-remote to exit. */
  close(): Promise<void>;
  /** Ends journal-remote at once (a forced stop); entries not yet written are lost. */
  kill(): void;
}

// journald splits longer stdout lines (LineMax= default 48K); so does the sim.
const MAX_LINE_BYTES = 48 * 1024;
const MAX_TEXT = 256;
const STDERR_KEEP = 4096;
// Pretend the kernel ran this long before the first entry of a boot.
const BOOT_UPTIME_US = 3_000_000n;
const FLUSH_TIMEOUT_MS = 5_000;
const FLUSH_POLL_MS = 5;
// struct Header in systemd's journal-def.h: le64 n_entries at byte 152.
const HEADER_N_ENTRIES_OFFSET = 152;

const newId128 = () => randomUUID().replace(/-/g, '');

/**
 * The docker journald log driver's fields for a container's log lines (CONTAINER_TAG and
 * SYSLOG_IDENTIFIER are the default log tag, the 12-digit id), so filters written against a
 * real engine match the sim too.
 */
export function containerLogMeta(container: ContainerLogSource): SimEntryMeta {
  if (!/^[0-9a-f]{64}$/.test(container.id)) throw badRequest('container.id must be 64 lowercase hex digits');
  const shortId = container.id.slice(0, 12);
  const fields: Record<string, string> = {
    CONTAINER_ID: shortId,
    CONTAINER_ID_FULL: container.id,
    CONTAINER_NAME: container.name,
    CONTAINER_TAG: shortId,
  };
  if (container.imageName !== undefined) fields.IMAGE_NAME = container.imageName;
  return { identifier: shortId, transport: 'journal', fields, ...(container.engineUnit ? { unit: container.engineUnit } : {}) };
}

function checkText(field: string, value: string | undefined): void {
  if (value === undefined) return;
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_TEXT || /[\x00-\x1f\x7f]/.test(value)) {
    throw badRequest(`${field} must be a non-empty single-line string of at most ${MAX_TEXT} characters`);
  }
}

function checkMeta(meta: SimEntryMeta): void {
  checkText('unit', meta.unit);
  checkText('identifier', meta.identifier);
  if (meta.priority !== undefined && !(Number.isInteger(meta.priority) && meta.priority >= 0 && meta.priority <= 7)) {
    throw badRequest('priority must be an integer from 0 to 7');
  }
  if (meta.pid !== undefined && !(Number.isSafeInteger(meta.pid) && meta.pid > 0)) {
    throw badRequest('pid must be a positive integer');
  }
  for (const name of ['MESSAGE', 'PRIORITY', 'SYSLOG_IDENTIFIER'] as const) {
    if (meta.fields && Object.hasOwn(meta.fields, name)) {
      throw badRequest(`fields.${name}: set it with its own option, not through fields`);
    }
  }
}

/** Sum of n_entries over sim.journal and the files journal-remote rotated it into. */
function entriesOnDisk(directory: string, stem: string): number {
  let total = 0;
  for (const name of readdirSync(directory)) {
    if (!name.startsWith(stem) || !name.endsWith('.journal')) continue;
    const fd = openSync(join(directory, name), 'r');
    try {
      const buf = Buffer.alloc(8);
      if (readSync(fd, buf, 0, 8, HEADER_N_ENTRIES_OFFSET) === 8) total += Number(buf.readBigUInt64LE());
    } finally {
      closeSync(fd);
    }
  }
  return total;
}

export async function startJournalSim(options: JournalSimOptions): Promise<JournalSim> {
  const remote = requireTool(tools.journalRemote);
  const directory = options.directory;
  const hostname = options.hostname ?? 'fleetlab-sim';
  checkText('hostname', hostname);
  const stem = 'sim';
  const file = join(directory, `${stem}.journal`);
  const machineId = newId128();

  const child = execa(remote, [`--output=${file}`, '-'], {
    stdin: 'pipe',
    stdout: 'ignore',
    stderr: 'pipe',
    buffer: false,
    reject: false,
    ...(options.env ? { env: options.env, extendEnv: false } : {}),
    detached: options.detached ?? false,
  });
  let stderrTail = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (text: string) => {
    stderrTail = (stderrTail + text).slice(-STDERR_KEEP);
  });
  let exited = false;
  const done = child.then((result) => {
    exited = true;
    return result;
  });

  // journal-remote's stderr explains why it stopped or refused an entry.
  const failure = (what: string, withStderr = true) =>
    new FleetlabError('SUP_ERR_INTERNAL', `journal sim: ${what}${withStderr && stderrTail ? `: ${stderrTail.trim()}` : ''}`);

  await Promise.race([
    once(child, 'spawn'),
    done.then(() => {
      throw failure('systemd-journal-remote exited at start');
    }),
  ]);
  // journal-remote creates the file before reading any input (or exits if it cannot), so
  // its appearance is the readiness signal; "spawned" alone says nothing about the path.
  await until(`systemd-journal-remote creates ${file}`, async () => existsSync(file), (made) => made, {
    timeoutMs: FLUSH_TIMEOUT_MS,
    intervalMs: FLUSH_POLL_MS,
    // A file made just before the exit still counts, as a look at the disk would say.
    alive: () => !exited || existsSync(file),
    fail: async () => {
      child.kill();
      await done;
      return failure(`systemd-journal-remote did not create ${file}`);
    },
  });

  let bootId = newId128();
  let bootStart = process.hrtime.bigint();
  let lastRealtimeUs = 0n;
  let submitted = 0;
  let lastWrite: Promise<void> = Promise.resolve();
  let closing: Promise<void> | undefined;

  function realtimeUs(timestamp: Date | undefined): bigint {
    if (timestamp !== undefined) {
      const ms = timestamp instanceof Date ? timestamp.getTime() : NaN;
      if (!Number.isFinite(ms) || ms < 0) throw badRequest('timestamp must be a valid Date after 1970');
      return BigInt(ms) * 1000n;
    }
    const now = BigInt(Date.now()) * 1000n;
    return now > lastRealtimeUs ? now : lastRealtimeUs + 1n;
  }

  function append(entry: SimEntry, defaultTransport: Transport): Promise<void> {
    if (closing) return Promise.reject(failure('write after close', false));
    if (exited) return Promise.reject(failure('systemd-journal-remote has exited'));
    if (typeof entry.message !== 'string') return Promise.reject(badRequest('message must be a string'));
    try {
      checkMeta(entry);
    } catch (err) {
      return Promise.reject(err);
    }
    let bytes: Buffer;
    try {
      const realtime = realtimeUs(entry.timestamp);
      lastRealtimeUs = realtime > lastRealtimeUs ? realtime : lastRealtimeUs;
      const trusted: Partial<Record<TrustedField, string>> = {
        __REALTIME_TIMESTAMP: realtime.toString(),
        __MONOTONIC_TIMESTAMP: (BOOT_UPTIME_US + (process.hrtime.bigint() - bootStart) / 1000n).toString(),
        _BOOT_ID: bootId,
        _MACHINE_ID: machineId,
        _HOSTNAME: hostname,
        _TRANSPORT: entry.transport ?? defaultTransport,
        _SYSTEMD_UNIT: entry.unit,
        _PID: entry.pid?.toString(),
      };
      const user: Record<string, string> = {
        MESSAGE: entry.message,
        PRIORITY: String(entry.priority ?? 6),
        ...(entry.identifier !== undefined ? { SYSLOG_IDENTIFIER: entry.identifier } : {}),
      };
      bytes = encodeEntry(trusted, { ...user, ...entry.fields });
    } catch (err) {
      return Promise.reject(err);
    }
    submitted += 1;
    const written = new Promise<void>((resolve, reject) => {
      child.stdin.write(bytes, (err) => (err ? reject(failure(`write failed (${err.message})`)) : resolve()));
    });
    lastWrite = written.catch(() => undefined);
    return written;
  }

  // A write that fails here fails every later write and flush() too, which report it.
  const kernelBanner = () => void append({ message: `Linux version ${release()} (fleetlab simulated boot)`, identifier: 'kernel', priority: 5 }, 'kernel').catch(() => undefined);

  async function flush(): Promise<void> {
    await lastWrite;
    const target = submitted;
    const written = () => entriesOnDisk(directory, stem) >= target;
    await until(`${target} entries in ${file}`, async () => written(), (all) => all, {
      timeoutMs: FLUSH_TIMEOUT_MS,
      intervalMs: FLUSH_POLL_MS,
      // Entries written before the exit still count: flush after close must not fail.
      alive: () => !exited || written(),
      fail: (f) => failure(f.end === 'gone' ? 'systemd-journal-remote exited before writing every entry' : `only ${entriesOnDisk(directory, stem)} of ${target} entries reached ${file}`),
    });
  }

  async function pipeLines(readable: Readable, meta: SimEntryMeta): Promise<void> {
    checkMeta(meta);
    const writeLine = (line: Buffer) => append({ ...meta, message: line.toString('utf8') }, 'stdout');
    let rest = Buffer.alloc(0);
    for await (const chunk of readable) {
      let buf = Buffer.concat([rest, typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : (chunk as Buffer)]);
      for (let nl = buf.indexOf(0x0a); nl !== -1; nl = buf.indexOf(0x0a)) {
        await writeLine(buf.subarray(0, nl));
        buf = buf.subarray(nl + 1);
      }
      while (buf.length >= MAX_LINE_BYTES) {
        await writeLine(buf.subarray(0, MAX_LINE_BYTES));
        buf = buf.subarray(MAX_LINE_BYTES);
      }
      rest = buf;
    }
    if (rest.length > 0) await writeLine(rest);
  }

  let killed = false;
  function close(): Promise<void> {
    closing ??= (async () => {
      child.stdin.end();
      const result = await done;
      if (result.exitCode !== 0 && !killed) throw failure(`systemd-journal-remote exited with ${result.exitCode ?? result.signal}`);
    })();
    return closing;
  }

  function kill(): void {
    killed = true;
    if (!exited) child.kill('SIGKILL');
  }

  kernelBanner();
  return {
    directory,
    file,
    get bootId() {
      return bootId;
    },
    machineId,
    write: (entry) => append(entry, 'journal'),
    pipeLines,
    flush,
    newBoot() {
      bootId = newId128();
      bootStart = process.hrtime.bigint();
      kernelBanner();
      return bootId;
    },
    close,
    kill,
    [Symbol.asyncDispose]: close,
  };
}
