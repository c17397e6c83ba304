// A new fleet, a provisioning key and a registered device, with pinejs-client-core: the OData
// client balena-sdk is built on, unchanged but for its transport (fetch here, as balena-sdk's
// own subclass uses balena-request). Run against a fleetlab cloud with a user's API key:
//   FLEETLAB_CLOUD=http://127.0.0.1:8080 FLEETLAB_KEY=<key> node examples/cloud-client/register-device.mjs [fleet name]
import { randomBytes } from 'node:crypto';
import { PinejsClientCore } from 'pinejs-client-core';

class Cloud extends PinejsClientCore {
  constructor(base, apiKey) {
    super({ apiPrefix: `${base}/v6/` });
    Object.assign(this, { base, apiKey });
  }

  // An error keeps its status and parsed body where the client's upsert looks for them;
  // the fleetlab-error-code header names the cloud's error code.
  async _request({ method, url, body }) {
    const res = await fetch(url, {
      method,
      headers: { authorization: `Bearer ${this.apiKey}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    const parsed = text === '' ? '' : JSON.parse(text);
    if (!res.ok) {
      const code = res.headers.get('fleetlab-error-code');
      throw Object.assign(new Error(`${method} ${url}: ${res.status} ${code}: ${parsed}`), { statusCode: res.status, code, body: parsed });
    }
    return parsed;
  }

  // The key and device endpoints are not OData: the same transport, without the /v6 prefix.
  call(method, path, body) {
    return this.request({ method, apiPrefix: `${this.base}/`, url: path, body });
  }
}

const base = process.env.FLEETLAB_CLOUD ?? 'http://127.0.0.1:8080';
const user = new Cloud(base, process.env.FLEETLAB_KEY);
const name = process.argv[2] ?? 'lab-sdk';

// 1. A fleet belongs to an organization: each user has one, named after them.
const [org] = await user.get({ resource: 'organization', options: { $select: ['id', 'handle'] } });
const fleet = await user.post({ resource: 'application', body: { app_name: name, organization: org.id, device_type: 'raspberrypi4-64' } });
console.log(`fleet ${fleet.slug} (id ${fleet.id})`);

// 2. A provisioning key for it: what a device registers with on first boot.
const provisioningKey = await user.call('POST', `api-key/application/${fleet.id}/provisioning`, { name: `${name} devices` });

// 3. The device registers itself: its own uuid and the key it will use from now on.
const device = { uuid: randomBytes(16).toString('hex'), key: randomBytes(24).toString('base64url') };
const provisioning = new Cloud(base, provisioningKey);
const registered = await provisioning.call('POST', 'device/register', { uuid: device.uuid, api_key: device.key, device_type: 'raspberrypi4-64', device_name: 'bench-1' });
console.log(`device ${registered.device_name} (id ${registered.id}, uuid ${registered.uuid}) in fleet ${registered.belongs_to__application}`);

// 4. Read it back as the user, and tag it: upsert POSTs, and PATCHes on the cloud's 409 "must be unique".
await user.upsert({ resource: 'device_tag', id: { device: registered.id, tag_key: 'room' }, body: { value: 'lab-2' } });
await user.upsert({ resource: 'device_tag', id: { device: registered.id, tag_key: 'room' }, body: { value: 'lab-3' } });
const devices = await user.get({
  resource: 'device',
  options: { $select: ['device_name', 'uuid'], $filter: { belongs_to__application: fleet.id }, $expand: { device_tag: { $select: ['tag_key', 'value'] } } },
});
console.log(JSON.stringify(devices));

// 5. The device's own key reads its target state, as the supervisor polls it.
const target = await new Cloud(base, device.key).call('GET', `device/v3/${device.uuid}/state`);
console.log(`target state of ${device.uuid}: apps ${JSON.stringify(Object.keys(target[device.uuid].apps))}`);
