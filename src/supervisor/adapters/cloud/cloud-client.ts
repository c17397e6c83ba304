/**
 * HTTP calls from the supervisor to the cloud's device endpoints. Every failure to get a
 * usable answer (no route, timeout, a 5xx, a malformed body) is SUP_ERR_CLOUD_UNREACHABLE,
 * which the device API maps to 503; callers retry with backoff.
 */
import { request as httpRequest } from 'node:http';
import { Value } from '@sinclair/typebox/value';
import { FleetlabError, badRequest, errorText } from '../../../errors.js';
import {
  devicePaths,
  RegisterResponse,
  TargetStateResponse,
  type RegisterRequest,
  type StateReportBody,
} from '../../../protocol/device-cloud.js';
import { checkTarget, type CheckedTarget } from '../../../protocol/checked-target.js';

export interface CloudClientOptions {
  /** Base URL of the cloud API, e.g. `http://127.0.0.1:48400`. */
  readonly url: string;
  readonly timeoutMs: number;
  /** For calls a device API request waits on (tags): a user should get a 503 soon, not hang. */
  readonly interactiveTimeoutMs: number;
}

export interface DeviceTag {
  readonly id: number;
  readonly name: string;
  readonly value: string;
}

export type TargetFetch = { readonly notModified: true } | { readonly notModified: false; readonly target: CheckedTarget; readonly etag: string | undefined };

const unreachable = (what: string, detail: string) => new FleetlabError('SUP_ERR_CLOUD_UNREACHABLE', `cloud ${what}: ${detail}`);

export class CloudClient {
  private readonly base: URL;

  constructor(private readonly options: CloudClientOptions) {
    this.base = new URL(options.url);
  }

  /** `ws(s)://` URL of this device's tunnel. */
  tunnelUrl(uuid: string): string {
    const url = new URL(devicePaths.tunnel(uuid), this.base);
    url.protocol = this.base.protocol === 'https:' ? 'wss:' : 'ws:';
    return url.toString();
  }

  /** 201 registers; 409 means this uuid is registered already (a retry after a lost answer). */
  async register(provisioningKey: string, body: RegisterRequest): Promise<RegisterResponse | 'already-registered'> {
    const res = await this.call('register', 'POST', devicePaths.register, provisioningKey, body);
    if (res.status === 409) return 'already-registered';
    const parsed = this.expect('register', res, 201);
    if (!Value.Check(RegisterResponse, parsed)) throw unreachable('register', `unexpected answer ${res.text.slice(0, 200)}`);
    return parsed;
  }

  async fetchTarget(uuid: string, deviceKey: string, etag: string | undefined): Promise<TargetFetch> {
    const headers = etag ? { 'if-none-match': etag } : undefined;
    const res = await this.call('target state', 'GET', devicePaths.targetState(uuid), deviceKey, undefined, headers);
    if (res.status === 304) return { notModified: true };
    const parsed = this.expect('target state', res, 200);
    if (!Value.Check(TargetStateResponse, parsed) || !parsed[uuid]) throw unreachable('target state', `answer does not hold a target for ${uuid}`);
    // Checked once, here where it arrives; the supervisor takes the checked value as it is.
    const checked = checkTarget(parsed[uuid]!, 'cloud.config');
    if (!checked.ok) {
      // A state the rules refuse is an unusable answer, like a malformed body; a malformed
      // config value is the device refusing a target it could read (docs/decisions.md item 15).
      if (checked.problems.state.length) throw unreachable('target state', checked.problems.state.join('; '));
      throw badRequest(checked.problems.config.join('; '));
    }
    return { notModified: false, target: checked.target, etag: res.headers.etag };
  }

  async report(deviceKey: string, body: StateReportBody): Promise<void> {
    const res = await this.call('state report', 'PATCH', devicePaths.report, deviceKey, body);
    this.expect('state report', res, 200);
  }

  /** Tags through the OData API, as the reference supervisor reads them. */
  async deviceTags(uuid: string, deviceKey: string): Promise<DeviceTag[]> {
    const filter = `device/uuid eq '${uuid.replace(/'/g, "''")}'`;
    const path = `/v6/device_tag?$select=id,tag_key,value&$filter=${encodeURIComponent(filter)}&$orderby=id`;
    const res = await this.call('device tags', 'GET', path, deviceKey, undefined, undefined, this.options.interactiveTimeoutMs);
    const parsed = this.expect('device tags', res, 200) as { d?: Array<{ id: number; tag_key: string; value: string }> };
    if (!Array.isArray(parsed?.d)) throw unreachable('device tags', 'answer has no "d" list');
    return parsed.d.map((t) => ({ id: t.id, name: t.tag_key, value: t.value }));
  }

  private async call(what: string, method: 'GET' | 'POST' | 'PATCH', path: string, key: string, body?: unknown, extra?: Record<string, string>, timeoutMs = this.options.timeoutMs) {
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, ...extra };
    if (body !== undefined) headers['content-type'] = 'application/json';
    try {
      return await send(new URL(path, this.base), method, headers, body === undefined ? undefined : JSON.stringify(body), timeoutMs);
    } catch (err) {
      throw unreachable(what, errorText(err));
    }
  }

  private expect(what: string, res: { status: number; text: string }, status: number): unknown {
    if (res.status !== status) throw unreachable(what, `answered ${res.status} ${res.text.slice(0, 200)}`);
    try {
      return res.text === '' ? undefined : JSON.parse(res.text);
    } catch {
      throw unreachable(what, `answer is not JSON: ${res.text.slice(0, 200)}`);
    }
  }
}

interface Answer {
  readonly status: number;
  readonly text: string;
  readonly headers: { readonly etag: string | undefined };
}

/**
 * One request through node:http(s), whose modules the device API's server has loaded already:
 * an HTTP client package (undici) cost the supervisor its own code and, through it, Node's
 * bundled one: with the bundle's builtin imports, 4.5 MiB of idle RSS on Node 24. Node's global
 * agents keep connections alive. The timeout is on silence (no headers, then no body chunk), as
 * undici's headers and body timeouts were.
 */
async function send(url: URL, method: string, headers: Record<string, string>, body: string | undefined, timeoutMs: number): Promise<Answer> {
  // node:https brings node:tls, ~3 MiB of a device's RSS; a cloud on plain http (local mode,
  // a lab's cloud) never needs it.
  const request = url.protocol === 'https:' ? (await import('node:https')).request : httpRequest;
  return new Promise((resolveAnswer, reject) => {
    const req = request(url, { method, headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.once('error', reject);
      res.once('end', () => {
        const etag = res.headers.etag;
        resolveAnswer({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8'), headers: { etag: typeof etag === 'string' ? etag : undefined } });
      });
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.once('error', reject);
    req.end(body);
  });
}
