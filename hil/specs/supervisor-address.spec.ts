/**
 * A service with the supervisor-api label reaches the device API at its
 * PLATFORM_SUPERVISOR_ADDRESS from whatever network it is on, on every target, as on a board
 * (DESIGN.md, "a device is a device"): a worker on a user-defined network, one on the engine's
 * default bridge and one in the device's host network each call POST /v1/blink and GET /v2/applications/state with their
 * app's key (fixtures/apps/callers) and serve what they got. On the sim target with dockerd the
 * host network is the device's own container and the API the supervisor network's gateway; on
 * the container target the host network is the device container, where the API is on loopback,
 * and the worker reaches the container's address on the supervisor network.
 */
import { fileURLToPath } from 'node:url';
import { expect, pollUntil, since, test } from 'fleetlab/test';

const APP = fileURLToPath(new URL('../../fixtures/apps/callers', import.meta.url));

test('a worker on a user-defined network, one on the default bridge and one in the host network call /v1/blink and /v2/applications/state at PLATFORM_SUPERVISOR_ADDRESS', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ device, needs }) => {
  needs('images', 'ports');
  const since = Date.now();
  await device.deploy(APP);
  for (const [service, port] of [['worker', 80], ['bridged', 80], ['hostworker', 8091]] as const) {
    const url = await device.address(service, port);
    const report = await pollUntil(
      `${service} at ${url} to have called the API`,
      async () => (await fetch(url, { signal: AbortSignal.timeout(5_000) })).text(),
      (text) => /^blink exit 0/m.test(text) && /^state exit 0/m.test(text),
    );
    // The services of its app, as the app's scoped key reads them.
    const state = /^state exit 0: (.*)$/m.exec(report)![1]!;
    const services = Object.values(JSON.parse(state) as Record<string, { services: Record<string, unknown> }>).flatMap((a) => Object.keys(a.services));
    expect(services.sort(), report).toEqual(['bridged', 'hostworker', 'worker']);
    test.info().annotations.push({ type: service, description: report.split('\n')[0]! });
  }
  // The calls were the device's: its LED line blinked.
  if (device.led) expect((await device.led.transitions(since)).some((t) => t.value === 1)).toBe(true);
});
