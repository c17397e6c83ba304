/**
 * The end of an Engine API progress stream (import, load, push): dockerd answers 200 and
 * reports a failure as an `error` event inside the stream, so a stream that ended is not yet
 * a success. Resolves when it ended without one; rejects with the engine's own words.
 */
import type Docker from 'dockerode';

export function streamDone(docker: Docker, stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise<void>((resolve, reject) =>
    docker.modem.followProgress(stream, (err: Error | null, events: Array<{ error?: string }>) => {
      const failed = err?.message ?? events?.find((e) => e.error)?.error;
      if (failed) reject(new Error(failed));
      else resolve();
    }),
  );
}
