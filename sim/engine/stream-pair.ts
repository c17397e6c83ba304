/**
 * Two cross-wired duplex streams: what one end writes, the other reads. An HTTP server and
 * client can talk over a pair as over a socket (the server takes an end through its
 * 'connection' event, the client through an Agent's createConnection), so a fleet of
 * simulated devices reaches their engines with real HTTP exchanges but no file descriptor
 * per device. Node 22's `stream.duplexPair()` does the same; Node 20 lacks it.
 */
import { Duplex } from 'node:stream';

export class PairEnd extends Duplex {
  peer: PairEnd | null = null;

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.peer?.push(chunk);
    callback();
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.peer?.push(null);
    callback();
  }

  override _read(): void {}

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    const peer = this.peer;
    this.peer = null;
    if (peer && !peer.destroyed) peer.destroy();
    callback(err);
  }

  // What http.Server and http.Agent call on a net.Socket; a pair has no timer or TCP options.
  setTimeout(): this {
    return this;
  }
  setNoDelay(): this {
    return this;
  }
  setKeepAlive(): this {
    return this;
  }
  ref(): this {
    return this;
  }
  unref(): this {
    return this;
  }
}

export function streamPair(): [PairEnd, PairEnd] {
  const a = new PairEnd();
  const b = new PairEnd();
  a.peer = b;
  b.peer = a;
  return [a, b];
}
