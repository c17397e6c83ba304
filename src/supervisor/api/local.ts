/**
 * Local mode endpoints: target state (read anywhere, written only in local mode), device
 * info, and the NDJSON log stream of the services and the supervisor.
 */
import { PassThrough, type Readable } from 'node:stream';
import { createInterface } from 'node:readline';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { FleetlabError, badRequest } from '../../errors.js';
import { checkTarget, problemText } from '../../protocol/checked-target.js';
import { LocalTargetStateBody, type WireLocalState } from '../../protocol/target-state.js';
import type { LogLine } from '../log-bus.js';
import { scopedTargetWrite, wholeDevice } from '../state/scope.js';
import type { SupervisorContext } from './context.js';
import { callerOf, readsFor, type ScopedReads } from './reads.js';

/** How often the log stream looks for containers created after it opened. */
const RESCAN_MS = 1000;

function requireLocalMode(sup: SupervisorContext): void {
  if (!sup.localMode()) {
    throw new FleetlabError('SUP_ERR_NOT_LOCAL_MODE', 'Device is not in local mode: set SUPERVISOR_LOCAL_MODE=1 or start the supervisor with --local-mode');
  }
}

/** docker logs with timestamps: "<RFC3339Nano> <message>". */
function parseEngineLine(line: string, now: number): { timestamp: number; message: string } {
  const space = line.indexOf(' ');
  const ts = space > 0 ? Date.parse(line.slice(0, space)) : NaN;
  return Number.isNaN(ts) ? { timestamp: now, message: line } : { timestamp: ts, message: line.slice(space + 1) };
}

/** The caller's services' lines (and, for the device key, the supervisor's). */
function serviceLogStream(sup: SupervisorContext, reads: ScopedReads, signal: AbortSignal): Readable {
  const out = new PassThrough();
  const write = (line: LogLine) => {
    if (!out.writableEnded) out.write(`${JSON.stringify(line)}\n`);
  };
  const followed = new Map<string, Readable>();
  const since = Math.floor(sup.now() / 1000);
  const scan = async () => {
    const snapshot = await reads.snapshot();
    for (const c of snapshot.containers) {
      if (followed.has(c.id) || c.state !== 'running') continue;
      const logs = await sup.engine.logs(c.id, { follow: true, since });
      followed.set(c.id, logs);
      const lines = createInterface({ input: logs });
      lines.on('line', (l) => write({ ...parseEngineLine(l, sup.now()), serviceName: c.serviceName }));
      logs.on('close', () => followed.delete(c.id));
    }
  };
  const unsubscribe = reads.supervisorLines(write);
  const timer = setInterval(() => void scan().catch(() => undefined), RESCAN_MS);
  void scan().catch((err) => write({ message: `cannot follow service logs: ${String(err)}`, timestamp: sup.now(), serviceName: 'supervisor' }));
  signal.addEventListener('abort', () => {
    clearInterval(timer);
    unsubscribe();
    for (const s of followed.values()) s.destroy();
    out.end();
  });
  return out;
}

export function localRoutes(sup: SupervisorContext): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    // A scoped key reads its own app only; name and config are the device's.
    app.get('/v2/local/target-state', { config: { auth: 'local' } }, async (req) => {
      const target = readsFor(sup, callerOf(req)).localTarget();
      return {
        status: 'success',
        state: { local: target ?? { name: sup.deviceName, config: {}, apps: {} } },
      };
    });

    app.post('/v2/local/target-state', { config: { auth: 'local' }, schema: { body: LocalTargetStateBody } }, async (req) => {
      requireLocalMode(sup);
      // The other apps a scoped key cannot see are kept from the whole device's target.
      const current = readsFor(sup, wholeDevice).localTarget();
      const wire = scopedTargetWrite(callerOf(req), (req.body as { local: WireLocalState }).local, current);
      // Checked once, here at the edge, after the scope merge: the 400 names the field of what would be stored.
      const checked = checkTarget(wire, 'local.config');
      if (!checked.ok) throw badRequest(problemText(checked.problems));
      await sup.setLocalTarget(checked.target);
      return { status: 'success', message: 'OK' };
    });

    app.get('/v2/local/device-info', { config: { auth: 'local' } }, async () => {
      requireLocalMode(sup);
      return { status: 'success', info: { arch: sup.arch, deviceType: sup.config.deviceType } };
    });

    app.get('/v2/local/logs', { config: { auth: 'local' } }, async (req, reply) => {
      requireLocalMode(sup);
      const abort = new AbortController();
      reply.raw.once('close', () => abort.abort());
      return reply.type('application/x-ndjson').send(serviceLogStream(sup, readsFor(sup, callerOf(req)), abort.signal));
    });
  };
}
