import { expect, test } from 'fleetlab/test';

test('a power cut during the update to release 2 keeps the readings, and release 2 runs', async ({ device }, testInfo) => {
  testInfo.setTimeout(5 * 60_000);
  const result = await device.sweep({
    from: 'compose.yaml',
    to: 'compose.v2.yaml',
    points: 1,
    settleMs: 3_000,
    check: async (d) => {
      const log = (await d.files!.read(`${await d.files!.volumePath!(1, 'readings')}/log`)).toString('utf8');
      if (!log.includes('from release 1') || !log.includes('from release 2')) throw new Error(`the readings log lacks release 1 or 2: ${log.slice(-200)}`);
    },
  });
  expect(result.points.filter((p) => p.outcome === 'broken')).toEqual([]);
});
