/**
 * The production host adapter against the simulated host peer on a private dbus-daemon:
 * the same D-Bus calls a board sees, on a unix socket in a temp dir.
 *
 * Invalid hostnames are a bad request (SUP_ERR_BAD_REQUEST, 400), not a host error: the
 * adapter checks them with hostnamed's own rule before calling, and maps hostnamed's
 * InvalidArgs to a bad request too, so bad input never becomes a 5xx.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { FleetlabError } from '../src/errors.js';
import { createHostAdapter } from '../src/supervisor/adapters/host.js';
import type { HostPort, ProxySettings } from '../src/supervisor/adapters/ports.js';
import { startPrivateBus, type PrivateBus } from '../sim/dbus/private-bus.js';
import { startHostPeer, type HostPeer } from '../sim/dbus/host-peer.js';

const DEFAULT_HOSTNAME = 'fleetlab-default';

interface Fixture {
  dir: string;
  stateDir: string;
  proxyDir: string;
  bus: PrivateBus;
  peer: HostPeer;
  host: HostPort;
}

let fx: Fixture;

async function expectFleetlabError(promise: Promise<unknown>, code: string): Promise<FleetlabError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(FleetlabError);
  expect((err as FleetlabError).code).toBe(code);
  return err as FleetlabError;
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

beforeEach(async () => {
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-host-'));
  const stateDir = join(dir, 'state');
  const proxyDir = join(dir, 'boot', 'system-proxy');
  const bus = await startPrivateBus({ dir: join(dir, 'bus') });
  const peer = await startHostPeer({ busAddress: bus.address, stateDir, defaultHostname: DEFAULT_HOSTNAME });
  const host = createHostAdapter({ busAddress: bus.address, proxyConfigDir: proxyDir });
  fx = { dir, stateDir, proxyDir, bus, peer, host };
});

afterEach(async () => {
  await fx.host.close();
  await fx.peer.close();
  await fx.bus.stop();
  await rm(fx.dir, { recursive: true, force: true });
});

describe('hostname', () => {
  it('reads the default hostname when none is configured', async () => {
    expect(await fx.host.getHostname()).toBe(DEFAULT_HOSTNAME);
  });

  it('sets the static hostname, reads it back and persists it like /etc/hostname', async () => {
    await fx.host.setHostname('pi-lab-7');
    expect(await fx.host.getHostname()).toBe('pi-lab-7');
    expect(fx.peer.hostname).toBe('pi-lab-7');
    expect(fx.peer.staticHostname).toBe('pi-lab-7');
    expect(await readFile(join(fx.stateDir, 'hostname'), 'utf8')).toBe('pi-lab-7\n');
  });

  it('is visible on the wire to dbus-send, a client that is not ours', async () => {
    await fx.host.setHostname('seen-by-libdbus');
    const { stdout } = await execa('dbus-send', [
      `--bus=${fx.bus.address}`,
      '--print-reply',
      '--dest=org.freedesktop.hostname1',
      '/org/freedesktop/hostname1',
      'org.freedesktop.DBus.Properties.Get',
      'string:org.freedesktop.hostname1',
      'string:StaticHostname',
    ]);
    expect(stdout).toMatch(/variant\s+string "seen-by-libdbus"/);
  });

  it('announces the change', async () => {
    const changed = once(fx.peer, 'hostname');
    await fx.host.setHostname('announced');
    expect(await changed).toEqual(['announced']);
  });

  it('resets to the default with an empty name', async () => {
    await fx.host.setHostname('temporary');
    await fx.host.setHostname('');
    expect(await fx.host.getHostname()).toBe(DEFAULT_HOSTNAME);
    expect(fx.peer.staticHostname).toBe('');
    expect(await exists(join(fx.stateDir, 'hostname'))).toBe(false);
  });

  it.each([
    ['underscore', 'bad_name'],
    ['leading hyphen', '-bad'],
    ['trailing dot', 'host.example.'],
    ['empty label', 'a..b'],
    ['65 characters', 'a'.repeat(65)],
    ['newline', 'host\nname'],
  ])('rejects an invalid hostname (%s) as a bad request', async (_label, name) => {
    await fx.host.setHostname('kept');
    const err = await expectFleetlabError(fx.host.setHostname(name), 'SUP_ERR_BAD_REQUEST');
    expect(err.statusCode).toBe(400);
    expect(err.message).toMatch(/hostname/);
    expect(fx.peer.hostname).toBe('kept');
  });

  it('survives a restart of the host services (same state dir)', async () => {
    await fx.host.setHostname('persistent-name');
    await fx.peer.close();
    fx.peer = await startHostPeer({ busAddress: fx.bus.address, stateDir: fx.stateDir, defaultHostname: DEFAULT_HOSTNAME });
    expect(fx.peer.hostname).toBe('persistent-name');
    // The adapter keeps its connection and reaches the new peer by its well-known name.
    expect(await fx.host.getHostname()).toBe('persistent-name');
  });
});

describe('proxy', () => {
  const proxy: ProxySettings = {
    type: 'socks5',
    ip: '10.0.0.5',
    port: 1080,
    login: 'user',
    password: 'secret',
    noProxy: ['152.10.30.4', '253.1.1.0/16', 'example.internal'],
  };

  it('is undefined when none is configured', async () => {
    expect(await fx.host.getProxy()).toBeUndefined();
  });

  it('writes redsocks.conf and no_proxy, reads them back, and restarts redsocks', async () => {
    await fx.host.setProxy(proxy);
    expect(await fx.host.getProxy()).toEqual(proxy);

    const conf = await readFile(join(fx.proxyDir, 'redsocks.conf'), 'utf8');
    expect(conf).toMatch(/^base \{\n/);
    expect(conf).toContain(
      'redsocks {\n\ttype = socks5;\n\tip = 10.0.0.5;\n\tport = 1080;\n\tlogin = "user";\n\tpassword = "secret";\n\tlocal_ip = 127.0.0.1;\n\tlocal_port = 12345;\n}\n',
    );
    expect(await readFile(join(fx.proxyDir, 'no_proxy'), 'utf8')).toBe('152.10.30.4\n253.1.1.0/16\nexample.internal\n');

    expect(fx.peer.unitRestarts).toEqual([{ unit: 'redsocks.service', mode: 'fail', at: expect.any(Number) }]);
  });

  it('reads the port back as a number and omits what was not set', async () => {
    await fx.host.setProxy({ type: 'http-connect', ip: 'proxy.example.com', port: 8080 });
    const read = await fx.host.getProxy();
    expect(read).toEqual({ type: 'http-connect', ip: 'proxy.example.com', port: 8080 });
    expect(await exists(join(fx.proxyDir, 'no_proxy'))).toBe(false);
  });

  it('replacing a proxy without noProxy removes the old no_proxy list', async () => {
    await fx.host.setProxy(proxy);
    await fx.host.setProxy({ type: 'socks4', ip: '10.0.0.6', port: 1081 });
    expect(await fx.host.getProxy()).toEqual({ type: 'socks4', ip: '10.0.0.6', port: 1081 });
    expect(fx.peer.unitRestarts).toHaveLength(2);
  });

  it('removes both files and restarts redsocks when unset', async () => {
    await fx.host.setProxy(proxy);
    await fx.host.setProxy(undefined);
    expect(await fx.host.getProxy()).toBeUndefined();
    expect(await exists(join(fx.proxyDir, 'redsocks.conf'))).toBe(false);
    expect(await exists(join(fx.proxyDir, 'no_proxy'))).toBe(false);
    expect(fx.peer.unitRestarts.map((r) => r.unit)).toEqual(['redsocks.service', 'redsocks.service']);
  });

  it('restarts the configured proxy unit', async () => {
    const host = createHostAdapter({ busAddress: fx.bus.address, proxyConfigDir: fx.proxyDir, proxyUnit: 'balena-proxy-config.service' });
    try {
      await host.setProxy(undefined);
    } finally {
      await host.close();
    }
    expect(fx.peer.unitRestarts).toEqual([{ unit: 'balena-proxy-config.service', mode: 'fail', at: expect.any(Number) }]);
  });

  it('escapes quotes and backslashes in login and password so they round-trip and cannot add keys', async () => {
    const tricky: ProxySettings = {
      type: 'socks5',
      ip: '10.0.0.5',
      port: 1080,
      login: 'a"; ip = 6.6.6.6; //',
      password: 'p}\\"{;x',
    };
    await fx.host.setProxy(tricky);
    expect(await fx.host.getProxy()).toEqual(tricky);
    const conf = await readFile(join(fx.proxyDir, 'redsocks.conf'), 'utf8');
    expect(conf).toContain('\tlogin = "a\\"; ip = 6.6.6.6; //";\n');
    expect(conf).toContain('\tpassword = "p}\\\\\\"{;x";\n');
    expect(conf.match(/^\tip = /gm)).toHaveLength(1);
  });

  it.each<[string, Partial<ProxySettings>]>([
    ['a newline in the login', { login: 'user\nip = 6.6.6.6' }],
    ['a carriage return in the password', { password: 'x\r' }],
    ['a semicolon in the ip', { ip: '10.0.0.5; type = http-relay' }],
    ['a quote in the ip', { ip: '"10.0.0.5"' }],
    ['an IPv6 ip (redsocks is IPv4 only)', { ip: '::1' }],
    ['a brace in the ip', { ip: 'proxy}' }],
    ['an unknown type', { type: 'socks6' as ProxySettings['type'] }],
    ['port 0', { port: 0 }],
    ['port 65536', { port: 65536 }],
    ['a fractional port', { port: 80.5 }],
    ['a noProxy entry with a newline', { noProxy: ['a.example\nb.example'] }],
    ['an empty noProxy entry', { noProxy: [''] }],
  ])('refuses %s as a bad request and changes nothing', async (_label, change) => {
    await fx.host.setProxy(proxy);
    await expectFleetlabError(fx.host.setProxy({ ...proxy, ...change }), 'SUP_ERR_BAD_REQUEST');
    expect(await fx.host.getProxy()).toEqual(proxy);
    expect(fx.peer.unitRestarts).toHaveLength(1);
  });

  it('reads a hand-written redsocks.conf with comments', async () => {
    await mkdir(fx.proxyDir, { recursive: true });
    await writeFile(
      join(fx.proxyDir, 'redsocks.conf'),
      [
        'base {',
        '\t// debug: connection progress',
        '\tlog_debug = off;',
        '\tlog = "file:/var/log/redsocks.log";',
        '\tredirector = iptables;',
        '}',
        '/* the proxy */',
        'redsocks {',
        '\tlocal_ip = 127.0.0.1; local_port = 12345;',
        '\tip = 192.168.1.1; port = 3128;',
        '\ttype = http-relay; // plain HTTP',
        '}',
        '',
      ].join('\n'),
    );
    expect(await fx.host.getProxy()).toEqual({ type: 'http-relay', ip: '192.168.1.1', port: 3128 });
  });
});

describe('a damaged redsocks.conf', () => {
  it.each([
    ['an unterminated section', 'redsocks {\n\ttype = socks5;\n'],
    ['an unknown escape', 'redsocks { type = socks5; ip = 1.2.3.4; port = 1; login = "a\\q"; }\n'],
    ['no port', 'redsocks { type = socks5; ip = 1.2.3.4; }\n'],
  ])('is a host error naming the file (%s)', async (_label, text) => {
    await mkdir(fx.proxyDir, { recursive: true });
    await writeFile(join(fx.proxyDir, 'redsocks.conf'), text);
    const err = await expectFleetlabError(fx.host.getProxy(), 'SUP_ERR_HOST');
    expect(err.message).toContain(join(fx.proxyDir, 'redsocks.conf'));
  });

  it('is replaced by the next setProxy', async () => {
    await mkdir(fx.proxyDir, { recursive: true });
    await writeFile(join(fx.proxyDir, 'redsocks.conf'), 'garbage {');
    await fx.host.setProxy({ type: 'socks5', ip: '10.1.1.1', port: 1080 });
    expect(await fx.host.getProxy()).toEqual({ type: 'socks5', ip: '10.1.1.1', port: 1080 });
  });
});

describe('power', () => {
  it('asks logind to reboot, and the peer records it and announces it after replying', async () => {
    const rebooted = once(fx.peer, 'reboot');
    await fx.host.reboot();
    expect(fx.peer.powerRequests).toEqual([{ action: 'reboot', at: expect.any(Number) }]);
    await rebooted;
  });

  it('asks logind to power off', async () => {
    const poweredOff = once(fx.peer, 'poweroff');
    await fx.host.powerOff();
    expect(fx.peer.powerRequests).toEqual([{ action: 'poweroff', at: expect.any(Number) }]);
    await poweredOff;
  });

  it('calls the onReboot and onPowerOff callbacks of the peer options', async () => {
    await fx.peer.close();
    const calls: string[] = [];
    let resolveBoth: () => void;
    const both = new Promise<void>((resolve) => (resolveBoth = resolve));
    const record = (what: string) => () => {
      calls.push(what);
      if (calls.length === 2) resolveBoth();
    };
    fx.peer = await startHostPeer({
      busAddress: fx.bus.address,
      stateDir: fx.stateDir,
      defaultHostname: DEFAULT_HOSTNAME,
      onReboot: record('reboot'),
      onPowerOff: record('poweroff'),
    });
    await fx.host.reboot();
    await fx.host.powerOff();
    await both;
    expect(calls).toEqual(['reboot', 'poweroff']);
  });
});

describe('when the host services are unreachable', () => {
  it('fails with SUP_ERR_HOST naming the interface and method once the bus is gone', async () => {
    expect(await fx.host.getHostname()).toBe(DEFAULT_HOSTNAME);
    await fx.bus.stop();

    const read = await expectFleetlabError(fx.host.getHostname(), 'SUP_ERR_HOST');
    expect(read.message).toContain('org.freedesktop.hostname1.StaticHostname');
    expect(read.message).toContain('cannot connect to the bus');

    const set = await expectFleetlabError(fx.host.setHostname('unreachable'), 'SUP_ERR_HOST');
    expect(set.message).toContain('org.freedesktop.hostname1.SetStaticHostname');

    const reboot = await expectFleetlabError(fx.host.reboot(), 'SUP_ERR_HOST');
    expect(reboot.message).toContain('org.freedesktop.login1.Manager.Reboot');

    // The files are written, then restarting the unit fails: the caller must hear about it.
    const proxy = await expectFleetlabError(fx.host.setProxy(undefined), 'SUP_ERR_HOST');
    expect(proxy.message).toContain('org.freedesktop.systemd1.Manager.RestartUnit');
  });

  it('fails with SUP_ERR_HOST when the bus is up but no host service owns the name', async () => {
    await fx.peer.close();
    const err = await expectFleetlabError(fx.host.getHostname(), 'SUP_ERR_HOST');
    expect(err.message).toContain('org.freedesktop.hostname1.StaticHostname');
    expect(err.message).toContain('org.freedesktop.DBus.Error.ServiceUnknown');
  });

  it('reconnects when the bus comes back', async () => {
    await fx.host.setHostname('before-outage');
    await fx.peer.close();
    await fx.bus.stop();
    await expectFleetlabError(fx.host.getHostname(), 'SUP_ERR_HOST');

    fx.bus = await startPrivateBus({ dir: join(fx.dir, 'bus') });
    fx.peer = await startHostPeer({ busAddress: fx.bus.address, stateDir: fx.stateDir, defaultHostname: DEFAULT_HOSTNAME });
    // Same socket path: the adapter that saw the outage connects again on its next call.
    expect(await fx.host.getHostname()).toBe('before-outage');
  });

  it('fails with SUP_ERR_HOST for a bus address where nothing listens', async () => {
    const host = createHostAdapter({ busAddress: `unix:path=${join(fx.dir, 'no-such-socket')}`, proxyConfigDir: fx.proxyDir });
    try {
      const err = await expectFleetlabError(host.powerOff(), 'SUP_ERR_HOST');
      expect(err.message).toContain('org.freedesktop.login1.Manager.PowerOff');
      expect(err.message).toContain('ENOENT');
    } finally {
      await host.close();
    }
  });
});
