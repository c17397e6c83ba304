/**
 * Image downloads as supervised tasks. A pull runs on its own, outside any apply round: it
 * never rejects into a caller that stopped listening (a round that failed on another step
 * leaves its pulls running, and the next round joins them instead of starting them again),
 * and its outcome is recorded, so a failed pull is a state the device reports, not a crash.
 */
import { errorText } from '../../errors.js';
import type { PullProgress } from '../adapters/engine.js';
import type { Fetch } from './status.js';

export interface PullRequest {
  appId: number;
  serviceName: string;
  image: string;
}

export interface PullFailure extends PullRequest {
  error: string;
}

export interface ImagePullsDeps {
  pull(image: string, onProgress: (p: PullProgress) => void): Promise<void>;
  log: { info(msg: string): void; warn(msg: string): void };
}

const keyOf = (r: PullRequest) => `${r.appId}/${r.image}`;

export class ImagePulls {
  /** Pulls in flight, with their progress: what the status reports as Downloading. */
  readonly inFlight = new Map<string, Fetch>();
  /** The last pull of an image that failed, until a pull of it succeeds or it leaves the target. */
  readonly failures = new Map<string, PullFailure>();
  readonly #running = new Map<string, Promise<PullFailure | null>>();

  constructor(private readonly deps: ImagePullsDeps) {}

  /** Starts the pulls not already running and resolves with those that failed; never rejects. */
  run(requests: PullRequest[]): Promise<PullFailure[]> {
    return Promise.all(requests.map((r) => this.#running.get(keyOf(r)) ?? this.start(r))).then((outcomes) =>
      outcomes.filter((o): o is PullFailure => o !== null),
    );
  }

  /** Forgets failures of images the target no longer names. */
  keepOnly(requests: Iterable<PullRequest>): void {
    const wanted = new Set([...requests].map(keyOf));
    for (const key of this.failures.keys()) if (!wanted.has(key)) this.failures.delete(key);
  }

  private start(request: PullRequest): Promise<PullFailure | null> {
    const key = keyOf(request);
    const entry: Fetch = { ...request, percent: 0 };
    this.inFlight.set(key, entry);
    this.deps.log.info(`Downloading image ${request.image}`);
    const task = this.deps
      .pull(request.image, (p) => {
        entry.percent = p.percent;
      })
      .then(
        () => {
          this.failures.delete(key);
          this.deps.log.info(`Downloaded image ${request.image}`);
          return null;
        },
        (err: unknown) => {
          const failure = { ...request, error: errorText(err) };
          this.failures.set(key, failure);
          this.deps.log.warn(`Failed to download image ${request.image}: ${failure.error}`);
          return failure;
        },
      )
      .finally(() => {
        this.inFlight.delete(key);
        this.#running.delete(key);
      });
    this.#running.set(key, task);
    return task;
  }
}
