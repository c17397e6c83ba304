/**
 * Two byte streams joined both ways, as a forward joins the two ends of one connection: the
 * bytes go across, and when either end closes or fails the other goes too. A failure at one
 * end (a write EPIPE, a read ECONNRESET) is that connection ending, not an error of the
 * process: left unhandled, it would throw in whatever happened to be running.
 */
import type { Duplex } from 'node:stream';

/** Joins `a` and `b`; `onEnded` runs once, after both were destroyed. */
export function joinStreams(a: Duplex, b: Duplex, onEnded: () => void = () => undefined): void {
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    a.destroy();
    b.destroy();
    onEnded();
  };
  for (const stream of [a, b]) {
    stream.on('error', end);
    stream.once('close', end);
  }
  a.pipe(b);
  b.pipe(a);
}
