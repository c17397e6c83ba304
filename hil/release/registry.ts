/**
 * A real container registry on this host's loopback, for devices that pull a release (the qemu
 * and board targets): Distribution, from Debian's `docker-registry` package, storing on the
 * filesystem under a directory of the caller's. Its access log is kept: a pull by the device is
 * a line there (dockerd asks `HEAD /v2/<repo>/manifests/<tag>`, then fetches the manifest by
 * digest with `GET /v2/<repo>/manifests/sha256:...`), which is how a run shows the device pulled.
 */
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FleetlabError } from '../../src/errors.js';
import { freePort } from '../../src/free-port.js';
import { findTool, missingToolError, type ToolSpec } from '../../src/tools.js';
import { sleep, until } from '../../src/wait.js';
import { spawnOwned } from '../../src/owned-dirs.js';

export const registryTool: ToolSpec = { candidates: ['docker-registry'], debianPackage: 'docker-registry' };
const READY_MS = 15_000;
const STOP_MS = 5_000;

export interface Registry {
  /** `127.0.0.1:<port>`: the registry part of an image reference (dockerd trusts loopback registries without TLS). */
  readonly host: string;
  readonly port: number;
  /** Where its log goes (JSON lines and an access log). */
  readonly logPath: string;
  /** The access-log lines so far that fetched a manifest (`GET .../manifests/...`): one per image pull. */
  pulls(): string[];
  close(): Promise<void>;
}

/** The registry's configuration: filesystem storage, loopback only, deletes allowed (so a run can clean up). */
export function registryConfig(o: { storageDir: string; port: number }): string {
  return [
    'version: 0.1',
    'log:',
    '  level: info',
    'storage:',
    '  filesystem:',
    `    rootdirectory: ${JSON.stringify(o.storageDir)}`,
    '  delete:',
    '    enabled: true',
    'http:',
    `  addr: 127.0.0.1:${o.port}`,
    '',
  ].join('\n');
}

/** Starts a registry storing under `dir`; rejects with the registry's own last words if it does not answer. */
export async function startRegistry(o: { dir: string; port?: number }): Promise<Registry> {
  const binary = findTool(registryTool);
  if (!binary) throw missingToolError(registryTool);
  await mkdir(join(o.dir, 'storage'), { recursive: true });
  const port = o.port ?? (await freePort());
  const configPath = join(o.dir, 'config.yml');
  await writeFile(configPath, registryConfig({ storageDir: join(o.dir, 'storage'), port }));
  const logPath = join(o.dir, 'registry.log');
  const { child, exited, lastWords } = spawnOwned(o.dir, binary, ['serve', configPath], logPath);
  const host = `127.0.0.1:${port}`;

  const answers = () => fetch(`http://${host}/v2/`, { signal: AbortSignal.timeout(1000) }).then((r) => r.status === 200);
  await until(`the registry on ${host}`, answers, (ok) => ok, {
    timeoutMs: READY_MS,
    intervalMs: 100,
    alive: () => child.exitCode === null,
    // The registry's own log says why it did not start; a registry that never answered is killed.
    fail: async (f) => {
      if (f.end === 'gone') return new FleetlabError('HIL_ERR_REGISTRY', `the registry (docker-registry serve) exited with ${child.exitCode} at start; its log ${logPath} ends:\n${lastWords()}`);
      child.kill('SIGKILL');
      await exited;
      return new FleetlabError('HIL_ERR_REGISTRY', `the registry on ${host} did not answer within ${READY_MS} ms; its log ${logPath} ends:\n${lastWords()}`);
    },
  });

  return {
    host,
    port,
    logPath,
    pulls: () => readFileSync(logPath, 'utf8').split('\n').filter((l) => /"GET \/v2\/[^ ]+\/manifests\/[^ ]+ HTTP/.test(l)),
    async close() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      const stopped = await Promise.race([exited.then(() => true), sleep(STOP_MS).then(() => false)]);
      if (!stopped) {
        child.kill('SIGKILL');
        await exited;
      }
    },
  };
}
