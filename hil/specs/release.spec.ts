/**
 * A compose project as a device team hands it over: built, delivered and run on every target
 * with the `images` capability. On qemu and board the release is built for arm64 and the board
 * pulls it from the registry fleetlab runs (hil/targets/pulled-images.ts). The sim target on the
 * simulated engine takes the release the same way (pulled from that registry) but does not run
 * its code, so nothing writes the volume's file: it lacks `images` and this spec skips there.
 */
import { fileURLToPath } from 'node:url';
import { expect, since, test } from 'fleetlab/test';

const APP = fileURLToPath(new URL('../../fixtures/apps/counter', import.meta.url));
const PULLING_TARGETS = new Set(['qemu', 'board']);

test('a compose project is built, delivered and run; an update keeps its volume', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ device, needs }) => {
  needs('images', 'files.volumes');
  const first = await device.deploy(APP);
  expect(first.services).toEqual(['counter', 'idle']);
  if (PULLING_TARGETS.has(device.target)) {
    // Pulled from fleetlab's registry: the target state names the registry's references.
    expect(first.images.counter).toMatch(/^127\.0\.0\.1:\d+\/counter\/counter:[0-9a-f]{16}$/);
  }
  const status = await device.status();
  expect(status.containers.map((c) => `${c.serviceName} ${c.status}`).sort()).toEqual(['counter Running', 'idle Running']);

  const starts = `${await device.files!.volumePath!(1, 'data')}/starts`;
  const read = async () => ((await device.files!.exists(starts)) ? (await device.files!.read(starts)).toString('utf8') : '');
  await expect.poll(read).toMatch(/^release 1 on (x86_64|aarch64)\n$/);
  const arch = (await read()).trim().split(' ').pop();
  await device.deploy(APP, { env: { RELEASE: '2' } });
  await expect.poll(read).toBe(`release 1 on ${arch}\nrelease 2 on ${arch}\n`);
});
