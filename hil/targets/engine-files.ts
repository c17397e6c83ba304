/**
 * Files the harness cannot reach as its own user, reached through the engine instead. A user in
 * the docker group (how CI runners run) drives dockerd, but dockerd's volume directory
 * (/var/lib/docker is root's alone) is closed to it, and a container running as root (the
 * container target's device) leaves root-owned files in the user's own directories. A
 * short-lived helper container, run as root with one directory bind-mounted at its own path,
 * does the file operation there: the same path names the same file inside and out.
 */
import { access, mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { constants } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import Docker from 'dockerode';
import { FleetlabError } from '../../src/errors.js';
import { FILES_IMAGE, ensureFilesImage } from '../../sim/images/test-images.js';
import { dockerCommand } from './container-docker.js';
import { filesOverCommands, type RawCommandRunner } from '../../device-access/files-over-commands.js';
import type { FilesProtocol } from '../../device-access/protocols.js';

/**
 * On every helper container, so `docker ps` shows whose it is. None outlives its command:
 * `--rm` has dockerd itself remove it when the command ends, even after a killed run.
 */
export const HELPER_LABEL = 'io.fleetlab.hil.helper';

type PlainFiles = Omit<FilesProtocol, 'volumePath'>;

/** Runs argv as root in a helper container that has `dir` (a host path) mounted at its own path. */
export function helperRunner(dockerSocket: string, dir: string): RawCommandRunner {
  // --mount's own syntax splits on commas; our paths (volume and temporary directories) have none.
  if (/[,"\n]/.test(dir)) throw new FleetlabError('SUP_ERR_INTERNAL', `cannot mount ${JSON.stringify(dir)} into a helper container: it holds a comma, quote or newline`);
  return async (argv, options = {}) => {
    await ensureFilesImage(dockerSocket);
    const input = options.input !== undefined;
    return dockerCommand(
      dockerSocket,
      ['run', '--rm', ...(input ? ['-i'] : []), '--network', 'none', '--user', '0:0', '--label', `${HELPER_LABEL}=files`, '--mount', `type=bind,source=${dir},target=${dir}`, FILES_IMAGE, ...argv],
      input ? { input: options.input! } : {},
    );
  };
}

/** The files protocol on this machine's own file system (the sim target's device is the host). */
export const hostFiles: PlainFiles = {
  read: (path) => readFile(path),
  write: async (path, data) => {
    await mkdir(dirname(path), { recursive: true });
    await writeFile(path, data);
  },
  remove: (path) => rm(path, { force: true, recursive: true }),
  exists: async (path) => stat(path).then(() => true, () => false),
  list: (path) => readdir(path),
};

const denied = (err: unknown) => ['EACCES', 'EPERM'].includes((err as NodeJS.ErrnoException).code ?? '');

/**
 * Removes `path` and everything in it; what this user may not remove (a container's root-owned
 * files) goes through a helper container that mounts its parent.
 */
export async function removeTree(path: string, dockerSocket: string): Promise<void> {
  try {
    await rm(path, { recursive: true, force: true });
  } catch (err) {
    if (!denied(err)) throw err;
    const r = await helperRunner(dockerSocket, dirname(path))(['rm', '-rf', '--', path]);
    if (r.exitCode !== 0) throw new FleetlabError('SUP_ERR_ENGINE', `removing ${path} through the engine: ${r.stderr.toString('utf8').trim() || `exit ${r.exitCode}`}`, { cause: err });
  }
}

/**
 * `direct` for every path, but those under the engine's volume directory when this user may not
 * enter it: those go through a helper container with that one volume mounted. As root (or on an
 * engine whose volumes are open) nothing changes.
 */
export function filesBesideEngine(dockerSocket: string, direct: PlainFiles = hostFiles): PlainFiles {
  let closedRoot: Promise<string | undefined> | undefined;
  const volumeRoot = () =>
    (closedRoot ??= (async () => {
      const info = (await new Docker({ socketPath: dockerSocket }).info()) as { DockerRootDir?: string };
      const root = join(info.DockerRootDir ?? '/var/lib/docker', 'volumes');
      return (await access(root, constants.X_OK).then(() => true, () => false)) ? undefined : root;
    })());
  const filesFor = async (path: string): Promise<PlainFiles> => {
    const root = await volumeRoot();
    const rel = root === undefined ? '..' : relative(root, path);
    if (rel === '' || rel.startsWith('..')) return direct;
    // The volume's own directory (`<root>/<name>`), not the whole root: a helper sees one volume.
    return filesOverCommands(helperRunner(dockerSocket, join(root!, rel.split(sep)[0]!)), 'the device (through the engine: the volume directory is root\'s)');
  };
  return {
    read: async (path) => (await filesFor(path)).read(path),
    write: async (path, data) => (await filesFor(path)).write(path, data),
    remove: async (path) => (await filesFor(path)).remove(path),
    exists: async (path) => (await filesFor(path)).exists(path),
    list: async (path) => (await filesFor(path)).list(path),
  };
}
