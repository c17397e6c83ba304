/**
 * The one deadline wait of fleetlab: ask `probe` until `done` accepts its value, with a
 * deadline, and fail once, naming what was awaited and the last value or error seen, so a
 * timeout says where things got stuck. Every room uses it (src imports no other room); the
 * harness's named strategies (hil/lib/wait.ts) are built on it.
 */
import { FleetlabError, errorText } from './errors.js';

/** How a wait ended without `done` accepting a value. */
export type WaitEnd =
  /** The deadline passed. */
  | 'timeout'
  /** `alive()` said what was awaited is gone (a process exited): waiting longer cannot help. */
  | 'gone'
  /** The probe threw an error `stopOn` accepts: it will not go away by asking again. */
  | 'stopped'
  /** The caller's signal aborted. */
  | 'aborted';

/** The last probe's outcome: a value `done` refused, or what the probe threw. */
export type LastSeen<T> = { readonly value: T } | { readonly error: unknown };

export interface WaitFailure<T> {
  readonly what: string;
  readonly timeoutMs: number;
  readonly end: WaitEnd;
  /** `alive()`'s words when `end` is 'gone'. */
  readonly reason?: string;
  /** Undefined when no probe finished. */
  readonly last?: LastSeen<T>;
  /** `last` as text for a message (at most 1000 characters). */
  readonly lastSeen: string;
}

export interface UntilOptions<T> {
  readonly timeoutMs: number;
  /** The pause between probes (cut short at the deadline). */
  readonly intervalMs: number;
  /** Ends the wait at once with the signal's reason (or through `fail`). */
  readonly signal?: AbortSignal;
  /** Asked before every probe: `false`, or a string saying why, ends the wait ('gone'). */
  readonly alive?: () => boolean | string;
  /** A probe error this accepts ends the wait ('stopped'); every other one is retried. */
  readonly stopOn?: (err: unknown) => boolean;
  /**
   * The error to throw instead of the default (undefined: the default), for callers whose
   * error code or message is part of their contract. Defaults: a FleetlabError `SUP_ERR_TIMEOUT` for 'timeout' and
   * 'gone', the probe's own error for 'stopped', the signal's reason for 'aborted'.
   */
  readonly fail?: (failure: WaitFailure<T>) => Error | undefined | Promise<Error | undefined>;
}

/** The text of a last value or error, as messages quote it. */
export function lastSeenText<T>(last: LastSeen<T> | undefined): string {
  const shown: unknown = last === undefined ? '(nothing read)' : 'error' in last ? `error: ${errorText(last.error)}` : last.value;
  return String(JSON.stringify(shown)).slice(0, 1000);
}

/**
 * Probes until `done(value)`, then resolves that value. `probe` gets the milliseconds left,
 * for callers whose probe has its own timeout. A probe that throws is retried (the thing may
 * be starting or rebooting) unless `stopOn` says otherwise.
 */
export async function until<T>(what: string, probe: (remainingMs: number) => Promise<T>, done: (value: T) => boolean, options: UntilOptions<T>): Promise<T> {
  const { timeoutMs, intervalMs, signal, alive, stopOn } = options;
  const deadline = Date.now() + timeoutMs;
  let last: LastSeen<T> | undefined;
  const end = async (how: WaitEnd, reason?: string): Promise<never> => {
    const failure: WaitFailure<T> = { what, timeoutMs, end: how, ...(reason === undefined ? {} : { reason }), ...(last === undefined ? {} : { last }), lastSeen: lastSeenText(last) };
    throw (await options.fail?.(failure)) ?? defaultError(failure, signal);
  };
  // At least one probe, even with no time left: what is already there is not a timeout.
  do {
    if (signal?.aborted) return end('aborted');
    const state = alive?.() ?? true;
    if (state !== true) return end('gone', state === false ? 'it is gone' : state);
    try {
      const value = await probe(deadline - Date.now());
      if (done(value)) return value;
      last = { value };
    } catch (error) {
      last = { error };
      if (stopOn?.(error)) return end('stopped');
    }
    if (Date.now() >= deadline) break;
    await sleep(Math.min(intervalMs, deadline - Date.now()), signal).catch(() => undefined);
  } while (Date.now() < deadline);
  if (signal?.aborted) return end('aborted');
  return end('timeout');
}

function defaultError<T>(f: WaitFailure<T>, signal: AbortSignal | undefined): unknown {
  if (f.end === 'aborted') return signal?.reason;
  if (f.end === 'stopped' && f.last && 'error' in f.last) return f.last.error;
  const cause = f.last && 'error' in f.last ? { cause: f.last.error } : undefined;
  if (f.end === 'gone') return new FleetlabError('SUP_ERR_TIMEOUT', `${f.what}: given up, ${f.reason}; last seen ${f.lastSeen}`, cause);
  return new FleetlabError('SUP_ERR_TIMEOUT', `${f.what}: not reached within ${f.timeoutMs} ms; last seen ${f.lastSeen}`, cause);
}

/**
 * Runs `fn` with a signal that aborts after `ms` with a TimeoutError, as AbortSignal.timeout's
 * does. Its timer keeps the process alive while `fn` runs, which AbortSignal.timeout's does not:
 * a fetch that undici leaves pending on a port that accepts and then says nothing (a QEMU
 * board's forward) would otherwise end a one-shot command with exit code 13 and no word.
 */
export async function withDeadline<T>(ms: number, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  // Raced as well as signalled: a promise that ignores the signal still ends at the deadline.
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const reason = new DOMException('The operation was aborted due to timeout', 'TimeoutError');
      controller.abort(reason);
      reject(reason);
    }, ms);
  });
  try {
    return await Promise.race([fn(controller.signal), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves after `ms`; rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
