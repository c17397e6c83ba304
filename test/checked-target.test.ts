/**
 * A target is checked once where it enters the device (src/protocol/checked-target.ts): the
 * check gives the normalised state with its settings, or every problem naming its field; a
 * target read back from the store is checked once too, and kept.
 */
import { describe, expect, it } from 'vitest';
import { checkStoredTarget, checkTarget, emptyCheckedTarget, problemText, storedForm } from '../src/protocol/checked-target.js';
import { readDeviceConfig } from '../src/protocol/device-config.js';
import { normaliseState, type WireLocalState } from '../src/protocol/target-state.js';

const wire = (config: Record<string, string>, serviceKey = '1'): WireLocalState => ({
  name: 'pi',
  config,
  apps: { '1': { name: 'a', commit: 'c', releaseId: '3', services: { [serviceKey]: { serviceName: 'main', serviceId: 1, imageId: 1, image: 'img:1' } } } },
});

describe('checkTarget', () => {
  it('gives the normalised state and the settings its config reads to', () => {
    const config = { SUPERVISOR_LOCAL_MODE: '1', SUPERVISOR_OVERRIDE_LOCK: 'true', SUPERVISOR_POLL_INTERVAL: '20000', HOST_CONFIG_gpu_mem: '64', SOMETHING_NEW: 'x' };
    const checked = checkTarget(wire(config), 'local.config');
    expect(checked.ok).toBe(true);
    if (!checked.ok) return;
    expect(storedForm(checked.target)).toEqual(normaliseState(wire(config)));
    expect(checked.target.settings).toEqual(readDeviceConfig(config));
    expect(checked.target.settings).toMatchObject({ localMode: true, overrideLock: true, pollIntervalMs: 20000, hostConfig: { gpu_mem: '64' } });
    expect(checked.target.unknownConfigKeys).toEqual(['SOMETHING_NEW']);
  });

  it('names every problem, the state and the config apart, the config under the name it is given', () => {
    const checked = checkTarget(wire({ SUPERVISOR_VPN_CONTROL: 'maybe' }, '2'), 'cloud.config');
    expect(checked).toEqual({
      ok: false,
      problems: { state: ['local.apps.1.services.2.serviceId must equal its key 2'], config: ['cloud.config.SUPERVISOR_VPN_CONTROL must be "1" or "0", got "maybe"'] },
    });
    if (checked.ok) return;
    expect(problemText(checked.problems)).toBe('local.apps.1.services.2.serviceId must equal its key 2; cloud.config.SUPERVISOR_VPN_CONTROL must be "1" or "0", got "maybe"');
  });
});

describe('the stored target', () => {
  it('is checked as it is loaded and kept as stored, with its settings', () => {
    const stored = normaliseState(wire({ SUPERVISOR_VPN_CONTROL: '0' }));
    const { target, problems } = checkStoredTarget(stored);
    expect(problems).toEqual([]);
    expect(storedForm(target)).toEqual(stored);
    expect(target.settings.vpnControl).toBe(false);
  });

  it('is kept, with its problems told, when a rule it was stored under got stricter', () => {
    const stored = normaliseState(wire({ SUPERVISOR_POLL_INTERVAL: '5000' }));
    const { target, problems } = checkStoredTarget(stored);
    expect(problems).toEqual(['stored.config.SUPERVISOR_POLL_INTERVAL must be an integer number of milliseconds, at least 10000, got "5000"']);
    expect(target.apps).toEqual(stored.apps);
    expect(target.settings.pollIntervalMs).toBe(5000);
  });

  it('is what the store keeps: the state, not the settings read from it', () => {
    const checked = checkTarget(wire({ SUPERVISOR_DELTA: '1' }), 'local.config');
    if (!checked.ok) throw new Error('refused');
    expect(Object.keys(storedForm(checked.target)).sort()).toEqual(['apps', 'config', 'name']);
  });

  it('is empty, with default settings, on a device that has none', () => {
    expect(emptyCheckedTarget('pi')).toMatchObject({ name: 'pi', config: {}, apps: [], settings: { localMode: undefined, vpnControl: true, overrideLock: false, hostConfig: {} } });
  });
});
