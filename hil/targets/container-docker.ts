/**
 * Engine-side helpers of the `container` target: running a command in the device container
 * (the docker CLI, which carries stdin both ways), waiting for the sim's ready line across
 * restarts, and stopping a device's app containers as a power cut does. Shared by the driver
 * and the global teardown.
 */
import { PassThrough } from 'node:stream';
import Docker from 'dockerode';
import { execa } from 'execa';
import { FleetlabError } from '../../src/errors.js';
import { findTool, missingToolError, type ToolSpec } from '../../src/tools.js';
import { LABEL } from '../../src/protocol/engine-labels.js';


const dockerCli: ToolSpec = { candidates: ['docker'], debianPackage: 'docker.io' };

export interface ExecBytes {
  readonly exitCode: number;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
}

/** Runs argv in the container (no shell). Never rejects on the exit code; a timeout gives 124. */
export async function dockerExec(
  socketPath: string,
  containerId: string,
  argv: readonly string[],
  options: { input?: string | Buffer; timeoutMs?: number } = {},
): Promise<ExecBytes> {
  if (argv.length === 0) throw new FleetlabError('SUP_ERR_INTERNAL', 'exec: empty argv');
  return dockerCommand(socketPath, ['exec', ...(options.input !== undefined ? ['-i'] : []), containerId, ...argv], options);
}

/**
 * The docker CLI against the engine at socketPath (`exec`, `run`: it carries stdin both ways).
 * Never rejects on the exit code; a timeout gives 124.
 */
export async function dockerCommand(socketPath: string, args: readonly string[], options: { input?: string | Buffer; timeoutMs?: number } = {}): Promise<ExecBytes> {
  const docker = findTool(dockerCli);
  if (!docker) throw missingToolError(dockerCli);
  const result = await execa(docker, ['-H', `unix://${socketPath}`, ...args], {
    input: options.input,
    encoding: 'buffer',
    // The command's output as it printed it: a trailing newline is part of it.
    stripFinalNewline: false,
    reject: false,
    timeout: options.timeoutMs ?? 30_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  const exitCode = result.timedOut ? 124 : (result.exitCode ?? 125);
  return { exitCode, stdout: Buffer.from(result.stdout ?? []), stderr: Buffer.from(result.stderr ?? []) };
}

export interface ReadyLine {
  readonly apiKey: string;
  readonly uuid: string;
  readonly dataDir: string;
}

function parseReady(line: string): ReadyLine | undefined {
  if (!line.startsWith('{') || !line.includes('"ready"')) return undefined;
  try {
    const v = JSON.parse(line) as { event?: string; apiKey?: string; uuid?: string; dataDir?: string };
    return v.event === 'ready' && v.apiKey && v.uuid && v.dataDir ? { apiKey: v.apiKey, uuid: v.uuid, dataDir: v.dataDir } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The sim prints one JSON ready line on stdout per start; the engine keeps the log across
 * restarts. Resolves with the ready line number `after + 1` (1-based), so a restart waits for
 * its own line, not the previous boot's. Rejects when the container stops first or on timeout.
 */
export async function waitReadyLine(docker: Docker, containerId: string, after: number, timeoutMs: number): Promise<ReadyLine & { count: number }> {
  const container = docker.getContainer(containerId);
  const stream = (await container.logs({ follow: true, stdout: true, stderr: true })) as unknown as NodeJS.ReadableStream & { destroy(): void };
  const out = new PassThrough();
  const err = new PassThrough();
  docker.modem.demuxStream(stream, out, err);
  let stderrTail = '';
  err.on('data', (c: Buffer) => (stderrTail = (stderrTail + c.toString('utf8')).slice(-4000)));
  return new Promise((resolvePromise, reject) => {
    let buffered = '';
    let count = 0;
    const finish = (fn: () => void) => {
      clearTimeout(timer);
      stream.removeAllListeners('end');
      stream.destroy();
      fn();
    };
    const timer = setTimeout(
      () => finish(() => reject(new FleetlabError('SUP_ERR_INTERNAL', `the device container printed no ready line within ${timeoutMs / 1000} s; its stderr ends:\n${stderrTail}`))),
      timeoutMs,
    );
    out.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl).trim();
        buffered = buffered.slice(nl + 1);
        const ready = parseReady(line);
        if (ready && ++count > after) return finish(() => resolvePromise({ ...ready, count }));
      }
    });
    stream.on('end', () => finish(() => reject(new FleetlabError('SUP_ERR_INTERNAL', `the device container stopped before its ready line; its stderr ends:\n${stderrTail}`))));
  });
}

/** Stops the device's app containers at once, as a power cut would (no grace period). */
export async function stopDeviceContainers(docker: Docker, uuid: string): Promise<void> {
  const containers = await docker.listContainers({ filters: { label: [`${LABEL.device}=${uuid}`] } });
  await Promise.all(containers.map((c) => docker.getContainer(c.Id).stop({ t: 0 }).catch(() => undefined)));
}
