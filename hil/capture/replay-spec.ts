/**
 * `fleetlab replay --spec`: a `fleetlab/test` spec that starts a device from a bundle and
 * asserts what a fixed device must do from there: let go of what held it (the app's update
 * locks, released as the app would), reach its target release with every service running,
 * and keep its volumes. A starting point the developer edits. Pure: a bundle in, text out.
 */
import { basename } from 'node:path';
import type { DeviceRecord } from '../../src/supervisor/state/store.js';
import type { Bundle } from './bundle.js';
import type { CapturedLocks } from './capture.js';
import { showBundle } from './show.js';

/** `bundleFromSpec`: the bundle's path relative to the spec's directory. */
export function replaySpec(bundle: Bundle, bundleFromSpec: string): string {
  const store = bundle.json<DeviceRecord>('supervisor/store.json');
  const target = store.localMode ? store.localTarget : (store.cloudTarget ?? store.localTarget);
  const app = target?.apps[0];
  const locks = bundle.has('supervisor/locks.json') ? bundle.json<CapturedLocks>('supervisor/locks.json').files : [];
  const appLocks = locks.filter((f) => !f.content.includes('"lockedBy":"fleetlab-supervisor"')).map((f) => f.path.split('/'));
  const name = basename(bundle.path);
  const waiting = /\nwaiting for:\n((?: {2}.*\n)+)/.exec(showBundle(bundle))?.[1]?.trimEnd().split('\n').map((l) => ` *   ${l.trim().replace(/ \(see the log below\)$/, '')}`) ?? [' *   nothing the capture could name'];
  const m = bundle.manifest;

  const body: string[] = [];
  if (appLocks.length) {
    body.push('  // The app held these update locks when the device was captured; a device updates once they go.');
    for (const [appId, service] of appLocks) body.push(`  await device.files!.remove(device.updateLockPath(${quoted(service!)}, ${Number(appId)}));`);
  }
  if (app) {
    const services = app.services.map((s) => s.serviceName);
    body.push(`  await device.waitForRelease({ releaseId: ${app.releaseId}, services: [${services.map(quoted).join(', ')}] }, { timeoutMs: 60_000 });`);
    for (const volume of app.volumes ?? []) {
      body.push(`  expect(await device.files!.volumePath!(${app.appId}, ${quoted(volume)}), ${quoted(`volume ${volume} is kept`)}).toBeTruthy();`);
    }
  } else {
    body.push('  // The captured target has no app: say here what the device must do.');
    body.push("  expect((await device.status()).appState).toBe('applied');");
  }
  const title = app ? `the device captured in ${name} reaches release ${app.releaseId} of app ${app.appId}` : `the device captured in ${name} settles`;
  const more = (target?.apps.length ?? 0) > 1 ? [` * The target has ${target!.apps.length} apps; this spec checks app ${app!.appId} only.`] : [];

  return [
    '/**',
    ` * A regression spec from a field capture (fleetlab replay --spec). The device starts in the`,
    ` * state captured in ${name} (${m.createdAt}, from ${m.source.kind} ${m.source.address}).`,
    ' * When it was captured, it was waiting for:',
    ...waiting,
    ...more,
    ' * Edit the assertions to what the fixed device must do.',
    ' */',
    "import { expect, test } from 'fleetlab/test';",
    '',
    `test.use({ fromBundle: ${quoted(bundleFromSpec)} });`,
    "test.skip(({ target }) => !['sim', 'container', 'qemu'].includes(target), 'a device starts from a bundle on the sim, container and qemu targets');",
    '',
    `test(${quoted(title)}, async ({ device }) => {`,
    ...body,
    '});',
    '',
  ].join('\n');
}

/** A single-quoted TypeScript string literal. */
const quoted = (text: string) => `'${text.replace(/[\\']/g, '\\$&').replace(/\n/g, '\\n')}'`;
