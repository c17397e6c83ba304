/**
 * `power.cycle`, `power.off`, `power.on` on the device container: SIGKILL to everything in it
 * (no shutdown, state on disk kept), and a start of the same container, which the device
 * keeps its address and data across.
 */
import { join } from 'node:path';
import type Docker from 'dockerode';
import type { PowerProtocol } from '../../../device-access/protocols.js';
import { removeTree } from '../engine-files.js';
import { stopDeviceContainers, waitReadyLine } from '../container-docker.js';

export interface ContainerPowerOptions {
  readonly docker: Docker;
  readonly dockerSocket: string;
  readonly id: string;
  readonly uuid: string;
  readonly dataDir: string;
  /** Ready lines the container has printed so far: a start waits for the next. */
  readonly readyLines: number;
  readonly readyMs: number;
  readonly waitReady: (timeoutMs: number) => Promise<void>;
  readonly lostPower: () => void;
}

export function containerPower(o: ContainerPowerOptions): Omit<PowerProtocol, 'reboot'> {
  const container = o.docker.getContainer(o.id);
  let readyLines = o.readyLines;
  const cut = async () => {
    await container.kill().catch((err: { statusCode?: number }) => {
      if (err.statusCode !== 409) throw err; // 409: not running (already off)
    });
    await container.wait().catch(() => undefined);
    await stopDeviceContainers(o.docker, o.uuid);
    o.lostPower();
  };
  const powerOn = async () => {
    if ((await container.inspect()).State.Running) {
      await o.waitReady(o.readyMs); // on() while on: nothing to do
      return;
    }
    // What does not survive a power loss on a board: tmpfs (the lock root) and sysfs (the GPIO tree).
    await removeTree(join(o.dataDir, 'locks'), o.dockerSocket);
    await removeTree(join(o.dataDir, 'gpio'), o.dockerSocket);
    await container.start();
    readyLines = (await waitReadyLine(o.docker, o.id, readyLines, o.readyMs)).count;
    await o.waitReady(o.readyMs);
  };
  return {
    cycle: async () => {
      await cut();
      await powerOn();
    },
    off: cut,
    on: powerOn,
  };
}
