/**
 * Round-trip times of the fleet's calls to the cloud, read off node:http's diagnostics channels
 * (the supervisor's cloud client is node:http): from a request's start to its response
 * headers, per kind of call. Observing changes nothing the devices do.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import type { ClientRequest } from 'node:http';

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

export class CloudLatency {
  private readonly started = new WeakMap<object, number>();
  private samples = new Map<CallKind, number[]>();
  private readonly onStart = (message: unknown) => {
    const { request } = message as { request: ClientRequest };
    if (this.origins.has(`${request.protocol}//${String(request.getHeader('host'))}`)) this.started.set(request, performance.now());
  };
  private readonly onHeaders = (message: unknown) => {
    const { request } = message as { request: ClientRequest };
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
    // 'response.finish' is published when the response's headers are parsed, before its body.
    subscribe('http.client.request.start', this.onStart);
    subscribe('http.client.response.finish', this.onHeaders);
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
    unsubscribe('http.client.request.start', this.onStart);
    unsubscribe('http.client.response.finish', this.onHeaders);
  }
}
