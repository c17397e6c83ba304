/**
 * The control API of the simulated engine, under `/_sim/` on the engine's own socket (the
 * Engine API never uses that prefix):
 *
 *   GET    /_sim/state                 faults in force, bandwidth, registry catalogue
 *   POST   /_sim/scenario              apply a scenario (same schema as the files)
 *   POST   /_sim/faults/pull           add a pull fault   {image, failAfterBytes|stallAfterBytes, message?, times?}
 *   POST   /_sim/faults/container      add a container fault {match, exitCode, afterMs, times?}
 *   DELETE /_sim/faults                clear every fault (a stalled pull resumes)
 *   PUT    /_sim/disk                  {full: boolean}
 *   PUT    /_sim/bandwidth             {bytesPerSecond}
 *   POST   /_sim/engine/restart        {downMs?}: answered 202, then the engine restarts
 *
 * Bad bodies get 400 with a message naming the field.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isFleetlabError } from '../../src/errors.js';
import { validateScenario, type Scenario } from './scenario.js';

export interface ControlTarget {
  state(): unknown;
  applyScenario(s: Scenario): void;
  clearFaults(): void;
  setDiskFull(full: boolean): void;
  setBandwidth(bytesPerSecond: number): void;
  restartEngine(opts: { downMs?: number }): Promise<void>;
}

function reply(res: ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) return void res.writeHead(status).end();
  const text = `${JSON.stringify(body)}\n`;
  res.writeHead(status, { 'Content-Type': 'application/json' }).end(text);
}

export function createControl(target: () => ControlTarget) {
  return async (req: IncomingMessage, res: ServerResponse, path: string, body: () => Promise<unknown>): Promise<boolean> => {
    const route = `${req.method} ${path}`;
    try {
      switch (route) {
        case 'GET /_sim/state':
          reply(res, 200, target().state());
          return true;
        case 'POST /_sim/scenario':
          target().applyScenario(validateScenario(await body(), 'scenario'));
          reply(res, 204);
          return true;
        case 'POST /_sim/faults/pull':
          target().applyScenario(validateScenario({ pulls: [await body()] }, 'pull fault'));
          reply(res, 204);
          return true;
        case 'POST /_sim/faults/container':
          target().applyScenario(validateScenario({ containers: [await body()] }, 'container fault'));
          reply(res, 204);
          return true;
        case 'DELETE /_sim/faults':
          target().clearFaults();
          reply(res, 204);
          return true;
        case 'PUT /_sim/disk': {
          const b = (await body()) as { full?: unknown };
          if (typeof b.full !== 'boolean') return reply(res, 400, { message: 'disk: /full: Expected boolean' }), true;
          target().setDiskFull(b.full);
          reply(res, 204);
          return true;
        }
        case 'PUT /_sim/bandwidth': {
          const b = (await body()) as { bytesPerSecond?: unknown };
          if (!Number.isInteger(b.bytesPerSecond) || (b.bytesPerSecond as number) < 1) return reply(res, 400, { message: 'bandwidth: /bytesPerSecond: Expected integer >= 1' }), true;
          target().setBandwidth(b.bytesPerSecond as number);
          reply(res, 204);
          return true;
        }
        case 'POST /_sim/engine/restart': {
          const b = (await body()) as { downMs?: unknown };
          if (b.downMs !== undefined && (!Number.isInteger(b.downMs) || (b.downMs as number) < 0)) return reply(res, 400, { message: 'restart: /downMs: Expected integer >= 0' }), true;
          reply(res, 202, { restarting: true });
          // After the answer is flushed: the restart drops every connection, this one too.
          res.once('finish', () => void target().restartEngine({ ...(b.downMs !== undefined ? { downMs: b.downMs as number } : {}) }).catch(() => undefined));
          return true;
        }
        default:
          return false;
      }
    } catch (err) {
      if (isFleetlabError(err)) return reply(res, 400, { message: err.message }), true;
      throw err;
    }
  };
}
