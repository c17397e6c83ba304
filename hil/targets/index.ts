/**
 * The target registry: project name -> driver module. Adding a target is a driver file next
 * to this one plus one line here; the Playwright config declares one project per entry, in
 * this order (the first is the default `npm run hil` runs).
 */
import { FleetlabError } from '../../src/errors.js';
import type { TargetDriver } from './target-driver.js';

export const targetRegistry: Record<string, () => Promise<TargetDriver>> = {
  sim: async () => (await import('./sim.js')).createSimTarget() as TargetDriver,
  container: async () => (await import('./container.js')).containerTarget as TargetDriver,
  qemu: async () => (await import('./qemu.js')).createQemuTarget() as TargetDriver,
  board: async () => (await import('./board.js')).createBoardTarget() as TargetDriver,
};

export const targetNames = Object.keys(targetRegistry);

/**
 * Targets that are one device (a lab board) or take the whole machine (QEMU under TCG): they
 * run one worker and get long per-test timeouts.
 */
export const SLOW_TARGETS: ReadonlySet<string> = new Set(['qemu', 'board']);

export async function loadTarget(name: string): Promise<TargetDriver> {
  const load = targetRegistry[name];
  if (!load) throw new FleetlabError('SUP_ERR_BAD_REQUEST', `no HIL target named ${JSON.stringify(name)}; known: ${targetNames.join(', ')} (hil/targets/index.ts)`);
  return load();
}
