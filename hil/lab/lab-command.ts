/**
 * `fleetlab lab ...`: what a lab file's boards are doing (status, log), handing a board back
 * (release), running a command on a leased board (run), the way a CI job shares the lab, and
 * checking the boards' health (check, watch).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { hostname, tmpdir, userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import { openDatabase } from '../../src/cloud/db/open.js';
import type { Db } from '../../src/cloud/db/port.js';
import { errorText } from '../../src/errors.js';
import { ownerRecord, reapStale, writeOwner } from '../../src/owned-dirs.js';
import { BOARD_CONFIG_VARIABLE } from './board-config.js';
import { labError, parseLabFile, type Lab, type LabBoard } from './lab-file.js';
import { leaseBoard, type LeaseBoardOptions } from './lease-board.js';
import { LeaseStore, type Lease, type StoredCheck } from './lease-store.js';
import { checkBoard } from './health-probes.js';
import { checkRound, watchLab } from './lab-watch.js';
import { countsText } from './flake-attribution.js';
import { hideUrlPassword } from '../../src/hide-url-password.js';
import { alignColumns } from '../lib/text-table.js';
import { withDeadline } from '../../src/wait.js';

export interface OpenLab {
  lab: Lab;
  store: LeaseStore;
  close(): Promise<void>;
}

/** Reads and parses the lab file. */
export function readLab(file: string): Lab {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw labError(file, `cannot read it (${errorText(err)}); write one like this, or name yours with --lab`);
  }
  return parseLabFile(text, file, { home: process.env.HOME });
}

/** Reads the lab file and opens its lease store. */
export async function openLab(file: string): Promise<OpenLab> {
  const lab = readLab(file);
  let db: Db | undefined;
  try {
    if (lab.store.startsWith('sqlite:')) mkdirSync(dirname(lab.store.slice('sqlite:'.length)), { recursive: true });
    const opened = (db = openDatabase(lab.store, 2));
    return { lab, store: await LeaseStore.open(opened), close: () => opened.close() };
  } catch (err) {
    // A pool left open would keep the command from ending.
    await db?.close().catch(() => undefined);
    throw labError(file, `cannot open the lease store ${hideUrlPassword(lab.store)}: ${errorText(err)}`, { example: false });
  }
}

/** user@host, as the lab shows who holds a board. */
export function whoAmI(): string {
  return `${userInfo().username}@${hostname()}`;
}

const when = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');

/** Whether something accepts TCP connections at host:port within `ms`. */
function reachable(host: string, port: number, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(ms, () => done(false));
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

/** The supervisor on a board: its version with the board's key, or whether it answers /ping. */
async function supervisorOf(board: LabBoard, ms: number): Promise<string> {
  const get = (path: string, signal: AbortSignal, key?: string) => fetch(`${board.config.apiUrl}${path}`, { signal, ...(key ? { headers: { authorization: `Bearer ${key}` } } : {}) });
  try {
    return await withDeadline(ms, async (signal) => {
      if (board.config.apiKey) {
        const r = await get('/v2/version', signal, board.config.apiKey);
        if (r.ok) return `v${((await r.json()) as { version: string }).version}`;
      }
      return (await get('/ping', signal)).ok ? 'up' : 'not answering';
    });
  } catch {
    return 'not answering';
  }
}

/** A board's last check, as status shows it: when (on the store's clock) and how it went. */
export function checkText(check: StoredCheck | undefined, now: number): string {
  if (!check) return 'never checked';
  const ago = Math.max(0, Math.round((now - check.at) / 1000));
  const age = ago < 120 ? `${ago} s` : ago < 7200 ? `${Math.round(ago / 60)} min` : `${Math.round(ago / 3600)} h`;
  return `checked ${age} ago: ${check.ok ? 'passed' : `failed at ${check.failedStep ?? '?'}`}`;
}

/**
 * What a run passes leaseBoard to check a board before it is given (only with a `health`
 * section in the lab file), and where it says what a check did.
 */
export function leaseChecks(log: (line: string) => void): Pick<LeaseBoardOptions, 'check' | 'onCheck'> {
  return {
    check: checkBoard,
    onCheck: (board, result, outcome) => log(result.ok ? `${board}: health check passed (${outcome})` : `${board}: health check failed at ${result.reason}: ${outcome}; trying another board`),
  };
}

/**
 * One line per board: reachable over SSH, its supervisor, its last check, its tests' outcomes
 * over its last runs (the lab file's `flakes.runs`), and who holds it until when.
 */
export async function labStatus(open: OpenLab, probeMs = 2000): Promise<string[]> {
  const [leases, offline, now, checks, counts] = await Promise.all([open.store.current(), open.store.offline(), open.store.clock(), open.store.lastChecks(), open.store.boardCounts(open.lab.flakes.runs)]);
  const rows = await Promise.all(
    open.lab.boards.map(async (b) => {
      const ssh = (await reachable(b.config.host, b.config.sshPort, probeMs)) ? 'reachable' : 'unreachable';
      const sup = ssh === 'reachable' ? await supervisorOf(b, probeMs) : '-';
      const lease = leases.get(b.name);
      const out = offline.get(b.name);
      const held = out
        ? out.kind === 'quarantined'
          ? `QUARANTINED since ${when(out.since)} (${out.reason}; by ${out.markedBy}); back when it passes a check (fleetlab lab check ${b.name}) or by fleetlab lab online ${b.name}`
          : `OFFLINE since ${when(out.since)} (${out.reason}; marked by ${out.markedBy}); fleetlab lab online ${b.name} once fixed`
        : lease
          ? `leased by ${lease.holder} until ${when(lease.expiresAt)} (${Math.max(0, Math.round((lease.expiresAt - now) / 1000))} s, renewed while it runs)`
          : 'free';
      // The check column only in a lab that checks its boards: status of a lab without one reads as before.
      // Likewise the outcomes column, once a run has kept any.
      return [b.name, `[${b.tags.join(', ')}]`, `${b.config.host}:${b.config.sshPort}`, ssh, `supervisor ${sup}`, ...(open.lab.health ? [checkText(checks.get(b.name), now)] : []), ...(counts.size ? [countsText(counts.get(b.name))] : []), held];
    }),
  );
  return [`lab ${open.lab.source}: ${open.lab.boards.length} board(s), leases in ${hideUrlPassword(open.lab.store)} (time to live ${open.lab.ttlSeconds} s)`, ...alignColumns(rows)];
}

/** The lease log, one line per event. */
export async function labLog(open: OpenLab, board?: string): Promise<string[]> {
  if (board) boardNamed(open.lab, board);
  return (await open.store.history(board)).map((e) => `${when(e.at)}  ${e.board}  ${e.event.padEnd(8)}  ${e.holder}  lease ${e.lease}${e.detail ? `  (${e.detail})` : ''}`);
}

function boardNamed(lab: Lab, name: string): LabBoard {
  const b = lab.boards.find((x) => x.name === name);
  if (!b) throw labError(lab.source, `no board called ${name}; boards: ${lab.boards.map((x) => x.name).join(', ')}`, { example: false });
  return b;
}

/** Puts a board marked offline or quarantined back in the lab (logged with who did it). */
export async function labOnline(open: OpenLab, board: string): Promise<string> {
  boardNamed(open.lab, board);
  return (await open.store.markOnline(board, whoAmI())) ? `${board} is back in the lab (logged as online by ${whoAmI()})` : `${board} was not offline`;
}

/** Checks the named boards (all when none) now: one line per board, and whether every check passed. */
export async function labCheck(open: OpenLab, boards: readonly string[]): Promise<{ lines: string[]; ok: boolean }> {
  const lines = await checkRound(open.store, open.lab, { check: checkBoard, by: `${whoAmI()} pid ${process.pid} (lab check)`, names: boards });
  return { lines: lines.map((l) => l.text), ok: lines.every((l) => l.outcome === 'passed' || l.outcome === 'passed, back in the lab' || l.outcome === 'skipped' || l.outcome === 'busy') };
}

/**
 * Serves the lab page on `host:port` until SIGINT or SIGTERM; `adminKey` opens online and
 * release to requests bearing it. Says where once listening.
 */
export async function labServe(open: OpenLab, opts: { host: string; port: number; adminKey?: string; log: (line: string) => void }): Promise<void> {
  const { buildLabServer } = await import('./lab-serve.js');
  const app = buildLabServer(open.store, open.lab, opts.adminKey === undefined ? {} : { adminKey: opts.adminKey });
  let stop: () => void = () => undefined;
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const url = await app.listen({ host: opts.host, port: opts.port });
    opts.log(`lab page of ${open.lab.source} at ${url}/ (${opts.adminKey ? 'admin key set: online and release open to it' : 'read-only'}); stop with Ctrl-C`);
    await stopped;
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    await app.close();
  }
}

/** Checks every board on the lab file's schedule until SIGINT or SIGTERM (or `rounds` rounds). */
export async function labWatch(open: OpenLab, opts: { log: (line: string) => void; rounds?: number }): Promise<void> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await watchLab(open.store, open.lab, { check: checkBoard, by: `${whoAmI()} pid ${process.pid} (lab watch)`, log: opts.log, signal: stop.signal, ...(opts.rounds === undefined ? {} : { rounds: opts.rounds }) });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/**
 * Ends `board`'s lease. Another run's lease needs `force`, and is logged as forced with who
 * did it: that run loses its board at its next heartbeat.
 */
export async function labRelease(open: OpenLab, board: string, force: boolean): Promise<string> {
  boardNamed(open.lab, board);
  const lease = (await open.store.current()).get(board);
  if (!lease) return `${board} is free`;
  if (!force) throw labError(open.lab.source, `${board} is leased by ${lease.holder} until ${when(lease.expiresAt)}; ending another run's lease takes --force (it is logged)`, { example: false });
  const ended: Lease | null = await open.store.forceRelease(board, whoAmI());
  return ended ? `${board}: ended the lease of ${ended.holder} (logged as forced by ${whoAmI()})` : `${board} is free`;
}

/** The directory of a run's board config, under TMPDIR. */
const LAB_DIR_PREFIX = 'fleetlab-lab-';

/**
 * Leases a board with `tags`, runs `command` with FLEETLAB_BOARD_CONFIG naming that board's
 * config (and FLEETLAB_LAB_BOARD its name), and gives the board back when it ends. If the
 * lease is lost meanwhile the command is stopped. Resolves to the command's exit code.
 */
export async function labRun(open: OpenLab, opts: { tags: string[]; command: string[]; waitMs: number; log: (line: string) => void; holder?: string }): Promise<number> {
  const holder = opts.holder ?? `${whoAmI()} pid ${process.pid}`;
  const abort = new AbortController();
  const stopWaiting = () => abort.abort();
  process.once('SIGINT', stopWaiting);
  process.once('SIGTERM', stopWaiting);
  let held;
  try {
    held = await leaseBoard(open.store, open.lab, {
      tags: opts.tags,
      holder,
      waitMs: opts.waitMs,
      signal: abort.signal,
      onQueue: (position, busy) => opts.log(position === 0 ? `boards busy (${busy.join(', ')}); next in line` : `boards busy (${busy.join(', ')}); waiting, ${position} run(s) ahead in the queue`),
      ...leaseChecks(opts.log),
    });
  } finally {
    process.off('SIGINT', stopWaiting);
    process.off('SIGTERM', stopWaiting);
  }
  // A run killed with -9 could not remove its board's config: the next run to get a board does.
  await reapStale(tmpdir(), LAB_DIR_PREFIX);
  const dir = await mkdtemp(join(tmpdir(), LAB_DIR_PREFIX));
  writeOwner(dir, ownerRecord());
  try {
    opts.log(`leased ${held.board.name} [${held.board.tags.join(', ')}] (${held.board.config.host}) as ${holder}`);
    const configFile = join(dir, `${held.board.name}.json`);
    writeFileSync(configFile, `${JSON.stringify(held.board.raw, null, 2)}\n`, { mode: 0o600 });
    const child = spawn(opts.command[0]!, opts.command.slice(1), { stdio: 'inherit', env: { ...process.env, [BOARD_CONFIG_VARIABLE]: configFile, FLEETLAB_LAB_BOARD: held.board.name } });
    const forward = (sig: NodeJS.Signals) => () => child.kill(sig);
    const onInt = forward('SIGINT');
    const onTerm = forward('SIGTERM');
    process.on('SIGINT', onInt);
    process.on('SIGTERM', onTerm);
    let lostLease = false;
    void held.lost.then((err) => {
      lostLease = true;
      opts.log(`${err.message}; stopping the command`);
      child.kill('SIGTERM');
    });
    const code = await new Promise<number>((resolve, reject) => {
      child.once('error', (err) => reject(labError(open.lab.source, `cannot run ${opts.command[0]}: ${err.message}`, { example: false })));
      child.once('exit', (c, signal) => resolve(c ?? (signal ? 128 + (signal === 'SIGKILL' ? 9 : signal === 'SIGINT' ? 2 : 15) : 1)));
    });
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
    if (lostLease) throw labError(open.lab.source, `the lease on ${held.board.name} was lost while the command ran (exit ${code}); the board may have been given to another run`, { example: false });
    return code;
  } finally {
    await held.release();
    opts.log(`released ${held.board.name}`);
    await rm(dir, { recursive: true, force: true });
  }
}

