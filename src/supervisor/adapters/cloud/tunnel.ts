/**
 * The device's end of the WebSocket tunnel: one connection kept open to the cloud, through
 * which the cloud's proxy route reaches the device API. Reconnects with jittered backoff; a
 * heartbeat detects a half-open link (a partition leaves TCP believing it is connected).
 */
import WebSocket from 'ws';
import { Value } from '@sinclair/typebox/value';
import { TunnelRequest, type TunnelResponse } from '../../../protocol/device-cloud.js';
import { backoffDelay, type BackoffPolicy } from './backoff.js';

export interface TunnelLog {
  info(message: string): void;
  warn(message: string): void;
}

export interface TunnelOptions {
  readonly url: string;
  readonly deviceKey: () => string;
  /** Runs one device API call; never rejects (errors become a response). */
  readonly handle: (req: TunnelRequest) => Promise<TunnelResponse>;
  readonly backoff: BackoffPolicy;
  /** A ping every interval; no pong before the next one ends the connection. */
  readonly heartbeatMs: number;
  readonly log: TunnelLog;
  readonly onChange?: (connected: boolean) => void;
}

/**
 * The least time a connection attempt gets to finish its handshake. The heartbeat says how soon
 * a dead link is noticed and may be short (a lab's 1 s); a handshake through a busy cloud, a
 * balancer or a slow link takes longer, and one cut at a heartbeat's length fails again at every
 * retry while the backoff grows, so the device stayed offline for minutes.
 */
export const HANDSHAKE_MIN_MS = 10_000;

export class Tunnel {
  private socket: WebSocket | null = null;
  private attempts = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private closed = false;
  private open = false;
  /** Why the last connection failed or ended (null while none has); read when a device says why it is offline. */
  lastProblem: string | null = null;

  constructor(private readonly options: TunnelOptions) {}

  get connected(): boolean {
    return this.open;
  }

  start(): void {
    if (!this.closed && !this.socket && !this.retryTimer) this.connect();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.heartbeat);
    this.socket?.terminate();
    this.socket = null;
  }

  private connect(): void {
    const socket = new WebSocket(this.options.url, {
      headers: { authorization: `Bearer ${this.options.deviceKey()}` },
      handshakeTimeout: Math.max(this.options.heartbeatMs, HANDSHAKE_MIN_MS),
    });
    this.socket = socket;
    let alive = true;
    let silent = false;
    socket.on('open', () => {
      this.attempts = 0;
      this.setOpen(true);
      this.options.log.info(`Cloud tunnel connected to ${this.options.url}`);
      this.heartbeat = setInterval(() => {
        if (!alive) {
          silent = true;
          return socket.terminate();
        }
        alive = false;
        socket.ping();
      }, this.options.heartbeatMs);
    });
    socket.on('pong', () => (alive = true));
    socket.on('message', (data) => void this.onMessage(socket, data.toString()));
    socket.on('error', (err) => {
      this.lastProblem = err.message;
      if (this.attempts <= 1) this.options.log.warn(`Cloud tunnel: ${err.message}`);
    });
    socket.on('close', (code) => {
      clearInterval(this.heartbeat);
      if (this.open) this.lastProblem = silent ? `the cloud sent no pong within ${this.options.heartbeatMs} ms` : `closed (code ${code})`;
      if (this.socket === socket) this.socket = null;
      if (this.open) this.options.log.warn('Cloud tunnel closed; reconnecting');
      this.setOpen(false);
      if (this.closed) return;
      this.attempts += 1;
      this.retryTimer = setTimeout(() => {
        this.retryTimer = undefined;
        if (!this.closed) this.connect();
      }, backoffDelay(this.attempts, this.options.backoff));
      this.retryTimer.unref();
    });
  }

  private setOpen(open: boolean): void {
    if (this.open === open) return;
    this.open = open;
    this.options.onChange?.(open);
  }

  private async onMessage(socket: WebSocket, text: string): Promise<void> {
    let frame: unknown;
    try {
      frame = JSON.parse(text);
    } catch {
      this.options.log.warn('Cloud tunnel: ignored a frame that is not JSON');
      return;
    }
    if (!Value.Check(TunnelRequest, frame)) {
      this.options.log.warn('Cloud tunnel: ignored a malformed request frame');
      return;
    }
    const response = await this.options.handle(frame);
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(response));
  }
}
