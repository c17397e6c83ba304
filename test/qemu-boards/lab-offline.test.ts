/**
 * A lab board that does not come back after its power control: an emulated board whose lab
 * power switch turns it off for good (`qemu power off`; nobody powers it on again). A team's
 * spec calls `device.powerCycle()`: the test must fail as an infrastructure failure (its
 * annotation, HIL_ERR_BOARD_OFFLINE), the board must be marked offline in the lab (status,
 * log), a later run must be told at once that every board is offline rather than wait, and
 * `fleetlab lab online` must put the board back.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { boardConfigFor } from '../../hil/lab/board-config-for-qemu.js';
import type { QemuBoard } from '../../qemu/boot.js';
import { buildImage } from '../../device-image/build.js';
import { labBoard, repoRoot, reportItems, writeTeam } from './board-under-test.js';

const POWER_TIMEOUT_S = 20;
const cli = [process.execPath, join(repoRoot, 'bin', 'fleetlab.js')];
const fleetlab = (args: readonly string[], cwd: string) => execa(cli[0]!, [...cli.slice(1), ...args], { cwd, reject: false, env: { FLEETLAB_BOARD_CONFIG: '' } });

describe('a lab board that does not come back after a power cycle', () => {
  let dir: string;
  let board: QemuBoard | undefined;
  let labFile: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fleetlab-lab-offline-'));
    const { image } = await buildImage({ repoRoot });
    const booted = await labBoard(image, join(dir, 'qemu'), (l) => console.error(`lab-offline: ${l}`));
    board = booted.board;
    const config = boardConfigFor(booted.ready, cli);
    labFile = join(dir, 'fleetlab.lab.yaml');
    writeFileSync(labFile, stringify({
      leases: { store: `sqlite:${join(dir, 'leases.db')}`, ttlSeconds: 10 },
      // The lab's switch turns the board off; this test, not `qemu boot`, owns QEMU, so it stays off.
      boards: [{ name: 'qemu-a', tags: ['virt'], ...config, power: { cycle: [...cli, 'qemu', 'power', 'off', '--qmp', booted.ready.qmpSocket].join(' '), timeoutSeconds: POWER_TIMEOUT_S } }],
    }));
    writeTeam(join(dir, 'team'), {
      'power.spec.ts': `import { test } from 'fleetlab/test';

test('the board comes back after a power cycle', async ({ device }) => {
  await device.powerCycle();
});
`,
    });
  }, 900_000);

  afterAll(async () => {
    await board?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('fails the test as an infrastructure failure and takes the board out of the lab until it is put back', async () => {
    const team = join(dir, 'team');
    const run = await fleetlab(['test', '--target', 'board', '--lab', labFile, '--tag', 'virt', '--reporter=json'], team);
    expect(run.exitCode, run.stderr).toBe(1);
    const report = JSON.parse(run.stdout.slice(run.stdout.indexOf('{'))) as unknown;
    const infra = reportItems(report, 'annotations').find((a) => a.type === 'infrastructure failure');
    expect(infra?.description, run.stderr).toMatch(new RegExp(`did not answer within ${POWER_TIMEOUT_S} s after power cycle`));
    expect(JSON.stringify(report)).toContain('infrastructure failure: board 127.0.0.1');
    // The worker's own lines are in the report (its output during the test).
    expect(JSON.stringify(report)).toContain('marked qemu-a offline in the lab');

    const status = await fleetlab(['lab', 'status', '--lab', labFile], team);
    expect(status.stdout).toMatch(/qemu-a .*OFFLINE since .*did not answer within 20 s after power cycle.*fleetlab lab online qemu-a once fixed/);

    // Not handed to the next run, which is told at once instead of waiting out its budget.
    const started = Date.now();
    const again = await fleetlab(['test', '--target', 'board', '--lab', labFile, '--tag', 'virt'], team);
    expect(again.exitCode).not.toBe(0);
    expect(`${again.stdout}${again.stderr}`).toMatch(/every board with tags \[virt\] is offline: qemu-a \(did not answer/);
    expect(Date.now() - started).toBeLessThan(120_000);

    const online = await fleetlab(['lab', 'online', 'qemu-a', '--lab', labFile], team);
    expect(online.stdout).toMatch(/qemu-a is back in the lab/);
    const log = await fleetlab(['lab', 'log', '--lab', labFile], team);
    expect(log.stdout.trim().split('\n').map((l) => l.split(/\s+/)[2])).toEqual(['acquired', 'offline', 'online']);
  });
});
