/**
 * The engine's event stream (`GET /events`), in dockerd's shape: Type, Action, Actor{ID,
 * Attributes}, scope, time, timeNano, plus the legacy status/id/from on container and image
 * events. Keeps a bounded backlog so `since` can replay.
 */
import { EventEmitter } from 'node:events';
import { anyOf, labelsMatch, type Filters } from './filters.js';
import type { WallClock } from './model.js';

export interface EngineEvent {
  status?: string;
  id?: string;
  from?: string;
  Type: 'container' | 'image' | 'volume' | 'network' | 'daemon';
  Action: string;
  Actor: { ID: string; Attributes: Record<string, string> };
  scope: 'local';
  time: number;
  timeNano: number;
}

export class EventBus {
  private readonly emitter = new EventEmitter();
  private readonly backlog: EngineEvent[] = [];

  constructor(
    private readonly clock: WallClock,
    private readonly keep: number,
  ) {
    this.emitter.setMaxListeners(0);
  }

  emit(type: EngineEvent['Type'], action: string, id: string, attributes: Record<string, string>): void {
    const nowNs = BigInt(this.clock()) * 1_000_000n + process.hrtime.bigint() % 1_000_000n;
    const legacy = type === 'container' || type === 'image' ? { status: action, id, ...(attributes.image ? { from: attributes.image } : {}) } : {};
    const event: EngineEvent = {
      ...legacy,
      Type: type,
      Action: action,
      Actor: { ID: id, Attributes: attributes },
      scope: 'local',
      time: Number(nowNs / 1_000_000_000n),
      timeNano: Number(nowNs),
    };
    this.backlog.push(event);
    if (this.backlog.length > this.keep) this.backlog.shift();
    this.emitter.emit('event', event);
  }

  since(seconds: number, until = Infinity): EngineEvent[] {
    return this.backlog.filter((e) => e.timeNano / 1e9 >= seconds && e.timeNano / 1e9 <= until);
  }

  subscribe(fn: (e: EngineEvent) => void): () => void {
    this.emitter.on('event', fn);
    return () => this.emitter.off('event', fn);
  }
}

export const eventFilterNames = ['type', 'event', 'container', 'image', 'label', 'volume', 'network', 'scope', 'daemon'] as const;

export function eventMatches(f: Filters, e: EngineEvent): boolean {
  const attrs = e.Actor.Attributes;
  return (
    anyOf(f, 'type', (v) => v === e.Type) &&
    anyOf(f, 'event', (v) => v === e.Action || e.Action.startsWith(`${v}:`)) &&
    anyOf(f, 'container', (v) => e.Type === 'container' && (e.Actor.ID.startsWith(v) || attrs.name === v)) &&
    anyOf(f, 'image', (v) => attrs.image === v || (e.Type === 'image' && e.Actor.ID === v)) &&
    anyOf(f, 'volume', (v) => e.Type === 'volume' && e.Actor.ID === v) &&
    anyOf(f, 'network', (v) => e.Type === 'network' && (e.Actor.ID.startsWith(v) || attrs.name === v)) &&
    anyOf(f, 'scope', (v) => v === 'local') &&
    labelsMatch(f, attrs)
  );
}
