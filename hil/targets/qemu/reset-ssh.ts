/**
 * The emulated board made a fresh device over SSH, without booting it again: what a spec file
 * can leave behind wiped, the clock set, the supervisor started. Also what a board saved as
 * its image's ready state has been through first.
 */
import { FleetlabError } from '../../../src/errors.js';
import { waitForPing, type QemuBoard } from '../../../qemu/boot.js';
import { GUEST } from '../../../device-image/recipe.js';
import { runResetStep, supervisorWipeLines } from '../../../device-access/ssh-reset.js';
import type { SshDevice } from '../../../device-access/ssh-device.js';
import { deadlines, QEMU_TIMEOUTS } from '../timeouts.js';

const TIMEOUTS = deadlines(QEMU_TIMEOUTS);

/** Where a card image's config.txt as it booted is kept, for the reset to put back (its kernel= lines are the firmware's). */
export const BOOT_CONFIG_AS_BOOTED = '/run/fleetlab/config.txt.booted';

/**
 * The device reset between spec files: what a fresh board would not have. The test app
 * images stay (they came with the image, or were imported once); everything a spec can
 * create goes. config.txt goes back to how the board booted: empty on the emulated Pi's image.
 */
export function resetScript(bootDir: string = GUEST.bootDir): string {
  return [
    'set -eu',
    ...supervisorWipeLines({ unit: GUEST.unit, dataDir: GUEST.dataDir, lockRoot: GUEST.lockRoot, proxyConfigDir: `${bootDir}/system-proxy` }),
    `if [ -e ${BOOT_CONFIG_AS_BOOTED} ]; then cp ${BOOT_CONFIG_AS_BOOTED} ${bootDir}/config.txt; else : > ${bootDir}/config.txt; fi`,
    `printf '# Settings for this boot (FLEETLAB_* variables); the HIL harness writes the cloud link here.\\n' > ${GUEST.envFile}`,
    'hostnamectl set-hostname fleetlab',
    'systemctl restart redsocks.service || true',
  ].join('\n');
}

/** The board has no RTC: its clock is set from the harness's after every boot and restore. */
export async function setGuestClock(ssh: SshDevice): Promise<void> {
  const set = await ssh.run(['date', '-u', '-s', `@${(Date.now() / 1000).toFixed(3)}`]);
  if (set.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `setting the board's clock over SSH: ${set.stderr.trim() || `exit ${set.exitCode}`}`);
}

/** Runs `resetScript` on the board (the supervisor is left stopped). */
export async function resetOverSsh(ssh: SshDevice, bootDir?: string): Promise<void> {
  await runResetStep(ssh, 'wipe', resetScript(bootDir), [], TIMEOUTS.reset);
}

/** After a reset: the supervisor's unit started, and answering. */
export async function startSupervisor(ssh: SshDevice, board: QemuBoard): Promise<void> {
  const started = await ssh.run(['systemctl', 'start', GUEST.unit]);
  if (started.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `starting ${GUEST.unit}: ${started.stderr.trim()}`);
  await waitForPing(board.info.apiUrl, TIMEOUTS.ready, () => board.exitReason);
}

/** Until systemd has started everything it will at boot: a board saved earlier would finish starting at every restore. */
export async function waitSettled(ssh: SshDevice): Promise<void> {
  const r = await ssh.run(['timeout', String(TIMEOUTS.ready / 1000), 'systemctl', 'is-system-running', '--wait'], { timeoutMs: TIMEOUTS.ready + 10_000 });
  const state = r.stdout.trim();
  if (state !== 'running' && state !== 'degraded') throw new FleetlabError('SUP_ERR_HOST', `the board did not settle before it was saved: systemctl is-system-running says ${JSON.stringify(state)} ${r.stderr.trim()}`);
}
