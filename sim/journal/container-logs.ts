/**
 * Journals the output of a simulated device's containers, as dockerd's journald log driver
 * does on a board, so `journal-logs` with a containerId finds their lines.
 */
import { PassThrough } from 'node:stream';
import type Docker from 'dockerode';
import { LABEL } from '../../src/protocol/engine-labels.js';
import { containerLogMeta, type JournalSim } from './journal-sim.js';

/** How often new containers are looked for. */
const SCAN_MS = 1000;

export class ContainerLogFollower {
  private timer: NodeJS.Timeout | undefined;
  private readonly followed = new Map<string, NodeJS.ReadableStream>();

  constructor(private readonly deps: { docker: Docker; journal: JournalSim }) {}

  start(uuid: string): void {
    if (this.timer) return;
    const scan = () => void this.scan(uuid).catch(() => undefined);
    this.timer = setInterval(scan, SCAN_MS);
    this.timer.unref();
    scan();
  }

  private async scan(uuid: string): Promise<void> {
    const { docker, journal } = this.deps;
    const containers = await docker.listContainers({ filters: { label: [`${LABEL.device}=${uuid}`], status: ['running'] } });
    for (const c of containers) {
      if (this.followed.has(c.Id)) continue;
      const raw = (await docker.getContainer(c.Id).logs({ follow: true, stdout: true, stderr: true, since: Math.floor(c.Created) })) as NodeJS.ReadableStream;
      this.followed.set(c.Id, raw);
      const out = new PassThrough();
      docker.modem.demuxStream(raw, out, out);
      raw.on('end', () => {
        out.end();
        this.followed.delete(c.Id);
      });
      void journal.pipeLines(out, containerLogMeta({ id: c.Id, name: (c.Names[0] ?? '').replace(/^\//, ''), imageName: c.Image })).catch(() => undefined);
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const s of this.followed.values()) (s as unknown as { destroy(): void }).destroy();
    this.followed.clear();
  }
}
