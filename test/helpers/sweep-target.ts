/**
 * The sim target as `fleetlab sweep` prepares it (its host checked, the harness's environment,
 * the test images built), for tests that drive a sweep or its parts in-process.
 */
import { checkTargetHost, harnessEnv } from '../../hil/harness/run.js';
import { prepareTargetsNamed } from '../../hil/suite-setup.js';
import { loadTarget } from '../../hil/targets/index.js';
import type { TargetDriver } from '../../hil/targets/target-driver.js';

export async function sweepSimTarget(what: string): Promise<TargetDriver> {
  await checkTargetHost('sim', '/var/run/docker.sock', what);
  // The command's environment but its TMPDIR: this run's own temporary directory is checked for leftovers.
  const { TMPDIR: _, ...env } = harnessEnv('/var/run/docker.sock');
  Object.assign(process.env, env);
  await prepareTargetsNamed(['sim'], { testImages: true });
  return loadTarget('sim');
}
