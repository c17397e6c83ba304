/**
 * Starts the container target once and exercises every protocol it declares, printing one
 * line per check: the driver's own smoke test, runnable without the HIL suite
 * (`npx tsx hil/targets/container-exercise.mts`). Exits non-zero on the first failure.
 */
import { containerTarget } from './container.js';
import { until } from '../../src/wait.js';

const t0 = Date.now();
const log = (what: string, detail = '') => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}${detail ? `: ${detail}` : ''}`);
function check(cond: unknown, what: string): asserts cond {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const dut = await containerTarget.start({});
try {
  const id = dut.api.identity;
  log('ready', `${id.url} uuid ${id.uuid}`);
  const dev = await dut.api.request('GET', '/v1/device');
  check(dev.status === 200, `/v1/device answered ${dev.status}`);
  log('api', `/v1/device ${dev.status} ${dev.text.slice(0, 80)}`);

  const uname = await dut.exec!.run(['cat', '/etc/debian_version']);
  check(uname.exitCode === 0 && /^12\./.test(uname.stdout), `exec: ${JSON.stringify(uname)}`);
  const echo = await dut.exec!.run(['cat'], { input: 'through stdin' });
  check(echo.stdout === 'through stdin', `exec stdin: ${JSON.stringify(echo)}`);
  const fail = await dut.exec!.run(['sh', '-c', 'echo err >&2; exit 3']);
  check(fail.exitCode === 3 && fail.stderr.trim() === 'err', `exec exit code: ${JSON.stringify(fail)}`);
  log('exec', `debian ${uname.stdout.trim()}, stdin and exit codes`);

  const f = '/tmp/fleetlab-exercise/a/b.bin';
  const bytes = Buffer.from([0, 1, 2, 255, 10, 13]);
  await dut.files!.write(f, bytes);
  check((await dut.files!.read(f)).equals(bytes), 'files read back');
  check(await dut.files!.exists(f), 'files exists');
  check((await dut.files!.list('/tmp/fleetlab-exercise/a')).join() === 'b.bin', 'files list');
  await dut.files!.remove('/tmp/fleetlab-exercise');
  check(!(await dut.files!.exists(f)), 'files remove');
  log('files', 'write/read (binary)/exists/list/remove');

  const since = Date.now();
  const blink = await dut.api.request('POST', '/v1/blink');
  check(blink.status === 200, `blink ${blink.status}`);
  // The span whose LED transitions are counted: measured, not awaited.
  await new Promise((r) => setTimeout(r, 1500));
  const seen = await dut.led!.transitions(since);
  check(seen.length >= 4, `led transitions during a blink: ${seen.length}`);
  log('led', `${seen.length} transitions in 1.5 s of blink, level now ${await dut.led!.level()} (${dut.led!.line})`);

  const journal = await dut.journal!.entries({ unit: 'fleetlab-supervisor.service', lines: 5 });
  check(journal.length > 0, 'journal has supervisor entries');
  log('journal', `${journal.length} entries, last: ${journal.at(-1)!.message.slice(0, 80)}`);

  let t = Date.now();
  await dut.power!.reboot();
  check((await dut.api.request('GET', '/v1/device')).status === 200, 'api after reboot');
  log('power.reboot', `${Date.now() - t} ms`);

  t = Date.now();
  await dut.power!.cycle();
  const after = await dut.api.request('GET', '/v1/device');
  check(after.status === 200, 'api after cycle (same key)');
  check((await dut.led!.level()) === 0, 'led off after a power cycle');
  log('power.cycle', `${Date.now() - t} ms, same key and uuid`);

  t = Date.now();
  await dut.power!.off();
  const down = await dut.api.request('GET', '/ping', { timeoutMs: 2000 }).then((r) => r.status, () => 'unreachable');
  check(down === 'unreachable', `api while off: ${down}`);
  await dut.power!.on();
  check((await dut.api.request('GET', '/v1/device')).status === 200, 'api after on');
  log('power.off/on', `${Date.now() - t} ms`);

  const boots = await dut.exec!.run(['journalctl', '--directory', id.lockRoot.replace(/locks$/, 'journal'), '--list-boots', '--no-pager']);
  check(boots.exitCode === 0, `journalctl --list-boots: ${boots.stderr}`);
  log('journal boots', `${boots.stdout.trim().split('\n').length} boots listed`);

  // An app with a named volume runs on the host's dockerd; its volume is a device path.
  const target = {
    local: {
      name: 'exercise',
      config: { SUPERVISOR_LOCAL_MODE: '1' },
      apps: {
        '1': {
          name: 'demo', commit: 'c1', releaseId: '1', volumes: { data: {} }, networks: {},
          services: { '1': { serviceName: 'main', serviceId: 1, imageId: 1, image: 'fleetlab/test-app:1', labels: {}, environment: {}, volumes: ['data:/data'] } },
        },
      },
    },
  };
  const set = await dut.api.request('POST', '/v2/local/target-state', { body: target });
  check(set.status === 200, `target-state ${set.status} ${set.text}`);
  // The check below says so when the volume never shows.
  const vol = await until('the volume of app 1', () => dut.files!.volumePath!(1, 'data'), (v) => Boolean(v), { timeoutMs: 30_000, intervalMs: 500 }).catch(() => undefined);
  check(vol && (await dut.files!.exists(vol)), `volume path ${vol} on the device`);
  log('files.volumePath', `app 1 volume data at ${vol}, visible in the device container`);
  log('all checks passed');
} finally {
  await dut.close();
  log('closed');
}
