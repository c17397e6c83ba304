/**
 * The device API's reads of app data, each narrowed to the caller's scope (state/scope.ts).
 * Routes read apps, state, engine objects, the local target, the journal and the log bus
 * through here only, so what a scoped key may see is decided in one place.
 */
import type { Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import { toWireState, type TargetApp, type WireLocalState } from '../../protocol/target-state.js';
import type { EngineSnapshot } from '../adapters/engine.js';
import type { JournalQuery } from '../adapters/ports.js';
import type { LogLine } from '../log-bus.js';
import type { Identity } from '../state/keys.js';
import { scopedSnapshot, scopedTarget, scopedView, wholeDevice } from '../state/scope.js';
import type { DeviceView } from '../state/status.js';
import type { SupervisorContext } from './context.js';

/** The caller: its key's identity; without a key (open routes, local mode) the device's. */
export const callerOf = (req: FastifyRequest): Identity => req.identity ?? wholeDevice;

export interface ScopedReads {
  /** The app, or 401 outside the scope (before 404, so other ids cannot be probed). */
  app(appId: number): TargetApp;
  apps(): TargetApp[];
  view(): Promise<DeviceView>;
  snapshot(): Promise<EngineSnapshot>;
  /** The stored local target, as `GET /v2/local/target-state` shows it; null before one is set. */
  localTarget(): WireLocalState | null;
  journal(query: JournalQuery, signal: AbortSignal): Promise<Readable>;
  /** The supervisor's own lines speak of every app: only the device key gets them. */
  supervisorLines(listener: (line: LogLine) => void): () => void;
}

export function readsFor(sup: SupervisorContext, who: Identity): ScopedReads {
  const snapshot = async () => scopedSnapshot(who, await sup.engine.snapshot());
  return {
    app: (appId) => sup.actions.app(appId, who),
    apps: () => scopedTarget(who, sup.state.getTarget()).apps,
    view: async () => scopedView(who, await sup.state.view()),
    snapshot,
    localTarget() {
      const stored = sup.store.get().localTarget;
      return stored ? toWireState(scopedTarget(who, stored)) : null;
    },
    async journal(query, signal) {
      if (who.kind === 'device') return sup.journal.stream(query, signal);
      // Every container of the app the engine still holds, stopped ones too.
      const containerIds = (await snapshot()).containers.map((c) => c.id);
      return sup.journal.stream(query, signal, { containerIds });
    },
    supervisorLines: (listener) => (who.kind === 'device' ? sup.logs.subscribe(listener) : () => undefined),
  };
}
