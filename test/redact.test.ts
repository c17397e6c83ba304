/**
 * Redaction of what a capture reads (issue 14): secrets planted where a device keeps them
 * must not be in any byte of the result, whatever name or place they hide under; what is not
 * secret stays readable.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { REDACTED, redactJson, redactText, secretName, type RedactOptions } from '../hil/capture/redact.js';

const secret = (label: string) => `${label}-${randomBytes(12).toString('hex')}`;

const planted = {
  deviceKey: secret('device'),
  appKey: secret('app'),
  cloudKey: secret('cloud'),
  provisioningKey: secret('prov'),
  proxyPassword: secret('proxypw'),
  dbPassword: secret('dbpw'),
  registryPassword: secret('regpw'),
  tokenUnderInnocentName: secret('tok'),
};

/** Shaped as a capture sees them: the supervisor's store, config, a target, dockerd's inspect, host config. */
function deviceView() {
  return {
    store: { uuid: 'f00d', deviceKey: planted.deviceKey, appKeys: { '1': planted.appKey }, cloudKey: planted.cloudKey, localMode: false },
    config: { apiEndpoint: 'http://127.0.0.1:3000', provisioningKey: planted.provisioningKey, pollInterval: 900000 },
    target: {
      apps: {
        '1': {
          services: {
            '11': {
              serviceName: 'main',
              environment: { LOG_LEVEL: 'debug', DB_PASSWORD: planted.dbPassword, NOTES: `token ${planted.tokenUnderInnocentName} inside` },
              labels: { 'io.balena.features.supervisor-api': '1' },
            },
          },
        },
      },
    },
    containers: [
      {
        Name: '/main_11_1',
        Config: {
          Env: [`FLEETLAB_SUPERVISOR_API_KEY=${planted.appKey}`, 'LOG_LEVEL=debug', `DB_PASSWORD=${planted.dbPassword}`, 'PATH=/bin', 'EMPTY='],
          Labels: { 'io.fleetlab.service-name': 'main' },
        },
        HostConfig: { Privileged: false },
      },
    ],
    host: { network: { hostname: 'pi-17' }, proxy: { type: 'socks5', ip: '10.0.0.1', port: 1080, login: 'ops', password: planted.proxyPassword, noProxy: ['10.0.0.0/8'] } },
    registry: `https://builder:${planted.registryPassword}@registry.example:5000/v2/`,
  };
}

const options = (policy: RedactOptions['policy']): RedactOptions => ({
  policy,
  secrets: [planted.deviceKey, planted.appKey, planted.cloudKey, planted.provisioningKey],
});

describe('redaction', () => {
  it('by default no planted secret is left in any byte, and what is not secret stays', () => {
    const out = redactJson(deviceView(), options('default'));
    const bytes = JSON.stringify(out);
    for (const [name, value] of Object.entries(planted)) {
      if (name === 'tokenUnderInnocentName') continue; // an unknown value under an innocent name: only --redact-env drops it
      expect(bytes, name).not.toContain(value);
    }
    expect(out.store).toEqual({ uuid: 'f00d', deviceKey: REDACTED, appKeys: { '1': REDACTED }, cloudKey: REDACTED, localMode: false });
    expect(out.config).toEqual({ apiEndpoint: 'http://127.0.0.1:3000', provisioningKey: REDACTED, pollInterval: 900000 });
    expect(out.containers[0]!.Config.Env).toEqual(['FLEETLAB_SUPERVISOR_API_KEY=<redacted>', 'LOG_LEVEL=debug', 'DB_PASSWORD=<redacted>', 'PATH=/bin', 'EMPTY=']);
    expect(out.target.apps['1'].services['11'].environment.LOG_LEVEL).toBe('debug');
    expect(out.host.proxy).toEqual({ type: 'socks5', ip: '10.0.0.1', port: 1080, login: 'ops', password: REDACTED, noProxy: ['10.0.0.0/8'] });
    expect(out.registry).toBe('https://builder:<redacted>@registry.example:5000/v2/');
    expect(out.containers[0]!.HostConfig).toEqual({ Privileged: false });
  });

  it('--redact-env drops every environment value, keeping the names', () => {
    const out = redactJson(deviceView(), options('env'));
    const bytes = JSON.stringify(out);
    for (const [name, value] of Object.entries(planted)) expect(bytes, name).not.toContain(value);
    expect(out.containers[0]!.Config.Env).toEqual(['FLEETLAB_SUPERVISOR_API_KEY=<redacted>', 'LOG_LEVEL=<redacted>', 'DB_PASSWORD=<redacted>', 'PATH=<redacted>', 'EMPTY=<redacted>']);
    expect(Object.keys(out.target.apps['1'].services['11'].environment)).toEqual(['LOG_LEVEL', 'DB_PASSWORD', 'NOTES']);
    expect(Object.values(out.target.apps['1'].services['11'].environment)).toEqual([REDACTED, REDACTED, REDACTED]);
  });

  it('--no-redact keeps everything as it was', () => {
    expect(redactJson(deviceView(), options('none'))).toEqual(deviceView());
    const text = `key ${planted.deviceKey}`;
    expect(redactText(text, options('none'))).toBe(text);
  });

  it('cuts the known secrets out of text (a journal line, a URL) and the password of any URL', () => {
    const journal = [
      `Jan 01 supervisor[1]: polling http://127.0.0.1:3000/device/v3/f00d/state?apikey=${planted.cloudKey}`,
      `Jan 01 app[2]: connecting to postgres://app:${planted.dbPassword}@db:5432/app`,
      `Jan 01 app[2]: key=${planted.appKey}${planted.appKey}`,
    ].join('\n');
    const out = redactText(journal, options('default'));
    for (const value of [planted.cloudKey, planted.dbPassword, planted.appKey]) expect(out).not.toContain(value);
    expect(out).toContain('state?apikey=<redacted>');
    expect(out).toContain('postgres://app:<redacted>@db:5432/app');
    // A short "secret" would cut common words out of every line: not matched.
    expect(redactText('the cat sat', { policy: 'default', secrets: ['cat'] })).toBe('the cat sat');
  });

  it('names that look secret', () => {
    for (const name of ['password', 'DB_PASSWORD', 'apiKey', 'appKeys', 'provisioningKey', 'AWS_SECRET_ACCESS_KEY', 'GITHUB_TOKEN', 'Authorization', 'session_cookie', 'PRIVATE_KEY_PATH', 'registryCredentials']) {
      expect(secretName(name), name).toBe(true);
    }
    for (const name of ['LOG_LEVEL', 'PATH', 'hostname', 'serviceName', 'Privileged', 'io.fleetlab.config-hash', 'Image', 'Labels']) {
      expect(secretName(name), name).toBe(false);
    }
  });
});
