/**
 * The simulated host peer seen from the wire: libdbus's own dbus-send talks to it as it
 * would to systemd's daemons, so names, paths, signatures and error names are checked by a
 * client that is not ours.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { once } from 'node:events';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import * as dbus from '@jellybrick/dbus-next';
import { FleetlabError } from '../src/errors.js';
import { startPrivateBus, type PrivateBus } from '../sim/dbus/private-bus.js';
import { startHostPeer, type HostPeer } from '../sim/dbus/host-peer.js';

let dir: string;
let bus: PrivateBus;
let peer: HostPeer;

async function dbusSend(...args: string[]) {
  const result = await execa('dbus-send', [`--bus=${bus.address}`, '--print-reply', ...args], { reject: false });
  return { ok: result.exitCode === 0, out: result.stdout, err: result.stderr };
}

const hostname1 = ['--dest=org.freedesktop.hostname1', '/org/freedesktop/hostname1'];
const systemd1 = ['--dest=org.freedesktop.systemd1', '/org/freedesktop/systemd1'];
const login1 = ['--dest=org.freedesktop.login1', '/org/freedesktop/login1'];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fleetlab-peer-'));
  bus = await startPrivateBus({ dir: join(dir, 'bus') });
  peer = await startHostPeer({ busAddress: bus.address, stateDir: join(dir, 'state'), defaultHostname: 'sim-default' });
});

afterEach(async () => {
  await peer.close();
  await bus.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('private bus', () => {
  it('listens on system_bus_socket in its directory and reports its address and pid', async () => {
    expect(bus.address).toMatch(new RegExp(`^unix:path=${join(dir, 'bus', 'system_bus_socket')},guid=[0-9a-f]{32}$`));
    expect(bus.socketPath).toBe(join(dir, 'bus', 'system_bus_socket'));
    expect((await stat(bus.socketPath)).isSocket()).toBe(true);
    expect(() => process.kill(bus.pid, 0)).not.toThrow();
  });

  it('stop() waits for the daemon to exit and is idempotent', async () => {
    await peer.close();
    await bus.stop();
    await bus.stop();
    expect(() => process.kill(bus.pid, 0)).toThrow();
  });
});

describe('org.freedesktop.hostname1 on the wire', () => {
  it('dbus-send reads StaticHostname and Hostname', async () => {
    const staticName = await dbusSend(...hostname1, 'org.freedesktop.DBus.Properties.Get', 'string:org.freedesktop.hostname1', 'string:StaticHostname');
    expect(staticName.err).toBe('');
    expect(staticName.out).toMatch(/variant\s+string ""/);

    const hostname = await dbusSend(...hostname1, 'org.freedesktop.DBus.Properties.Get', 'string:org.freedesktop.hostname1', 'string:Hostname');
    expect(hostname.out).toMatch(/variant\s+string "sim-default"/);
  });

  it('dbus-send sets the static hostname with (sb) and reads it back', async () => {
    const set = await dbusSend(...hostname1, 'org.freedesktop.hostname1.SetStaticHostname', 'string:wire-name', 'boolean:false');
    expect(set.ok).toBe(true);
    expect(peer.hostname).toBe('wire-name');
    const all = await dbusSend(...hostname1, 'org.freedesktop.DBus.Properties.GetAll', 'string:org.freedesktop.hostname1');
    expect(all.out).toMatch(/string "StaticHostname"\s+variant\s+string "wire-name"/);
    expect(all.out).toMatch(/string "Hostname"\s+variant\s+string "wire-name"/);
  });

  it('refuses an invalid static hostname with InvalidArgs, as hostnamed does', async () => {
    const res = await dbusSend(...hostname1, 'org.freedesktop.hostname1.SetStaticHostname', 'string:not_valid', 'boolean:false');
    expect(res.ok).toBe(false);
    expect(res.err).toContain('org.freedesktop.DBus.Error.InvalidArgs');
    expect(res.err).toContain("Invalid static hostname 'not_valid'");
    expect(peer.staticHostname).toBe('');
  });

  it('a wrong signature is an unknown method, not a call', async () => {
    const res = await dbusSend(...hostname1, 'org.freedesktop.hostname1.SetStaticHostname', 'string:only-one-arg');
    expect(res.err).toContain('org.freedesktop.DBus.Error.UnknownMethod');
  });

  it('refuses to set the read-only properties with PropertyReadOnly', async () => {
    const res = await dbusSend(
      ...hostname1,
      'org.freedesktop.DBus.Properties.Set',
      'string:org.freedesktop.hostname1',
      'string:StaticHostname',
      'variant:string:sneaky',
    );
    expect(res.err).toContain('org.freedesktop.DBus.Error.PropertyReadOnly');
    expect(peer.staticHostname).toBe('');
  });

  it('introspects with the real member signatures and read-only access', async () => {
    const res = await dbusSend(...hostname1, 'org.freedesktop.DBus.Introspectable.Introspect');
    expect(res.out).toMatch(/<property name="StaticHostname" type="s" access="read"/);
    expect(res.out).toMatch(/<property name="Hostname" type="s" access="read"/);
    expect(res.out).toMatch(
      /<method name="SetStaticHostname">\s*<arg direction="in" type="s"\/>\s*<arg direction="in" type="b"\/>\s*<\/method>/,
    );
  });

  it('emits PropertiesChanged with the new values', async () => {
    const client = dbus.sessionBus({ busAddress: bus.address });
    try {
      const object = await client.getProxyObject('org.freedesktop.hostname1', '/org/freedesktop/hostname1');
      const properties = object.getInterface('org.freedesktop.DBus.Properties');
      const changed = once(properties, 'PropertiesChanged');
      await dbusSend(...hostname1, 'org.freedesktop.hostname1.SetStaticHostname', 'string:signalled', 'boolean:false');
      const [iface, values] = (await changed) as [string, Record<string, dbus.Variant>];
      expect(iface).toBe('org.freedesktop.hostname1');
      expect(values.StaticHostname?.value).toBe('signalled');
      expect(values.Hostname?.value).toBe('signalled');
    } finally {
      client.disconnect();
    }
  });
});

describe('org.freedesktop.systemd1.Manager on the wire', () => {
  it('RestartUnit returns a job object path and records the restart', async () => {
    const res = await dbusSend(...systemd1, 'org.freedesktop.systemd1.Manager.RestartUnit', 'string:redsocks.service', 'string:replace');
    expect(res.out).toMatch(/object path "\/org\/freedesktop\/systemd1\/job\/\d+"/);
    expect(peer.unitRestarts).toEqual([{ unit: 'redsocks.service', mode: 'replace', at: expect.any(Number) }]);
  });

  it('StartUnit and StopUnit are recorded as jobs of their type', async () => {
    await dbusSend(...systemd1, 'org.freedesktop.systemd1.Manager.StartUnit', 'string:a.service', 'string:fail');
    await dbusSend(...systemd1, 'org.freedesktop.systemd1.Manager.StopUnit', 'string:a.service', 'string:fail');
    expect(peer.unitJobs.map((job) => [job.type, job.unit])).toEqual([
      ['start', 'a.service'],
      ['stop', 'a.service'],
    ]);
    expect(peer.unitRestarts).toEqual([]);
  });

  it('an unknown job mode is InvalidArgs and is not recorded', async () => {
    const res = await dbusSend(...systemd1, 'org.freedesktop.systemd1.Manager.RestartUnit', 'string:redsocks.service', 'string:whenever');
    expect(res.err).toContain('org.freedesktop.DBus.Error.InvalidArgs');
    expect(res.err).toContain('Job mode whenever invalid');
    expect(peer.unitJobs).toEqual([]);
  });

  it('a malformed unit name is InvalidArgs', async () => {
    const res = await dbusSend(...systemd1, 'org.freedesktop.systemd1.Manager.RestartUnit', 'string:redsocks', 'string:fail');
    expect(res.err).toContain('org.freedesktop.DBus.Error.InvalidArgs');
  });

  it('with a unit list, other units are NoSuchUnit', async () => {
    await peer.close();
    peer = await startHostPeer({
      busAddress: bus.address,
      stateDir: join(dir, 'state'),
      defaultHostname: 'sim-default',
      units: ['redsocks.service'],
    });
    const res = await dbusSend(...systemd1, 'org.freedesktop.systemd1.Manager.RestartUnit', 'string:nginx.service', 'string:fail');
    expect(res.err).toContain('org.freedesktop.systemd1.NoSuchUnit');
    const ok = await dbusSend(...systemd1, 'org.freedesktop.systemd1.Manager.RestartUnit', 'string:redsocks.service', 'string:fail');
    expect(ok.ok).toBe(true);
  });
});

describe('org.freedesktop.login1.Manager on the wire', () => {
  it('Reboot(b) is recorded and announced', async () => {
    const rebooted = once(peer, 'reboot');
    const res = await dbusSend(...login1, 'org.freedesktop.login1.Manager.Reboot', 'boolean:false');
    expect(res.ok).toBe(true);
    await rebooted;
    expect(peer.powerRequests.map((r) => r.action)).toEqual(['reboot']);
  });

  it('PowerOff(b) is recorded', async () => {
    await dbusSend(...login1, 'org.freedesktop.login1.Manager.PowerOff', 'boolean:true');
    expect(peer.powerRequests.map((r) => r.action)).toEqual(['poweroff']);
  });
});

describe('service boundaries', () => {
  it('each object lives only under its own service name', async () => {
    const res = await dbusSend('--dest=org.freedesktop.hostname1', '/org/freedesktop/login1', 'org.freedesktop.login1.Manager.Reboot', 'boolean:false');
    expect(res.err).toContain('org.freedesktop.DBus.Error.UnknownObject');
    expect(peer.powerRequests).toEqual([]);
  });

  it('a second peer on the same bus fails clearly instead of queueing for the names', async () => {
    const err = await startHostPeer({ busAddress: bus.address, stateDir: join(dir, 'state2'), defaultHostname: 'x' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FleetlabError);
    expect((err as FleetlabError).code).toBe('SUP_ERR_HOST');
    expect((err as FleetlabError).message).toContain('org.freedesktop.hostname1');
  });

  it('a peer pointed at a missing bus fails with SUP_ERR_HOST', async () => {
    const err = await startHostPeer({
      busAddress: `unix:path=${join(dir, 'missing')}`,
      stateDir: join(dir, 'state3'),
      defaultHostname: 'x',
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((err as FleetlabError).code).toBe('SUP_ERR_HOST');
  });
});
