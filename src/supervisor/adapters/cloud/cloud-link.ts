/**
 * The supervisor's link to the cloud: registers once with the provisioning key, polls the
 * target state (ETag, jittered backoff on failure), reports state (only what changed, at most
 * once per interval) and keeps the tunnel open. A partition only delays things: polls and
 * reports retry, and the report diff is taken against what the cloud last acknowledged, so
 * the device catches up in one report when the link heals.
 */
import type { DeviceReport, TunnelRequest, TunnelResponse } from '../../../protocol/device-cloud.js';
import type { CheckedTarget } from '../../../protocol/checked-target.js';
import { errorText } from '../../../errors.js';
import { backoffDelay, type BackoffPolicy } from './backoff.js';
import { CloudClient, type DeviceTag } from './cloud-client.js';
import { changedFields } from './report.js';
import { Tunnel, type TunnelLog } from './tunnel.js';

export interface DeviceIdentity {
  uuid: string;
  deviceKey: string;
  deviceType: string;
  deviceName?: string;
  supervisorVersion: string;
  osVersion: string;
}

export interface CloudLinkDeps {
  readonly client: CloudClient;
  readonly provisioningKey: string;
  readonly identity: () => DeviceIdentity;
  readonly registered: () => boolean;
  readonly markRegistered: () => Promise<void>;
  /** Called with each new target the cloud serves, checked by the client as it arrived. */
  readonly onTarget: (target: CheckedTarget) => Promise<void>;
  readonly report: () => Promise<DeviceReport>;
  readonly handle: (req: TunnelRequest) => Promise<TunnelResponse>;
  readonly pollIntervalMs: () => number;
  readonly reportIntervalMs: number;
  readonly backoff: BackoffPolicy;
  readonly heartbeatMs: number;
  readonly log: TunnelLog;
}

export class CloudLink {
  private readonly tunnel: Tunnel;
  private etag: string | undefined;
  private acked: DeviceReport = {};
  private pollTimer: NodeJS.Timeout | undefined;
  private reportTimer: NodeJS.Timeout | undefined;
  private pollFailures = 0;
  private reportFailures = 0;
  private polling: Promise<void> | null = null;
  private lastPollError: string | null = null;
  private lastReportError: string | null = null;
  private closed = false;

  constructor(private readonly deps: CloudLinkDeps) {
    this.tunnel = new Tunnel({
      url: deps.client.tunnelUrl(deps.identity().uuid),
      deviceKey: () => deps.identity().deviceKey,
      handle: deps.handle,
      backoff: deps.backoff,
      heartbeatMs: deps.heartbeatMs,
      log: deps.log,
    });
  }

  get tunnelConnected(): boolean {
    return this.tunnel.connected;
  }

  /** What is failing between this device and the cloud now, in one line; null when nothing is. */
  problem(): string | null {
    const parts: string[] = [];
    if (!this.tunnel.connected && this.tunnel.lastProblem) parts.push(`tunnel: ${this.tunnel.lastProblem}`);
    if (this.pollFailures > 0) parts.push(`${this.pollFailures} target-state polls failed, last: ${this.lastPollError}`);
    if (this.reportFailures > 0) parts.push(`${this.reportFailures} state reports failed, last: ${this.lastReportError}`);
    return parts.length ? parts.join('; ') : null;
  }

  start(): void {
    void this.bootstrap();
  }

  /** Poll now (POST /v1/update, or the cloud telling the device through the tunnel). */
  pollNow(): Promise<void> {
    if (this.closed) return Promise.resolve();
    clearTimeout(this.pollTimer);
    this.polling ??= this.poll().finally(() => {
      this.polling = null;
    });
    return this.polling;
  }

  tags(): Promise<DeviceTag[]> {
    const id = this.deps.identity();
    return this.deps.client.deviceTags(id.uuid, id.deviceKey);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.pollTimer);
    clearTimeout(this.reportTimer);
    this.tunnel.close();
  }

  private async bootstrap(): Promise<void> {
    for (let attempt = 1; !this.closed && !this.deps.registered(); attempt++) {
      try {
        await this.register();
      } catch (err) {
        const delay = backoffDelay(attempt, this.deps.backoff);
        this.deps.log.warn(`Cloud registration failed (${errorText(err)}); retrying in ${delay} ms`);
        // A retry schedule without a deadline (a device registers whenever the cloud answers), not a wait for src/wait.ts.
        await new Promise((r) => setTimeout(r, delay).unref());
      }
    }
    if (this.closed) return;
    this.tunnel.start();
    void this.pollNow();
    this.scheduleReport(0);
  }

  private async register(): Promise<void> {
    const id = this.deps.identity();
    const result = await this.deps.client.register(this.deps.provisioningKey, {
      uuid: id.uuid,
      api_key: id.deviceKey,
      device_type: id.deviceType,
      ...(id.deviceName ? { device_name: id.deviceName } : {}),
      supervisor_version: id.supervisorVersion,
      os_version: id.osVersion,
    });
    this.deps.log.info(result === 'already-registered' ? `Device ${id.uuid} was registered already` : `Registered device ${id.uuid} as id ${result.id} in fleet ${result.belongs_to__application}`);
    await this.deps.markRegistered();
  }

  private async poll(): Promise<void> {
    const id = this.deps.identity();
    let delay: number;
    try {
      const fetched = await this.deps.client.fetchTarget(id.uuid, id.deviceKey, this.etag);
      if (!fetched.notModified) {
        await this.deps.onTarget(fetched.target);
        this.etag = fetched.etag;
      }
      this.pollFailures = 0;
      delay = this.deps.pollIntervalMs();
    } catch (err) {
      this.pollFailures += 1;
      this.lastPollError = errorText(err);
      delay = backoffDelay(this.pollFailures, this.deps.backoff);
      if (this.pollFailures <= 3 || this.pollFailures % 10 === 0) {
        this.deps.log.warn(`Target state poll failed (${errorText(err)}); retry ${this.pollFailures} in ${delay} ms`);
      }
    }
    if (this.closed) return;
    this.pollTimer = setTimeout(() => void this.pollNow(), delay);
    this.pollTimer.unref();
  }

  private scheduleReport(delay: number): void {
    if (this.closed) return;
    clearTimeout(this.reportTimer);
    this.reportTimer = setTimeout(() => void this.sendReport(), delay);
    this.reportTimer.unref();
  }

  private async sendReport(): Promise<void> {
    let delay = this.deps.reportIntervalMs;
    try {
      const next = await this.deps.report();
      const diff = changedFields(this.acked, next);
      if (Object.keys(diff).length > 0) {
        const id = this.deps.identity();
        await this.deps.client.report(id.deviceKey, { [id.uuid]: diff });
        this.acked = next;
        }
      this.reportFailures = 0;
    } catch (err) {
      this.reportFailures += 1;
      this.lastReportError = errorText(err);
      delay = Math.max(this.deps.reportIntervalMs, backoffDelay(this.reportFailures, this.deps.backoff));
      if (this.reportFailures <= 3 || this.reportFailures % 10 === 0) this.deps.log.warn(`State report failed (${errorText(err)}); retry in ${delay} ms`);
    }
    this.scheduleReport(delay);
  }
}
