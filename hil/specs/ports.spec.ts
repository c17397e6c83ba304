/**
 * A device's published ports and host network are its own (DESIGN.md, "a device is a
 * device"): the same app, publishing 8080 as apps do and with a host-network service on 8081,
 * deployed to the device of each of the run's workers at once (the two tests run in parallel,
 * one per worker). Each reaches Running and answers at the addresses `device.address()` gives,
 * with its own greeting; on a board those are the board's, on the sim and container targets a
 * loopback address of the device's own for the published port and the device's host-network
 * container (or the device container) for the host-network one. Targets without `ports` skip
 * with the reason. And an address a spec holds still leads to the app after a power cycle (on
 * qemu the board is a new QEMU process then, which the forward follows).
 */
import { fileURLToPath } from 'node:url';
import { expect, scaled, since, test } from 'fleetlab/test';

const APP = fileURLToPath(new URL('../../fixtures/apps/greeter', import.meta.url));

test.describe.configure({ mode: 'parallel' });

for (const name of ['first', 'second']) {
  test(`the ${name} of two devices publishing 8080 with a host-network service on 8081 at once runs the app and answers at its own addresses`, { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ device, needs }, testInfo) => {
    needs('images', 'ports');
    const greeting = `${name} device, worker ${testInfo.workerIndex}`;
    await device.deploy(APP, { env: { GREETING: greeting } });
    expect((await device.status()).containers.map((c) => `${c.serviceName} ${c.status}`).sort()).toEqual(['beacon Running', 'web Running']);
    const url = await device.address('web', 80);
    // The port keeps its number: only the address is the device's.
    expect(new URL(url).port).toBe('8080');
    const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
    expect((await res.text()).trim()).toBe(greeting);
    // The host-network service listens on 8081 in the device's own host network, not the machine's.
    const beacon = await device.address('beacon', 8081);
    expect(new URL(beacon).port).toBe('8081');
    expect((await (await fetch(beacon, { signal: AbortSignal.timeout(10_000) })).text()).trim()).toBe(greeting);
  });
}

test('an address a spec holds answers again after a power cycle, without asking again', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ device, needs }) => {
  needs('images', 'ports', 'power.cycle');
  const greeting = 'the same device after a power cycle';
  await device.deploy(APP, { env: { GREETING: greeting } });
  const url = await device.address('web', 80);
  await device.powerCycle();
  const answer = () => fetch(url, { signal: AbortSignal.timeout(5_000) }).then(async (r) => (await r.text()).trim(), (err: unknown) => String(err));
  await expect.poll(answer, { timeout: scaled(60_000), message: `${url} answers after the power cycle` }).toBe(greeting);
  expect(await device.address('web', 80)).toBe(url);
});
