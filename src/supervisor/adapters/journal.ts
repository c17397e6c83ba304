/**
 * The journal adapter: runs journalctl (never through a shell) for a POST /v2/journal-logs
 * query and hands back its stdout. On a board it reads journald's files; on a simulated
 * device the same code reads the sim's files through `directory`.
 *
 * execa is loaded by the first read, not with the supervisor: a device's journal is read
 * rarely, and setting up execa at start took 0.9-1.0 MiB of the device bundle's idle RSS on
 * Node 24 (bench/supervisor-idle.bench.ts).
 */
import { PassThrough, type Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import type { Result } from 'execa';
import { FleetlabError, badRequest } from '../../errors.js';
import { requireTool, tools } from '../../tools.js';
import type { JournalFormat, JournalPort, JournalQuery, JournalScope } from './ports.js';

export interface JournalAdapterOptions {
  /** journalctl to run; default: looked up on PATH. */
  journalctlPath?: string;
  /** `journalctl --directory`: read journal files from here instead of the system journal. */
  directory?: string;
}

/** journalctl's stdout, plus the child's pid for logs and for tests that check it is gone. */
export interface JournalStream extends Readable {
  readonly pid: number | undefined;
}

export interface JournalAdapter extends JournalPort {
  stream(query: JournalQuery, signal: AbortSignal, scope?: JournalScope): Promise<JournalStream>;
  /**
   * Lets journalctl parse since/until before any byte is streamed, so the API can answer 400
   * instead of a 200 stream that fails. Rejects like stream() would; resolves when there is
   * nothing to check.
   */
  check(query: JournalQuery): Promise<void>;
}

export const journalFormats = [
  'short', 'short-full', 'short-iso', 'short-iso-precise', 'short-precise', 'short-monotonic',
  'short-unix', 'verbose', 'export', 'json', 'json-pretty', 'json-sse', 'json-seq', 'cat',
  'with-unit', 'short-delta',
] as const satisfies readonly JournalFormat[];

// Fails to compile when ports.ts gains a format this list does not accept.
const everyFormatListed: [Exclude<JournalFormat, (typeof journalFormats)[number]>] extends [never] ? true : never = true;
void everyFormatListed;

// Unit names are at most 256 characters (systemd's UNIT_NAME_MAX); timestamps are short.
const MAX_LENGTH = { unit: 256, containerId: 64, since: 128, until: 128 } as const;
const STDERR_KEEP = 4096;
// journalctl reads --lines into a C int.
const MAX_COUNT = 2 ** 31 - 1;

function checkArgString(field: keyof typeof MAX_LENGTH, value: unknown): asserts value is string | undefined {
  if (value === undefined) return;
  if (typeof value !== 'string' || value.trim().length === 0) throw badRequest(`${field} must be a non-empty string`);
  if (value.startsWith('-')) throw badRequest(`${field} must not start with "-"`);
  if (/[\0\r\n]/.test(value)) throw badRequest(`${field} must not contain NUL or line breaks`);
  if (value.length > MAX_LENGTH[field]) throw badRequest(`${field} must be at most ${MAX_LENGTH[field]} characters`);
}

function checkBoolean(field: 'all' | 'follow', value: unknown): void {
  if (value !== undefined && typeof value !== 'boolean') throw badRequest(`${field} must be a boolean`);
}

/** Throws badRequest naming the first field journalctl would misread. */
export function validateJournalQuery(query: JournalQuery): void {
  if (query === null || typeof query !== 'object') throw badRequest('body must be an object');
  checkBoolean('all', query.all);
  checkBoolean('follow', query.follow);
  if (query.count !== undefined && !(Number.isSafeInteger(query.count) && query.count > 0)) {
    throw badRequest('count must be a positive integer');
  }
  if (query.count !== undefined && query.count > MAX_COUNT) throw badRequest(`count must be at most ${MAX_COUNT}`);
  checkArgString('unit', query.unit);
  checkArgString('containerId', query.containerId);
  checkArgString('since', query.since);
  checkArgString('until', query.until);
  if (query.format !== undefined && !(journalFormats as readonly unknown[]).includes(query.format)) {
    throw badRequest(`format must be one of ${journalFormats.join(', ')}`);
  }
}

const FULL_ID = /^[0-9a-f]{64}$/i;

/**
 * The scope's containers that the query's own `containerId` (if any) names, with the same
 * meaning as unscoped: a full id in any case, or the 12-digit id. The query's id is resolved
 * here rather than passed to journalctl beside the scope's ids, because journalctl ORs matches
 * on one field: another app's full id would widen the read instead of narrowing it.
 */
export function scopedContainerIds(query: JournalQuery, scope: JournalScope): string[] {
  const ids = scope.containerIds.map((id) => {
    if (!FULL_ID.test(id)) throw new FleetlabError('SUP_ERR_INTERNAL', `journal scope: ${JSON.stringify(id)} is not a full container id`);
    return id.toLowerCase();
  });
  const wanted = query.containerId;
  if (wanted === undefined) return ids;
  return ids.filter((id) => (FULL_ID.test(wanted) ? id === wanted.toLowerCase() : id.slice(0, 12) === wanted));
}

/**
 * journalctl arguments for a validated query. Every value is glued to its option with "="
 * (or to its field name, for the container match), so no value can be read as an option.
 * A scope adds one CONTAINER_ID_FULL match per container it allows: journalctl ORs those
 * and ANDs them with the unit's match, so a unit cannot reach past the scope.
 */
export function journalctlArgs(query: JournalQuery, directory?: string, scope?: JournalScope): string[] {
  const args = ['--no-pager'];
  if (directory !== undefined) args.push(`--directory=${directory}`);
  if (query.all) args.push('--all');
  if (query.follow) args.push('--follow');
  if (query.count !== undefined) args.push(`--lines=${query.count}`);
  if (query.unit !== undefined) args.push(`--unit=${query.unit}`);
  if (query.since !== undefined) args.push(`--since=${query.since}`);
  if (query.until !== undefined) args.push(`--until=${query.until}`);
  if (query.format !== undefined) args.push(`--output=${query.format}`);
  if (scope) {
    const ids = scopedContainerIds(query, scope);
    // No match at all would read the whole journal: the caller must not run journalctl.
    if (ids.length === 0) throw new FleetlabError('SUP_ERR_INTERNAL', 'journal scope allows no container: nothing to run journalctl for');
    for (const id of ids) args.push(`CONTAINER_ID_FULL=${id}`);
  } else if (query.containerId !== undefined) {
    // Docker's journald driver writes both: the 12-digit CONTAINER_ID and CONTAINER_ID_FULL.
    // Engines print ids in lowercase; a full id typed in capitals still means that container.
    const full = FULL_ID.test(query.containerId);
    args.push(full ? `CONTAINER_ID_FULL=${query.containerId.toLowerCase()}` : `CONTAINER_ID=${query.containerId}`);
  }
  return args;
}

/**
 * journalctl matches a unit with a glob character (`*`, `?`, `[`) against the units in the
 * journal when it starts, and exits 1 when none matches; a plain name that matches nothing
 * just shows nothing.
 */
const UNIT_PATTERN = /[*?[]/;
const isUnmatchedUnitPattern = (stderr: string) => stderr.includes('Failed to add filter for units: No data available');

/** The error journalctl's exit means: its own parse errors are the client's fault. */
function exitError(result: Result, stderr: string, query: JournalQuery): FleetlabError {
  const text = stderr.trim();
  // journalctl ends the line with the value as given, so a value with trailing blanks leaves
  // them at the end of stderr, and trimming may have taken the space after the colon too.
  const unparsed = /Failed to parse timestamp:[ ]?(.*)/.exec(stderr)?.[1];
  if (unparsed !== undefined) {
    const field = unparsed === query.until && unparsed !== query.since ? 'until' : 'since';
    return badRequest(`${field} is not a time journalctl understands: ${JSON.stringify(unparsed)}`);
  }
  if (text.includes('--since= must be before --until=')) return badRequest('since must be before until');
  if (isUnmatchedUnitPattern(text)) {
    // Only a follow gets here (check() or stream()): the pattern is not matched again later,
    // so the stream could never show an entry.
    return badRequest(`unit ${JSON.stringify(query.unit)} matches no unit in the journal; a pattern is matched once, when the read starts, so follow a unit by its full name`);
  }
  const how = result.exitCode !== undefined ? `exited with code ${result.exitCode}` : `failed (${result.shortMessage})`;
  return new FleetlabError('SUP_ERR_INTERNAL', `journalctl ${how}${text ? `: ${text}` : ''}`);
}

async function runJournalctl(path: string, args: string[], signal?: AbortSignal) {
  const { execa } = await import('execa');
  const child = execa(path, args, {
    stdin: 'ignore',
    stdout: 'pipe',
    stderr: 'pipe',
    buffer: false,
    reject: false,
    ...(signal ? { cancelSignal: signal } : {}),
    killSignal: 'SIGTERM',
  });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (text: string) => {
    stderr = (stderr + text).slice(0, STDERR_KEEP);
  });
  return { child, stderr: () => stderr };
}

export function createJournalAdapter(options: JournalAdapterOptions = {}): JournalAdapter {
  const { directory } = options;
  // Looked up per call: a missing journalctl fails the request that needs it with a message
  // saying what to install, not the whole supervisor at start.
  const journalctl = () =>
    options.journalctlPath !== undefined
      ? requireTool({ candidates: [options.journalctlPath], debianPackage: tools.journalctl.debianPackage })
      : requireTool(tools.journalctl);

  async function stream(query: JournalQuery, signal: AbortSignal, scope?: JournalScope): Promise<JournalStream> {
    validateJournalQuery(query);
    const path = journalctl();
    const out = new PassThrough() as PassThrough & { pid: number | undefined };
    // A scope with none of its containers left in the query has nothing to show, follow or not.
    if (signal.aborted || (scope && scopedContainerIds(query, scope).length === 0)) {
      out.pid = undefined;
      out.end();
      return out;
    }
    const { child, stderr } = await runJournalctl(path, journalctlArgs(query, directory, scope), signal);
    out.pid = child.pid;
    let exited = false;
    child.stdout.pipe(out, { end: false });
    // The consumer dropping the stream (client gone without an abort) must not leave
    // journalctl --follow running.
    out.once('close', () => {
      if (!exited) child.kill('SIGTERM');
    });
    // End only once the child is reaped, so "the stream ended" also means "journalctl is gone".
    void Promise.all([finished(child.stdout).catch(() => undefined), child]).then(([, result]) => {
      exited = true;
      if (out.destroyed) return;
      // A unit pattern that matches no unit means no entries, as a name that matches none does.
      if (result.exitCode === 0 || result.isCanceled || (!query.follow && isUnmatchedUnitPattern(stderr()))) out.end();
      else out.destroy(exitError(result, stderr(), query));
    });
    return out;
  }

  async function check(query: JournalQuery): Promise<void> {
    validateJournalQuery(query);
    // A followed unit pattern is matched here too: a follow's head goes out before journalctl
    // has said anything, so this is its last chance to be a 400.
    const unit = query.follow && query.unit !== undefined && UNIT_PATTERN.test(query.unit) ? query.unit : undefined;
    if (query.since === undefined && query.until === undefined && unit === undefined) return;
    const path = journalctl();
    // --lines=0 parses the times, matches the pattern and opens the journal without printing an entry.
    const args = [...journalctlArgs({ since: query.since, until: query.until, unit }, directory), '--lines=0', '--quiet'];
    const { child, stderr } = await runJournalctl(path, args);
    child.stdout.resume();
    const result = await child;
    if (result.exitCode !== 0) throw exitError(result, stderr(), query);
  }

  return { stream, check };
}
