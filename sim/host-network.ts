/**
 * The host network of a simulated device on an engine other devices share (the harness
 * machine's dockerd). On a board `network_mode: host` is the board's own network; on a shared
 * dockerd it would be the machine's, one for every device of the run: two devices running the
 * same app with a host-network service on a port collide, and the machine's ports are theirs.
 *
 * So each device gets a container of its own whose network namespace stands for its host
 * network (the supervisor's `hostNetworkContainer` setting): a busybox that sleeps, on the
 * engine's default bridge. Services with `network_mode: host` run in its namespace
 * (`container:<it>`); the harness reaches their ports at its bridge address
 * (hil/targets/engine-ports.ts). The supervisor, a process on the machine, is not in that
 * namespace, so a labelled service there is told the supervisor network's gateway, which the
 * supervisor connects this container to and listens on (rather than a forwarder on the
 * container's loopback: no process per connection, one address check, and the same API
 * address a board's gateway also answers from its host network).
 *
 * It carries the device's label, so it goes with the device's other containers: at the
 * device's stop, and when a killed run's leftovers are removed (device-leftovers.ts). Its name
 * follows from the uuid, so a device started again on the same data finds its own.
 */
import type Docker from 'dockerode';
import { FleetlabError, errorText } from '../src/errors.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { HOST_NETWORK_COMMAND, HOST_NETWORK_IMAGE, ensureHostNetworkImage } from './images/test-images.js';

/** Marks the container as a device's host network, beside the device label. */
export const HOST_NETWORK_LABEL = 'io.fleetlab.host-network';

export const hostNetworkContainerName = (uuid: string): string => `fleetlab-host-${uuid.slice(0, 12)}`;

/**
 * Makes the device's host-network container, or starts the one an earlier start of the same
 * device left (a reboot stops it with the device's other containers); returns its name.
 */
export async function startHostNetwork(docker: Docker, socketPath: string, uuid: string): Promise<string> {
  const name = hostNetworkContainerName(uuid);
  try {
    const found = await docker.getContainer(name).inspect().catch((err: { statusCode?: number }) => {
      if (err.statusCode === 404) return undefined;
      throw err;
    });
    if (found?.State.Running) return name;
    if (!found) {
      await ensureHostNetworkImage(socketPath);
      await docker.createContainer({
        name,
        Image: HOST_NETWORK_IMAGE,
        Cmd: [...HOST_NETWORK_COMMAND],
        Labels: { [LABEL.device]: uuid, [HOST_NETWORK_LABEL]: 'true' },
        HostConfig: { NetworkMode: 'bridge', RestartPolicy: { Name: '' } },
      });
    }
    await docker.getContainer(name).start().catch((err: { statusCode?: number }) => {
      if (err.statusCode !== 304) throw err; // 304: started meanwhile
    });
    return name;
  } catch (err) {
    throw new FleetlabError('SUP_ERR_ENGINE', `the device's host-network container ${name} (${HOST_NETWORK_IMAGE}) could not be started: ${errorText(err)}; is dockerd at ${socketPath} up (scripts/provision starts it)?`, { cause: err });
  }
}
