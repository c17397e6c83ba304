/**
 * Two byte streams joined both ways, as a forward joins the two ends of one connection: the
 * bytes go across, and when either end closes or fails the other goes too. A failure at one
 * end (a write EPIPE, a read ECONNRESET) is that connection ending, not an error of the
 * process: left unhandled, it would throw in whatever happened to be running.
 *
 * An end that closed after a clean end of its data (a server that sent its answer and hung
 * up) lets the other end write out what it still holds before it goes: destroyed at once, a
 * slow other end (an SSH channel to an emulated board, whose window opens slowly) would lose
 * the answer's tail, and the device would read a truncated download.
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
  const closed = (from: Duplex, to: Duplex) => {
    // pipe() has ended `to` after `from`'s last byte; once `to` has written it all, it goes.
    if (from.readableEnded && to.writableEnded && !to.writableFinished && !to.destroyed) to.once('finish', end);
    else end();
  };
  a.on('error', end);
  b.on('error', end);
  a.once('close', () => closed(a, b));
  b.once('close', () => closed(b, a));
  a.pipe(b);
  b.pipe(a);
}
