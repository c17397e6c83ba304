/**
 * The simulated engine served in-process (no socket), as a fleet's devices reach theirs: the
 * supervisor's engine adapter works over it unchanged, a restart refuses connections as an
 * unserved socket does, and the adapter's snapshot kept by the event stream still sees a
 * change made behind its back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimEngine, type SimEngineHandle } from '../sim/engine/index.js';
import { LABEL } from '../src/protocol/engine-labels.js';
import { Engine } from '../src/supervisor/adapters/engine.js';
import { eventually } from './helpers/engine-targets.js';

let dir: string;
let sim: SimEngineHandle;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-inproc-'));
  sim = await startSimEngine({ dataDir: join(dir, 'engine') });
});
afterAll(async () => {
  await sim?.close();
  rmSync(dir, { recursive: true, force: true });
});

const device = 'd00d'.repeat(8);

/** The payloads of a multiplexed log stream (8-byte frame headers), joined. */
function demux(buf: Buffer): string {
  let out = '';
  for (let at = 0; at + 8 <= buf.length; ) {
    const size = buf.readUInt32BE(at + 4);
    out += buf.subarray(at + 8, at + 8 + size).toString('utf8');
    at += 8 + size;
  }
  return out;
}
const labels = { [LABEL.supervised]: 'true', [LABEL.device]: device, [LABEL.appId]: '1', [LABEL.serviceId]: '1', [LABEL.serviceName]: 'main', [LABEL.imageId]: '1', [LABEL.releaseId]: '1', [LABEL.commit]: 'c1', [LABEL.configHash]: 'h' };

describe('in-process simulated engine', () => {
  it('has no socket, and the engine adapter pulls, creates, starts and reads through its agent', async () => {
    expect(sim.socketPath).toBe('');
    const engine = new Engine({ socketPath: '/nonexistent/engine.sock', device, agent: sim.agent() });
    await engine.ping();
    const progress: number[] = [];
    await engine.pull('fleetlab/test-app:1', (p) => progress.push(p.percent));
    expect(progress.at(-1)).toBe(100);
    const id = await engine.createContainer({ name: 'main_1_1', image: 'fleetlab/test-app:1', command: ['sleep', '1000'], env: [], labels, binds: [], networkMode: 'bridge', aliases: [], restart: 'no' });
    await engine.start(id);
    const snap = await engine.snapshot();
    expect(snap.containers.map((c) => [c.id, c.state, c.serviceName])).toEqual([[id, 'running', 'main']]);
    expect(snap.images.has('fleetlab/test-app:1')).toBe(true);
    engine.close();
  });

  it('snapshotFromEvents: keeps a snapshot while nothing happens, and drops it on a change made elsewhere', async () => {
    const engine = new Engine({ socketPath: '/nonexistent/engine.sock', device, agent: sim.agent(), snapshotFromEvents: true });
    try {
      // Kept only once the event stream is open.
      const first = await eventually(async () => {
        const a = await engine.snapshot();
        expect(await engine.snapshot()).toBe(a);
        return a;
      }, 5_000, 'a kept snapshot');
      const running = first.containers.find((c) => c.state === 'running');
      expect(running).toBeDefined();
      // Another client of the engine stops the container: the adapter learns it from the event stream.
      const other = new Docker({ socketPath: '/nonexistent/engine.sock', agent: sim.agent() } as Docker.DockerOptions);
      await other.getContainer(running!.id).stop({ t: 0 });
      await eventually(async () => {
        const after = await engine.snapshot();
        expect(after.containers.find((c) => c.id === running!.id)?.state).toBe('exited');
        return true;
      }, 5_000, 'the stop seen through the event stream');
      // A change through the adapter itself is seen by the very next read.
      await engine.start(running!.id);
      expect((await engine.snapshot()).containers.find((c) => c.id === running!.id)?.state).toBe('running');
    } finally {
      engine.close();
    }
  });
  it('refuses connections while the engine restarts, as an unserved socket does, then serves again', async () => {
    const engine = new Engine({ socketPath: '/nonexistent/engine.sock', device, agent: sim.agent() });
    // Nothing running: the engine's shutdown gives a running container its stop timeout.
    for (const c of (await engine.snapshot()).containers) await engine.remove(c.id);
    const restarted = sim.restartEngine({ downMs: 400 });
    await eventually(async () => {
      await expect(engine.ping()).rejects.toThrow('connect ECONNREFUSED in-process engine');
      return true;
    }, 5_000, 'a refused connection while the engine is down');
    await restarted;
    await engine.ping();
  });

  it('with a small history, keeps only the last events and log lines, through a restart too', async () => {
    const small = await startSimEngine({ dataDir: join(dir, 'small'), history: { events: 4, logLines: 3 } });
    const docker = new Docker({ socketPath: '/nonexistent/engine.sock', agent: small.agent() } as Docker.DockerOptions);
    try {
      const adapter = new Engine({ socketPath: '/nonexistent/engine.sock', device, agent: small.agent() });
      await adapter.pull('fleetlab/test-app:1', () => undefined);
      adapter.close();
      const container = await docker.createContainer({ Image: 'fleetlab/test-app:1', Cmd: ['sh', '-c', 'echo one; echo two; echo three; echo four; echo five'] });
      await container.start();
      await eventually(async () => ((await container.inspect()).State.Status === 'exited' ? true : undefined), 5_000, 'the container ran');
      const lines = async () => demux(await container.logs({ stdout: true }));
      expect(await lines()).toBe('three\nfour\nfive\n');
      // The pull and the create came first: only the last four (start, die, network disconnect among them) are kept.
      const kept = small.engine.events.since(0).map((e) => e.Action);
      expect(kept).toHaveLength(4);
      expect(kept).toEqual(expect.arrayContaining(['start', 'die', 'disconnect']));
      expect(kept).not.toContain('pull');
      expect(kept).not.toContain('create');
      await small.restartEngine({ downMs: 50 });
      expect(await lines()).toBe('three\nfour\nfive\n');
    } finally {
      await small.close();
    }
  });

  it("with clockOffsetMs, keeps the device's wrong time through a restart: container times, events, logs and SystemTime are that far off", async () => {
    const dayAhead = 24 * 3_600_000;
    const skewed = await startSimEngine({ dataDir: join(dir, 'skewed'), clockOffsetMs: dayAhead });
    const docker = new Docker({ socketPath: '/nonexistent/engine.sock', agent: skewed.agent() } as Docker.DockerOptions);
    const offBy = (iso: string) => Date.parse(iso) - Date.now();
    const nearADayAhead = (ms: number) => expect(Math.abs(ms - dayAhead)).toBeLessThan(60_000);
    try {
      const adapter = new Engine({ socketPath: '/nonexistent/engine.sock', device, agent: skewed.agent() });
      await adapter.pull('fleetlab/test-app:1', () => undefined);
      adapter.close();
      const container = await docker.createContainer({ Image: 'fleetlab/test-app:1', Cmd: ['echo', 'hello'] });
      const since = Math.floor((Date.now() + dayAhead) / 1000) - 5;
      await container.start();
      await eventually(async () => ((await container.inspect()).State.Status === 'exited' ? true : undefined), 5_000, 'the container ran');
      const inspected = await container.inspect();
      nearADayAhead(offBy(inspected.Created));
      nearADayAhead(offBy(inspected.State.StartedAt));
      nearADayAhead(offBy((await docker.info()).SystemTime));
      const logs = (await container.logs({ stdout: true, timestamps: true })).toString('utf8');
      nearADayAhead(offBy(/(\d{4}-\d\d-\d\dT[^ ]+Z) hello/.exec(logs)![1]!));
      // Events asked for "since a moment ago" until now, both on the device's clock, find the start.
      // `until` is taken after the container ran: a busy machine can take seconds to start it.
      const until = Math.floor((Date.now() + dayAhead) / 1000) + 1;
      let events = '';
      for await (const chunk of await docker.getEvents({ since, until })) events += String(chunk);
      expect(events).toContain('"Action":"start"');
      await skewed.restartEngine({ downMs: 50 });
      nearADayAhead(offBy((await docker.info()).SystemTime));
    } finally {
      await skewed.close();
    }
    // The unskewed engine of this file keeps the host's time.
    const plain = new Docker({ socketPath: '/nonexistent/engine.sock', agent: sim.agent() } as Docker.DockerOptions);
    expect(Math.abs(Date.parse((await plain.info()).SystemTime) - Date.now())).toBeLessThan(60_000);
  });
});
