/**
 * Child process of test/non-root-files.test.ts, run as a user in the docker group who is not
 * root: the files protocol the sim target gives on dockerd, on a volume whose directory that
 * user cannot enter, and removing a tree a root container left in the user's own directory.
 * Prints one JSON line of what it saw. Usage: non-root-files-child.ts <docker socket> <volume>
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import Docker from 'dockerode';
import { filesBesideEngine, helperRunner, removeTree } from '../../hil/targets/engine-files.js';
import { userTmpDir } from '../../src/user-tmp.js';

const [socket, volume] = process.argv.slice(2) as [string, string];
const code = (err: unknown) => (err as NodeJS.ErrnoException).code ?? String(err);

const mountpoint = (await new Docker({ socketPath: socket }).getVolume(volume).inspect()).Mountpoint;
const files = filesBesideEngine(socket);
const file = `${mountpoint}/app/state file.txt`;
const seen: Record<string, unknown> = { uid: process.getuid!() };
seen.plainRead = await readFile(file).then(() => 'read', code);
await files.write(file, 'v1\n');
seen.read = (await files.read(file)).toString('utf8');
await files.write(`${mountpoint}/.hidden`, '');
await files.write(`${mountpoint}/two\nlines`, 'x');
seen.list = await files.list(mountpoint);
seen.existsBefore = await files.exists(file);
await files.remove(`${mountpoint}/app`);
seen.existsAfter = await files.exists(file);
seen.missing = await files.read(`${mountpoint}/none`).then(() => 'read', (err: Error) => err.message);
// Outside the volume directory: the user's own files, directly.
const own = await mkdtemp(join(userTmpDir(), 'fleetlab-nonroot-'));
await files.write(`${own}/mine`, 'direct');
seen.own = await readFile(`${own}/mine`, 'utf8');

// What the container target's device (root) leaves in the user's directory.
const r = await helperRunner(socket, own)(['sh', '-c', 'mkdir -p "$1/device/journal" && echo x > "$1/device/journal/system.journal"', 'fleetlab-test', own]);
seen.rootWrote = r.exitCode;
seen.plainRemove = await rm(own, { recursive: true, force: true }).then(() => 'removed', code);
await removeTree(own, socket);
seen.removed = !existsSync(own);
console.log(JSON.stringify(seen));
