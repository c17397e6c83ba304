/**
 * Runs once after the suite: with Ryuk disabled nothing reaps the container target's
 * devices of a crashed run, so its own cleanup runs when that target was selected.
 */
import type { FullConfig } from '@playwright/test';
import { selectedTargets } from './suite-setup.js';

export default async function globalTeardown(config: FullConfig): Promise<void> {
  if (selectedTargets(config).includes('container')) {
    const { removeContainerTargetLeftovers } = await import('./targets/container-teardown.js');
    await removeContainerTargetLeftovers();
  }
}
