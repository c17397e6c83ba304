/**
 * How the container target marks what it starts on the machine's engine and disk, so the
 * teardown of a later run (lib/run-leftovers.ts, targets/container-teardown.ts) finds what a
 * killed one left without importing the target itself.
 */
/** Labels on every device container this target starts (next to testcontainers' own). */
export const TARGET_LABEL = {
  target: 'io.fleetlab.hil.target',
  /** PID of the process that started it: the global teardown leaves a live owner's containers alone. */
  owner: 'io.fleetlab.hil.owner-pid',
  /** The host directory bind-mounted at the same path (data dir, lock root). */
  dir: 'io.fleetlab.hil.dir',
} as const;
export const TARGET_NAME = 'container';
/** The device's host directory, made with mkdtemp in the user's temporary directory (src/user-tmp.ts). */
export const CONTAINER_DIR_PREFIX = 'fleetlab-ctr-';
