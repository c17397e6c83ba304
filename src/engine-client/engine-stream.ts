/**
 * The end of an Engine API progress stream (build, import, load, push): dockerd answers 200 and
 * reports a failure as an `error` event inside the stream, so a stream that ended is not yet
 * a success. Resolves when it ended without one; rejects with the engine's own words, after
 * `what` when the caller names the work.
 */
import type Docker from 'dockerode';
import { FleetlabError } from '../errors.js';

export interface ProgressEvent {
  readonly stream?: string;
  readonly status?: string;
}

export function streamDone(docker: Docker, stream: NodeJS.ReadableStream, o: { what?: string; onEvent?: (e: ProgressEvent) => void } = {}): Promise<void> {
  return new Promise<void>((resolve, reject) =>
    docker.modem.followProgress(
      stream,
      (err: Error | null, events: Array<{ error?: string }>) => {
        const failed = err?.message ?? events?.find((e) => e.error)?.error;
        if (failed) reject(new FleetlabError('SUP_ERR_ENGINE', o.what ? `${o.what}: ${failed}` : failed));
        else resolve();
      },
      o.onEvent,
    ),
  );
}
