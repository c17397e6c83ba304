/**
 * A device reached through a fleetlab cloud rather than directly: its API through the cloud's
 * remote proxy (`POST /supervisor/<path>`, a user's key), and the device's own rows of the
 * cloud's data API (the device, its tags and variables, its fleet and the release it should
 * run). What `fleetlab capture --cloud` reads.
 */
import { errorText, FleetlabError } from '../../src/errors.js';
import { withDeadline } from '../../src/wait.js';
import type { ApiProtocol, HttpResponse } from '../../device-access/protocols.js';
import { redactJson, secretName, REDACTED, type RedactOptions } from './redact.js';

const captureError = (message: string) => new FleetlabError('HIL_ERR_CAPTURE', message);

/** The device API through the proxy: each call a POST naming the device, the method and the body. */
export function proxiedApi(cloudUrl: string, cloudKey: string, uuid: string): Pick<ApiProtocol, 'request'> {
  return {
    async request(method, path, options = {}): Promise<HttpResponse> {
      const [res, text] = await withDeadline(options.timeoutMs ?? 30_000, async (signal) => {
        const r = await fetch(`${cloudUrl}/supervisor${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${cloudKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ uuid, method, ...(options.body === undefined ? {} : { data: options.body }) }),
          signal,
        });
        return [r, await r.text()] as const;
      });
      return { status: res.status, headers: Object.fromEntries(res.headers), text, json: <T>() => JSON.parse(text) as T };
    },
  };
}

/** `GET /v6/...` with the user's key: the rows (`d`), or an error in the cloud's words. */
export function cloudReader(cloudUrl: string, cloudKey: string): (path: string) => Promise<Array<Record<string, unknown>>> {
  return async (path) => {
    let res: Response;
    let text: string;
    try {
      [res, text] = await withDeadline(30_000, async (signal) => {
        const r = await fetch(`${cloudUrl}/v6/${path}`, { headers: { authorization: `Bearer ${cloudKey}` }, signal });
        return [r, await r.text()] as const;
      });
    } catch (err) {
      throw captureError(`cannot reach the cloud at ${cloudUrl}: ${errorText(err)}`);
    }
    if (res.status !== 200) throw captureError(`GET /v6/${path}: ${res.status} ${text.slice(0, 300)}`);
    return (JSON.parse(text) as { d: Array<Record<string, unknown>> }).d;
  };
}

export interface CloudRows {
  device: Record<string, unknown>;
  tags: Array<Record<string, unknown>>;
  deviceVariables: Array<Record<string, unknown>>;
  fleet: Record<string, unknown> | undefined;
  fleetVariables: Array<Record<string, unknown>>;
  /** The release the device should run: its own pin, else its fleet's. */
  release: Record<string, unknown> | undefined;
}

const idOf = (link: unknown): number | undefined => {
  if (typeof link === 'number') return link;
  const id = (link as { __id?: unknown } | null)?.__id;
  return typeof id === 'number' ? id : undefined;
};

/** The device's rows, redacted: a variable whose name looks secret keeps its name only. */
export async function readCloudRows(get: (path: string) => Promise<Array<Record<string, unknown>>>, uuid: string, redact: RedactOptions): Promise<CloudRows> {
  const quoted = `'${uuid.replace(/'/g, "''")}'`;
  const [device] = await get(`device(uuid=${quoted})`);
  if (!device) throw captureError(`the cloud has no device ${uuid} that this key can see`);
  const fleetId = idOf(device.belongs_to__application);
  const tags = await get(`device_tag?$filter=device/uuid eq ${quoted}`);
  const deviceVariables = await get(`device_environment_variable?$filter=device/uuid eq ${quoted}`);
  const fleet = fleetId === undefined ? undefined : (await get(`application(${fleetId})`))[0];
  const fleetVariables = fleetId === undefined ? [] : await get(`application_environment_variable?$filter=application eq ${fleetId}`);
  const releaseId = idOf(device.should_be_running__release) ?? idOf(fleet?.should_be_running__release);
  const release = releaseId === undefined ? undefined : (await get(`release(${releaseId})`))[0];
  const variables = (rows: Array<Record<string, unknown>>) =>
    rows.map((row) => (redact.policy !== 'none' && (redact.policy === 'env' || secretName(String(row.name))) ? { ...row, value: REDACTED } : row));
  return redactJson({ device, tags, deviceVariables: variables(deviceVariables), fleet, fleetVariables: variables(fleetVariables), release }, redact);
}
