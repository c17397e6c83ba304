/** A captured device's state put onto the emulated board (`fleetlab replay`, a spec's fromBundle). */
import { FleetlabError } from '../../../src/errors.js';
import { GUEST } from '../../../device-image/recipe.js';
import { prepareReplayOnBoard } from '../../capture/replay.js';
import type { SshDevice } from '../../../device-access/ssh-device.js';

/**
 * A reset board (supervisor stopped, nothing of a device left) put into a bundle's state, its
 * supervisor set to run as the captured one did; `startSupervisor` then starts it from there.
 */
export async function replayOnto(ssh: SshDevice, bundle: string, bootDir: string): Promise<void> {
  const engine = await ssh.forwardUnixSocket('/var/run/docker.sock');
  try {
    const replayed = await prepareReplayOnBoard({
      bundle,
      board: {
        engineSocket: engine.path,
        files: ssh.files,
        runRaw: (argv, o) => ssh.runRaw(argv, o),
        dataDir: GUEST.dataDir,
        lockRoot: GUEST.lockRoot,
        proxyConfigDir: `${bootDir}/system-proxy`,
        setHostname: async (name) => {
          const r = await ssh.run(['hostnamectl', 'set-hostname', name]);
          if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_HOST', `hostnamectl set-hostname ${name} on the board: ${r.stderr.trim()}`);
        },
        port: GUEST.apiPort,
        arch: 'aarch64',
      },
      log: (line) => process.stderr.write(`qemu target: ${line}\n`),
    });
    await ssh.files.write(GUEST.envFile, replayEnv(replayed));
    // The board has no RTC: its clock is what the harness sets, here off as the captured one was.
    if (replayed.clockOffsetMs) await ssh.run(['date', '-u', '-s', `@${((Date.now() + replayed.clockOffsetMs) / 1000).toFixed(3)}`]);
  } finally {
    await engine.close();
  }
}

/** The env file for a replayed device: its mode, vendor and device type as captured. */
export function replayEnv(o: { localMode: boolean; vendor: string; deviceType: string }): string {
  return `FLEETLAB_LOCAL_MODE=${o.localMode}\nFLEETLAB_VENDOR=${o.vendor}\nFLEETLAB_DEVICE_TYPE=${o.deviceType}\n`;
}
