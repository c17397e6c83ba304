/**
 * The engines the contract suite runs against: the real dockerd and the simulated engine,
 * each reached only through dockerode over its socket. Objects a run creates carry one label
 * (`io.fleetlab.contract=<run id>`) so cleanup removes exactly them.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import Docker from 'dockerode';
import { startSimEngine, type SimEngineHandle } from '../../sim/engine/index.js';

export const dockerdSocket = process.env.FLEETLAB_DOCKER_SOCKET ?? '/var/run/docker.sock';
export const CONTRACT_LABEL = 'io.fleetlab.contract';

export type EngineKind = 'dockerd' | 'sim';

export interface EngineUnderTest {
  kind: EngineKind;
  socketPath: string;
  docker: Docker;
  runId: string;
  /** Labels every object of this run carries. */
  labels: Record<string, string>;
  sim?: SimEngineHandle;
  close(): Promise<void>;
}

export async function startEngineUnderTest(kind: EngineKind): Promise<EngineUnderTest> {
  const runId = randomBytes(4).toString('hex');
  const labels = { [CONTRACT_LABEL]: runId };
  if (kind === 'dockerd') {
    const docker = new Docker({ socketPath: dockerdSocket });
    const close = async () => {
      await removeLabelled(docker, labels);
      // Volumes created on demand by Binds carry no labels: they go by their run-unique name.
      for (const v of (await docker.listVolumes()).Volumes ?? []) if (v.Name.startsWith(`contract-${runId}-`)) await docker.getVolume(v.Name).remove().catch(() => undefined);
    };
    return { kind, socketPath: dockerdSocket, docker, runId, labels, close };
  }
  const dir = await mkdtemp(join(tmpdir(), 'fleetlab-contract-'));
  // Fast enough that pulling the ≈2 MB test images takes a fraction of a second.
  const sim = await startSimEngine({ socketPath: join(dir, 'engine.sock'), dataDir: join(dir, 'data'), bandwidth: 20_000_000 });
  const docker = new Docker({ socketPath: sim.socketPath });
  return {
    kind, socketPath: sim.socketPath, docker, runId, labels, sim,
    async close() {
      await removeLabelled(docker, labels).catch(() => undefined);
      await sim.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Removes the containers, networks and volumes that carry `labels`. */
export async function removeLabelled(docker: Docker, labels: Record<string, string>): Promise<void> {
  const filters = { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) };
  for (const c of await docker.listContainers({ all: true, filters })) await docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined);
  for (const n of await docker.listNetworks({ filters })) await docker.getNetwork(n.Id).remove().catch(() => undefined);
  for (const v of (await docker.listVolumes({ filters })).Volumes ?? []) await docker.getVolume(v.Name).remove().catch(() => undefined);
}

/** Pulls and returns every progress message (the stream must end without an error). */
export async function pullMessages(docker: Docker, ref: string): Promise<Array<Record<string, unknown>>> {
  const stream = (await docker.pull(ref)) as Readable;
  return new Promise((resolvePull, reject) => {
    docker.modem.followProgress(stream, (err: Error | null, out: Array<Record<string, unknown>>) => (err ? reject(err) : resolvePull(out)));
  });
}

/** A raw request over the socket (for what dockerode does not expose, e.g. HEAD /_ping). */
export function rawRequest(socketPath: string, method: string, path: string): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolveReq, reject) => {
    const req = request({ socketPath, method, path }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolveReq({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Splits a multiplexed log buffer into frames (stream 1 stdout, 2 stderr). */
export function demux(buf: Buffer): Array<{ stream: number; text: string }> {
  const frames: Array<{ stream: number; text: string }> = [];
  let at = 0;
  while (at + 8 <= buf.length) {
    const stream = buf.readUInt8(at);
    const size = buf.readUInt32BE(at + 4);
    frames.push({ stream, text: buf.subarray(at + 8, at + 8 + size).toString('utf8') });
    at += 8 + size;
  }
  if (at !== buf.length) throw new Error(`trailing ${buf.length - at} bytes are not a frame`);
  return frames;
}

/** The error a dockerode call rejected with: status code and dockerd's JSON message. */
export async function engineError(p: Promise<unknown>): Promise<{ statusCode: number; message: string }> {
  try {
    await p;
  } catch (err) {
    const e = err as { statusCode?: number; json?: { message?: string } | null; message?: string };
    // Streamed calls (pull) leave json empty; the modem puts dockerd's message in its own.
    const fromText = /^\(HTTP code \d+\) [^-]+ - (.*?)\s*$/.exec(e.message ?? '')?.[1];
    return { statusCode: e.statusCode ?? 0, message: e.json?.message ?? fromText ?? '' };
  }
  throw new Error('expected the engine to refuse the call');
}

/** Polls `check` until it returns a value (bounded). */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (${String(last)})` : ''}`);
}
