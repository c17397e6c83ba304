/**
 * The benches' load generator: GETs of one path over raw keep-alive TCP connections, one
 * request in flight per connection, each answer framed by its Content-Length and otherwise
 * left unparsed. A client built on fetch or node:http spends more CPU per request than the
 * supervisor does to answer it; on a 2-core machine that client, not the server, set the
 * `/v1/device` figures. This one costs a few microseconds a request, and `runLoadProcess`
 * runs it in a process of its own, away from the bench's event loop (its peers, its timers,
 * its GC), as wrk or autocannon would be run.
 *
 * Two ways to load: `closed` keeps `connections` requests in flight until `total` are
 * answered (throughput); `paced` sends on a fixed schedule of `rps` whatever the answers do
 * (open loop, so a stall of the server shows), opening another connection when all are busy.
 * Every request is timed from the moment it is written to its answer's last byte.
 *
 *   node dist/bench/http-load.js '{"mode":"closed","port":48484,"path":"/ping","connections":10,"total":10000}'
 *
 * prints one JSON line, a LoadResult.
 */
import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { percentile } from './percentile.js';

interface LoadTarget {
  /** Loopback only: the benches never send traffic elsewhere. */
  host?: '127.0.0.1';
  port: number;
  /** Path and query, sent as is. */
  path: string;
}

export interface ClosedLoad extends LoadTarget {
  mode: 'closed';
  connections: number;
  total: number;
  /** The run stops here even if fewer than `total` were answered. */
  deadlineMs?: number;
}

export interface PacedLoad extends LoadTarget {
  mode: 'paced';
  rps: number;
  total: number;
  /** Past this many connections, a due request waits for one to be free (and is late). */
  maxConnections?: number;
}

export type LoadPlan = ClosedLoad | PacedLoad;

export interface LoadResult {
  /** Requests answered, whatever their status. */
  answered: number;
  /** Answers by status code. */
  statuses: Record<string, number>;
  /** Requests that got no answer (connection error, bad framing). */
  errors: number;
  firstError?: string;
  seconds: number;
  reqPerSec: number;
  latencyMs: { p50: number; p99: number; max: number; mean: number };
  /** Paced only: how late requests were written against their schedule, p99. */
  sendLateP99Ms?: number;
  /** Connections the run opened. */
  connections: number;
}

const DEFAULT_DEADLINE_MS = 300_000;
const DEFAULT_PACED_CONNECTIONS = 200;
/** A run that meets this many failed requests stops: the server is gone or answers garbage. */
const MAX_ERRORS = 100;
const CRLF = Buffer.from('\r\n');
const HEADER_END = Buffer.from('\r\n\r\n');
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i;
const CHUNKED = /\r\ntransfer-encoding:[ \t]*chunked/i;
/** A header section, or a chunk-size line, longer than this has gone wrong. */
const MAX_HEAD = 65_536;

/**
 * Splits a connection's bytes into answers, framed by Content-Length or by chunked
 * encoding. An answer with neither (a body that ends when the connection closes) is
 * refused: a keep-alive load cannot run on it.
 */
export class AnswerFramer {
  private pending: Buffer | undefined;
  /** What the next bytes are: a header section, body bytes to skip, a chunk-size line, or the trailer. */
  private state: 'head' | 'skip' | 'chunk-size' | 'trailer' = 'head';
  private skip = 0;
  /** After the skipped bytes: the answer is complete, or another chunk-size line follows. */
  private afterSkip: 'done' | 'chunk-size' = 'done';
  private status = 0;

  /** Feeds bytes; calls `answer` with each complete answer's status. Throws on bad framing. */
  feed(chunk: Buffer, answer: (status: number) => void): void {
    const buf = this.pending ? Buffer.concat([this.pending, chunk]) : chunk;
    this.pending = undefined;
    let off = 0;
    while (off < buf.length || (this.state === 'skip' && this.skip === 0)) {
      if (this.state === 'skip') {
        const take = Math.min(this.skip, buf.length - off);
        off += take;
        this.skip -= take;
        if (this.skip > 0) return;
        if (this.afterSkip === 'done') {
          this.state = 'head';
          answer(this.status);
        } else this.state = 'chunk-size';
        continue;
      }
      const end = buf.indexOf(this.state === 'head' ? HEADER_END : CRLF, off);
      if (end < 0) {
        this.pending = buf.subarray(off);
        if (this.pending.length > MAX_HEAD) throw new Error(`an answer's ${this.state === 'head' ? 'header' : 'chunk framing'} runs past 64 KiB`);
        return;
      }
      if (this.state === 'head') {
        const head = buf.toString('latin1', off, end);
        const status = /^HTTP\/1\.[01] (\d{3})/.exec(head);
        if (!status) throw new Error(`not an HTTP/1.x answer: ${JSON.stringify(head.slice(0, 40))}`);
        this.status = Number(status[1]);
        off = end + HEADER_END.length;
        const length = CONTENT_LENGTH.exec(head);
        if (length) [this.state, this.skip, this.afterSkip] = ['skip', Number(length[1]), 'done'];
        else if (CHUNKED.test(head)) this.state = 'chunk-size';
        else throw new Error(`answer ${status[1]} has neither Content-Length nor chunked encoding; its body would end only with the connection`);
      } else if (this.state === 'chunk-size') {
        const size = Number.parseInt(buf.toString('latin1', off, end), 16);
        if (!Number.isInteger(size) || size < 0) throw new Error(`bad chunk size ${JSON.stringify(buf.toString('latin1', off, Math.min(end, off + 20)))}`);
        off = end + CRLF.length;
        if (size === 0) this.state = 'trailer';
        else [this.state, this.skip, this.afterSkip] = ['skip', size + CRLF.length, 'chunk-size'];
      } else {
        // Trailer fields, a line each, until the blank line that ends the answer.
        const blank = end === off;
        off = end + CRLF.length;
        if (blank) {
          this.state = 'head';
          answer(this.status);
        }
      }
    }
  }
}

/** One keep-alive connection with at most one request in flight. */
class Connection {
  readonly socket: Socket;
  private readonly framer = new AnswerFramer();
  private sentAt = 0;
  busy = false;
  dead = false;

  constructor(
    plan: LoadPlan,
    private readonly onAnswer: (conn: Connection, status: number, ms: number) => void,
    private readonly onFailure: (conn: Connection, message: string, wasBusy: boolean) => void,
  ) {
    this.socket = connect({ host: '127.0.0.1', port: plan.port, noDelay: true });
    this.socket.on('data', (chunk: Buffer) => {
      try {
        this.framer.feed(chunk, (status) => {
          this.busy = false;
          this.onAnswer(this, status, performance.now() - this.sentAt);
        });
      } catch (err) {
        this.fail((err as Error).message);
      }
    });
    this.socket.on('error', (err) => this.fail(err.message));
    this.socket.on('close', () => this.fail('the server closed the connection'));
  }

  send(request: Buffer): void {
    this.busy = true;
    this.sentAt = performance.now();
    this.socket.write(request);
  }

  close(): void {
    this.dead = true;
    this.socket.destroy();
  }

  private fail(message: string): void {
    if (this.dead) return;
    this.dead = true;
    this.socket.destroy();
    this.onFailure(this, message, this.busy);
  }
}

function checkPlan(plan: LoadPlan): void {
  const whole = (n: unknown, what: string) => {
    if (!Number.isInteger(n) || (n as number) < 1) throw new Error(`${what} must be a whole number ≥ 1 (got ${JSON.stringify(n)})`);
  };
  if (plan.host !== undefined && plan.host !== '127.0.0.1') throw new Error(`the load generator sends only to 127.0.0.1 (got host ${JSON.stringify(plan.host)})`);
  if (!Number.isInteger(plan.port) || plan.port < 1 || plan.port > 65_535) throw new Error(`port must be 1–65535 (got ${JSON.stringify(plan.port)})`);
  if (typeof plan.path !== 'string' || !plan.path.startsWith('/') || /[\s]/.test(plan.path)) throw new Error(`path must start with / and hold no white space (got ${JSON.stringify(plan.path)})`);
  whole(plan.total, 'total');
  if (plan.mode === 'closed') whole(plan.connections, 'connections');
  else if (plan.mode === 'paced') {
    if (!(typeof plan.rps === 'number' && plan.rps > 0 && plan.rps <= 1_000_000)) throw new Error(`rps must be above 0 and at most 1,000,000 (got ${JSON.stringify(plan.rps)})`);
    if (plan.maxConnections !== undefined) whole(plan.maxConnections, 'maxConnections');
  } else throw new Error(`mode must be "closed" or "paced" (got ${JSON.stringify((plan as { mode: unknown }).mode)})`);
}

/** Runs `plan` in this process. */
export function runLoad(plan: LoadPlan): Promise<LoadResult> {
  checkPlan(plan);
  const request = Buffer.from(`GET ${plan.path} HTTP/1.1\r\nHost: 127.0.0.1:${plan.port}\r\n\r\n`, 'latin1');
  const latencies = new Float64Array(plan.total);
  const late: number[] = [];
  const statuses: Record<string, number> = {};
  const connections = new Set<Connection>();
  let opened = 0;
  let sent = 0;
  let answered = 0;
  let errors = 0;
  let firstError: string | undefined;
  const started = performance.now();
  const deadline = started + (plan.mode === 'closed' ? plan.deadlineMs ?? DEFAULT_DEADLINE_MS : Number.POSITIVE_INFINITY);
  let timer: NodeJS.Timeout | undefined;

  return new Promise<LoadResult>((resolve) => {
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      const seconds = (performance.now() - started) / 1000;
      for (const c of connections) c.close();
      const sorted = Array.from(latencies.subarray(0, answered)).sort((a, b) => a - b);
      const round = (n: number) => Math.round(n * 1000) / 1000;
      resolve({
        answered,
        statuses,
        errors,
        ...(firstError ? { firstError } : {}),
        seconds: round(seconds),
        reqPerSec: Math.round((answered / seconds) * 10) / 10,
        latencyMs: {
          p50: round(percentile(sorted, 50)),
          p99: round(percentile(sorted, 99)),
          max: round(sorted.at(-1) ?? NaN),
          mean: round(sorted.reduce((a, b) => a + b, 0) / (sorted.length || NaN)),
        },
        ...(plan.mode === 'paced' ? { sendLateP99Ms: round(percentile(late.sort((a, b) => a - b), 99)) } : {}),
        connections: opened,
      });
    };
    const settled = () => answered + errors >= sent && (sent >= plan.total || performance.now() >= deadline || errors >= MAX_ERRORS);
    const open = () => {
      opened++;
      const conn = new Connection(plan, onAnswer, onFailure);
      connections.add(conn);
      return conn;
    };
    /** Closed loop: the connection that just came free sends the next request. */
    const next = (conn: Connection) => {
      if (sent < plan.total && performance.now() < deadline && errors < MAX_ERRORS) {
        sent++;
        conn.send(request);
      }
    };
    function onAnswer(conn: Connection, status: number, ms: number) {
      latencies[answered++] = ms;
      statuses[status] = (statuses[status] ?? 0) + 1;
      if (plan.mode === 'closed') next(conn);
      else if (waiting.length) sendDue(conn, waiting.shift()!);
      if (settled()) finish();
    }
    function onFailure(conn: Connection, message: string, wasBusy: boolean) {
      connections.delete(conn);
      if (wasBusy) {
        errors++;
        firstError ??= message;
      }
      if (errors >= MAX_ERRORS) return finish();
      // The request lost with it is counted; the load goes on over a new connection.
      if (plan.mode === 'closed') {
        if (sent < plan.total) next(open());
      } else if (waiting.length) sendDue(open(), waiting.shift()!);
      if (settled()) finish();
    }

    // Paced: due times that found every connection busy, oldest first.
    const waiting: number[] = [];
    const sendDue = (conn: Connection, due: number) => {
      late.push(Math.max(0, performance.now() - due));
      conn.send(request);
    };
    if (plan.mode === 'closed') {
      for (let i = 0; i < Math.min(plan.connections, plan.total); i++) next(open());
      return;
    }
    const interval = 1000 / plan.rps;
    const maxConnections = plan.maxConnections ?? DEFAULT_PACED_CONNECTIONS;
    const tick = () => {
      const now = performance.now();
      while (sent < plan.total && started + sent * interval <= now && errors < MAX_ERRORS) {
        const due = started + sent * interval;
        sent++;
        let free: Connection | undefined;
        for (const c of connections) if (!c.busy && !c.dead) { free = c; break; }
        if (!free && connections.size < maxConnections) free = open();
        if (free) sendDue(free, due);
        else waiting.push(due);
      }
      if (sent < plan.total && errors < MAX_ERRORS) timer = setTimeout(tick, Math.max(0, started + sent * interval - performance.now()));
      else if (settled()) finish();
    };
    tick();
  });
}

const fromSource = import.meta.url.endsWith('.ts');

/**
 * Runs `plan` in a node process of its own (this module as its main) and returns its
 * result; `signal` stops the process (the promise then rejects).
 */
export function runLoadProcess(plan: LoadPlan, signal?: AbortSignal): Promise<LoadResult> {
  checkPlan(plan);
  const self = fileURLToPath(import.meta.url);
  const child = spawn(process.execPath, [...(fromSource ? ['--import', 'tsx'] : []), self, JSON.stringify(plan)], { stdio: ['ignore', 'pipe', 'pipe'], signal });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code !== 0) return reject(new Error(`the load generator exited with ${code ?? signal}: ${err.trim() || out.trim()}`));
      try {
        resolve(JSON.parse(out.trim().split('\n').at(-1)!) as LoadResult);
      } catch {
        reject(new Error(`the load generator printed no result: ${out.slice(-300)}`));
      }
    });
  });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const arg = process.argv[2];
  let plan: LoadPlan;
  try {
    if (!arg) throw new Error('one argument: the load plan as JSON');
    plan = JSON.parse(arg) as LoadPlan;
    checkPlan(plan);
  } catch (err) {
    process.stderr.write(`http-load: ${(err as Error).message}\n`);
    process.exit(2);
  }
  runLoad(plan).then(
    (result) => process.stdout.write(`${JSON.stringify(result)}\n`),
    (err: unknown) => {
      process.stderr.write(`http-load: ${(err as Error).message}\n`);
      process.exit(1);
    },
  );
}
