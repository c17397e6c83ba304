/**
 * Which supervisor version a test's device answers as, and what a test says it needs:
 * `test.use({ supervisorVersion: '9.7.0' })` (or a project's `use`, or defineConfig's) picks
 * the version, `since('9.11.0')` marks a test or describe block as needing it, and a test on an
 * older device is skipped with the reason. Every test carries the version in an annotation, so
 * the HTML report says what it ran against.
 */
import type { TestInfo } from '@playwright/test';
import { CURRENT_VERSION, compareVersions, formatVersion, parseSupervisorVersion, type Version } from '../../src/supervisor/versions.js';

/** The annotation `since()` makes. */
export const SINCE_ANNOTATION = 'supervisor since';
/** The annotation every test gets: the version its device answered as. */
export const VERSION_ANNOTATION = 'supervisor version';
/** `fleetlab test --supervisor-version`: the version of every project, over the config's. */
export const SUPERVISOR_VERSION_VARIABLE = 'FLEETLAB_HIL_SUPERVISOR_VERSION';

/**
 * `test('name', { annotation: since('9.11.0', 'GET /v2/device/name') }, ...)`: the test needs a
 * supervisor of that version or newer; on an older device it is skipped, saying so. Also on
 * `test.describe`. `what` (optional) says what of that version the test uses.
 */
export function since(version: string, what?: string): { type: string; description: string } {
  const v = parseSupervisorVersion(version, `since(${JSON.stringify(version)})`);
  return { type: SINCE_ANNOTATION, description: `${formatVersion(v)}${what ? ` (${what})` : ''}` };
}

/** The option's value checked: a version fleetlab answers as, or undefined for its own. */
export function checkedVersion(raw: string | undefined): Version | undefined {
  return raw === undefined || raw === '' ? undefined : parseSupervisorVersion(raw, 'supervisorVersion (test.use, a project\'s use, defineConfig or fleetlab test --supervisor-version)');
}

/** Why a test cannot run on a device at `version`, from its `since` annotations; undefined when it can. */
export function tooOld(annotations: readonly { type: string; description?: string }[], version: Version | undefined): string | undefined {
  if (!version) return undefined;
  const needs = annotations
    .filter((a) => a.type === SINCE_ANNOTATION && a.description)
    .map((a) => ({ text: a.description!, version: parseSupervisorVersion(a.description!.split(' ')[0]!, SINCE_ANNOTATION) }))
    .filter((n) => compareVersions(n.version, version) > 0)
    .sort((a, b) => compareVersions(b.version, a.version));
  return needs[0] ? `needs supervisor ${needs[0].text}; the device answers as ${formatVersion(version)}` : undefined;
}

/** Annotates the test with its device's version, and skips it when a `since` asks for a newer one. */
export function applySupervisorVersion(testInfo: TestInfo, raw: string | undefined): void {
  const version = checkedVersion(raw);
  testInfo.annotations.push({ type: VERSION_ANNOTATION, description: version ? formatVersion(version) : `fleetlab's own (every endpoint, as ${formatVersion(CURRENT_VERSION)})` });
  const reason = tooOld(testInfo.annotations, version);
  if (!reason) return;
  console.log(`skipped "${testInfo.title}": ${reason}`);
  testInfo.skip(true, reason);
}
