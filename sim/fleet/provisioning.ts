/**
 * A provisioning key for a fleet, made with a cloud key that may write it: what `fleetlab sim
 * fleet --fleet F --api-key K` registers its devices with.
 */
import { FleetlabError, errorText } from '../../src/errors.js';

async function call(cloud: string, apiKey: string, method: string, path: string, body?: unknown): Promise<unknown> {
  let res: Response;
  try {
    res = await fetch(new URL(path, cloud), {
      method,
      headers: { authorization: `Bearer ${apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(30_000),
    });
  } catch (err) {
    throw new FleetlabError('SUP_ERR_CLOUD_UNREACHABLE', `the cloud at ${cloud} does not answer (${errorText(err)}): check --cloud`);
  }
  const text = await res.text();
  if (res.status === 401) throw new FleetlabError('SUP_ERR_UNAUTHORIZED', `the cloud refused --api-key (401): give a key that may write the fleet (npm start prints the admin key)`);
  if (!res.ok) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `${method} ${path} on the cloud answered ${res.status}: ${text.slice(0, 300)}`);
  return text ? JSON.parse(text) : undefined;
}

/** The fleet (by name or id) and a new provisioning key for it. */
export async function provisioningKeyFor(opts: { cloud: string; apiKey: string; fleet: string }): Promise<{ fleetId: number; fleetName: string; provisioningKey: string }> {
  const byId = /^[1-9][0-9]*$/.test(opts.fleet);
  const filter = byId ? `id eq ${opts.fleet}` : `app_name eq '${opts.fleet.replace(/'/g, "''")}'`;
  const found = (await call(opts.cloud, opts.apiKey, 'GET', `/v6/application?$select=id,app_name&$filter=${encodeURIComponent(filter)}`)) as { d: Array<{ id: number; app_name: string }> };
  const fleet = found.d[0];
  if (!fleet) throw new FleetlabError('SUP_ERR_NOT_FOUND', `no fleet ${JSON.stringify(opts.fleet)} on ${opts.cloud} that this key may see: give a fleet's name or id (GET /v6/application lists them)`);
  const key = await call(opts.cloud, opts.apiKey, 'POST', `/api-key/application/${fleet.id}/provisioning`, { name: 'fleetlab sim fleet' });
  if (typeof key !== 'string') throw new FleetlabError('SUP_ERR_INTERNAL', `the cloud answered a provisioning key request with ${JSON.stringify(key).slice(0, 100)}`);
  return { fleetId: fleet.id, fleetName: fleet.app_name, provisioningKey: key };
}
