/**
 * DbusClient's promise: a call never hangs because the bus went away. dbus-next alone leaves
 * such a call pending forever; here a service that never answers is on a private bus, and
 * the bus is stopped while the call is in flight.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as dbus from '@jellybrick/dbus-next';
import { FleetlabError } from '../src/errors.js';
import { DbusClient, onBusError } from '../src/supervisor/adapters/dbus-client.js';
import { startPrivateBus, type PrivateBus } from '../sim/dbus/private-bus.js';
import { ExportedInterface } from '../sim/dbus/exported-interface.js';

class Silent extends ExportedInterface {
  private readonly received: () => void;
  constructor(received: () => void) {
    super('org.fleetlab.test.Silent');
    this.received = received;
  }
  Never(): Promise<string> {
    this.received();
    return new Promise(() => undefined);
  }
}
Silent.configureMembers({ methods: { Never: { inSignature: '', outSignature: 's' } } });

let dir: string;
let bus: PrivateBus;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fleetlab-dbus-client-'));
  bus = await startPrivateBus({ dir });
});

afterEach(async () => {
  await bus.stop();
  await rm(dir, { recursive: true, force: true });
});

it('rejects a call in flight with SUP_ERR_HOST when the bus goes away', async () => {
  const service = dbus.sessionBus({ busAddress: bus.address });
  onBusError(service, () => undefined);
  let received!: () => void;
  const callArrived = new Promise<void>((resolve) => (received = resolve));
  await service.requestName('org.fleetlab.test', 4);
  service.export('/org/fleetlab/test', new Silent(received));

  const client = new DbusClient({ busAddress: bus.address });
  try {
    const call = client.call({ destination: 'org.fleetlab.test', path: '/org/fleetlab/test', interface: 'org.fleetlab.test.Silent', member: 'Never' });
    const outcome = call.then(
      () => undefined,
      (e: unknown) => e,
    );
    await callArrived;
    await bus.stop();
    const err = await outcome;
    expect(err).toBeInstanceOf(FleetlabError);
    expect((err as FleetlabError).code).toBe('SUP_ERR_HOST');
    expect((err as FleetlabError).message).toContain('org.fleetlab.test.Silent.Never');
    expect((err as FleetlabError).message).toContain('closed the connection');
  } finally {
    await client.close();
    service.disconnect();
  }
});

it('refuses calls after close', async () => {
  const client = new DbusClient({ busAddress: bus.address });
  await client.close();
  const err = await client
    .call({ destination: 'org.freedesktop.DBus', path: '/org/freedesktop/DBus', interface: 'org.freedesktop.DBus', member: 'GetId' })
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect((err as FleetlabError).code).toBe('SUP_ERR_HOST');
  expect((err as FleetlabError).message).toContain('closed');
});
