/**
 * `device.sweep()` as a spec runs it (issue 41): the example app's update from release 1 to 2
 * walked through power cuts, each point on a fresh device of the target, with the app's own
 * check (release 2 has started on the volume release 1 wrote). The table is attached to the
 * report. One point: how the points are drawn and how many break is test/sweep.test.ts's, on
 * several; here the sweep runs from a spec on every target.
 */
import { fileURLToPath } from 'node:url';
import { expect, since, test } from 'fleetlab/test';

const APP = fileURLToPath(new URL('../../examples/device-app/', import.meta.url));

test('a power-cut sweep of the example app\'s update: every point ends on release 2 with its data', { annotation: since('9.7.0', 'GET /v2/state/status') }, async ({ device, needs }, testInfo) => {
  needs('power.cycle', 'images', 'files.volumes');
  const slow = (device.facts?.timeScale ?? 1) > 1;
  testInfo.setTimeout(slow ? 20 * 60_000 : 5 * 60_000);
  const result = await device.sweep({
    from: `${APP}compose.yaml`,
    to: `${APP}compose.v2.yaml`,
    points: 1,
    settleMs: 5_000,
    check: async (d) => {
      const boots = `${await d.files!.volumePath!(1, 'data')}/boots`;
      const text = (await d.files!.read(boots)).toString('utf8');
      if (!/^v1\n(v1\n)*v2\n/.test(text)) throw new Error(`the data volume's boots file reads ${JSON.stringify(text)}, not v1 then v2`);
    },
  });
  const broken = result.points.filter((p) => p.outcome === 'broken').map((p) => `${p.id}: ${p.broken.map((b) => `${b.invariant}: ${b.detail}`).join('; ')}`);
  expect(broken).toEqual([]);
  expect(result.points).toHaveLength(1);
  expect(testInfo.attachments.map((a) => a.name)).toContain('sweep');
});
