/**
 * `fleetlab board uninstall` after the install and the HIL `board` project
 * (./install.test.ts, .ci/run): the board is as the install found it, a second uninstall has
 * nothing to do, and an install killed with SIGKILL halfway is taken off as cleanly.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { diffBoardState, readBoardState, type BoardState } from '../helpers/board-state.js';
import { boardUnderTest, fleetlabBoard, lastEvent, ledOption } from './board-under-test.js';

const { config, ssh, address, baselineFile } = boardUnderTest();
const uninstall = () => fleetlabBoard(['uninstall', address, '--identity', config.privateKey]);

describe('fleetlab board uninstall', () => {
  let baseline: BoardState;
  beforeAll(async () => {
    baseline = JSON.parse(readFileSync(baselineFile, 'utf8')) as BoardState;
    await ssh.waitReachable(120_000);
  });
  afterAll(async () => {
    await ssh.close();
  });

  it('leaves the board as the install found it: files, packages, units, dockerd\'s config, containers, images', async () => {
    expect((await ssh.run(['test', '-f', '/etc/fleetlab/install.json'])).exitCode, 'the install test ran first').toBe(0);
    const r = await uninstall();
    expect(r.exitCode, r.all).toBe(0);
    expect(lastEvent(r.stdout)).toMatchObject({ event: 'uninstalled', removed: true });
    expect(diffBoardState(baseline, await readBoardState(ssh))).toEqual([]);
    await expect(fetch(`${config.apiUrl}/ping`, { signal: AbortSignal.timeout(5000) })).rejects.toThrow();
  });

  it('has nothing to do the second time', async () => {
    const r = await uninstall();
    expect(r.exitCode, r.all).toBe(0);
    expect(lastEvent(r.stdout)).toMatchObject({ event: 'uninstalled', removed: false });
    expect(r.stderr).toContain('nothing of fleetlab\'s is on this board');
  });

  it('takes off an install that was killed with SIGKILL while sending the supervisor', async () => {
    const led = ledOption(config);
    const run = fleetlabBoard(['install', address, '--identity', config.privateKey, '--led', led]);
    let seen = '';
    // Killed once it has begun sending: the manifest is on the board, the files half there.
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the install never reached its supervisor step:\n${seen}`)), 600_000);
      run.stderr!.on('data', (chunk: Buffer) => {
        seen += chunk.toString('utf8');
        if (seen.includes('[4/7] supervisor: sending')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    run.kill('SIGKILL');
    const killed = await run;
    expect(killed.signal).toBe('SIGKILL');
    expect((await ssh.run(['test', '-f', '/etc/fleetlab/install.json'])).exitCode).toBe(0);

    const r = await uninstall();
    expect(r.exitCode, r.all).toBe(0);
    expect(lastEvent(r.stdout)).toMatchObject({ event: 'uninstalled', removed: true });
    expect(diffBoardState(baseline, await readBoardState(ssh))).toEqual([]);
  });
});
