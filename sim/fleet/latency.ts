/**
 * Round-trip times of the fleet's calls to the cloud, read off undici's diagnostics channels
 * (the supervisor's cloud client is undici): from a request's creation to its response
 * headers, per kind of call. Observing changes nothing the devices do.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';

export type CallKind = 'target-state' | 'report' | 'register' | 'other';

export interface LatencySummary {
  readonly count: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

const kindOf = (method: string, path: string): CallKind =>
  method === 'GET' && /^\/device\/v3\/[^/]+\/state/.test(path) ? 'target-state' : method === 'PATCH' && path.startsWith('/device/v3/state') ? 'report' : path.startsWith('/device/register') ? 'register' : 'other';

/** Count and percentiles of round-trip times (any order), e.g. the samples of several processes together. */
export function summarize(samples: readonly number[]): LatencySummary {
  const sorted = [...samples].sort((a, b) => a - b);
  return { count: sorted.length, p50Ms: percentile(sorted, 50), p99Ms: percentile(sorted, 99), maxMs: sorted.at(-1) ?? 0 };
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

interface UndiciRequest {
  method: string;
  path: string;
  origin?: string | URL;
}

export class CloudLatency {
  private readonly started = new WeakMap<object, number>();
  private samples = new Map<CallKind, number[]>();
  private readonly onCreate = (message: unknown) => {
    const { request } = message as { request: UndiciRequest };
    if (this.origins.has(String(request.origin))) this.started.set(request, performance.now());
  };
  private readonly onHeaders = (message: unknown) => {
    const { request } = message as { request: UndiciRequest };
    const t0 = this.started.get(request);
    if (t0 === undefined) return;
    this.started.delete(request);
    const kind = kindOf(request.method, request.path);
    let list = this.samples.get(kind);
    if (!list) this.samples.set(kind, (list = []));
    list.push(performance.now() - t0);
  };

  /** Watches calls to these origins (`http://127.0.0.1:48400`), the cloud and its links. */
  constructor(private readonly origins: ReadonlySet<string>) {
    subscribe('undici:request:create', this.onCreate);
    subscribe('undici:request:headers', this.onHeaders);
  }

  /** The calls since the last reset, per kind. */
  summary(kind: CallKind): LatencySummary {
    return summarize(this.raw(kind));
  }

  /** The round-trip times since the last reset, in milliseconds, in arrival order. */
  raw(kind: CallKind): readonly number[] {
    return this.samples.get(kind) ?? [];
  }

  reset(): void {
    this.samples = new Map();
  }

  close(): void {
    unsubscribe('undici:request:create', this.onCreate);
    unsubscribe('undici:request:headers', this.onHeaders);
  }
}
