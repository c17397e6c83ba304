/**
 * A target state checked once, where it enters the device (the cloud client, the local
 * target-state route, the store at start), and from then on passed as a typed value that
 * carries its device settings. Everything after the edge (the supervisor, the state engine,
 * the API's reads) takes a CheckedTarget and reads `target.settings`, so no one parses the
 * wire state or the config map a second time, and a value that was never checked has no
 * `settings` to read. Pure: no logging and no errors here; the edge decides what a problem
 * means for it (a 400 for the local API, a failed poll for the cloud).
 */
import { checkDeviceConfig, readDeviceConfig, unknownConfigKeys, type DeviceSettings } from './device-config.js';
import { checkWireState, emptyTarget, normaliseState, toWireState, type TargetState, type WireLocalState } from './target-state.js';

export interface CheckedTarget extends TargetState {
  /** The typed settings of `config` (readDeviceConfig), read once at the check. */
  readonly settings: DeviceSettings;
  /** Config keys no rule knows: kept in `config`, for the supervisor to log. */
  readonly unknownConfigKeys: readonly string[];
}

/**
 * Why a target was refused, each naming its field. Kept apart because the cloud edge treats
 * them apart: a state the schema-level rules refuse is an unusable answer from the cloud,
 * a malformed config value is the device refusing a target it could read.
 */
export interface TargetProblems {
  /** From checkWireState: ids, names, volumes, networks, dependencies, container settings. */
  readonly state: readonly string[];
  /** From checkDeviceConfig: malformed values of known config keys. */
  readonly config: readonly string[];
}

export type TargetCheck = { readonly ok: true; readonly target: CheckedTarget } | { readonly ok: false; readonly problems: TargetProblems };

/** The settings are read from the normalised state's own config, so they cannot drift from it. */
function withSettings(state: TargetState): CheckedTarget {
  return { ...state, settings: readDeviceConfig(state.config), unknownConfigKeys: unknownConfigKeys(state.config) };
}

/**
 * Checks a wire target (already past its JSON schema) once: the rules a schema cannot express,
 * the config values, then normalises it and reads its settings. `at` names the config map in
 * messages (`local.config`, `cloud.config`).
 */
export function checkTarget(wire: WireLocalState, at: string): TargetCheck {
  const problems: TargetProblems = { state: checkWireState(wire), config: checkDeviceConfig(wire.config, at) };
  if (problems.state.length || problems.config.length) return { ok: false, problems };
  return { ok: true, target: withSettings(normaliseState(wire)) };
}

/** All problems in one line, state first: the text of the error an edge raises. */
export const problemText = (problems: TargetProblems): string => [...problems.state, ...problems.config].join('; ');

/**
 * A target read back from the device store, checked once as it is loaded. It is kept even when
 * today's rules refuse it: it was accepted when it was stored, and refusing it at start would
 * stop the device's apps after an update that made a rule stricter. The problems come back for
 * the supervisor to log.
 */
export function checkStoredTarget(stored: TargetState): { readonly target: CheckedTarget; readonly problems: readonly string[] } {
  const wire = toWireState(stored);
  const problems = [...checkWireState(wire), ...checkDeviceConfig(wire.config, 'stored.config')];
  return { target: withSettings(stored), problems };
}

/** The target of a device that has none yet: no apps, default settings. */
export const emptyCheckedTarget = (name: string): CheckedTarget => withSettings(emptyTarget(name));

/** The target as the store keeps it: what was checked, not what was derived from it (the settings follow from `config`). */
export function storedForm(target: CheckedTarget): TargetState {
  const { settings: _settings, unknownConfigKeys: _unknown, ...state } = target;
  return state;
}
