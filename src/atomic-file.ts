/**
 * Durable file replacement for state that must survive a power cut: a reader sees the old
 * content or the new one, never a torn file. Write a temporary file in the same directory,
 * fsync it, rename it over the target, fsync the directory so the rename itself is on disk.
 */
import { closeSync, fsyncSync, openSync, readdirSync, renameSync, rmSync, writeSync } from 'node:fs';
import { open, rename, rm, mkdir } from 'node:fs/promises';
import { dirname, basename, join } from 'node:path';
import { randomBytes } from 'node:crypto';

/** Flushes a file or a directory (a directory's flush puts its renames on disk). */
export async function fsyncPath(path: string): Promise<void> {
  const handle = await open(path, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

const tempPrefix = (path: string) => `.${basename(path)}.tmp-`;
// A random suffix lets two writers (two instances in one process) never share a temp file.
const tempPath = (path: string) => join(dirname(path), `${tempPrefix(path)}${process.pid}-${randomBytes(4).toString('hex')}`);

/** Removes temporary files a writer killed mid-write left next to `path`. */
export function removeStaleTemps(path: string): void {
  for (const name of readdirSync(dirname(path))) {
    if (name.startsWith(tempPrefix(path))) rmSync(join(dirname(path), name), { force: true });
  }
}

/** The same as writeFileAtomic, for callers that must finish before they return. */
export function writeFileAtomicSync(path: string, data: string, mode = 0o600): void {
  const tmp = tempPath(path);
  const fd = openSync(tmp, 'w', mode);
  try {
    writeSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  const dirFd = openSync(dirname(path), 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}

export async function writeFileAtomic(path: string, data: string, mode = 0o644): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true });
  const tmp = tempPath(path);
  const handle = await open(tmp, 'w', mode);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } catch (err) {
    await handle.close();
    await rm(tmp, { force: true });
    throw err;
  }
  await handle.close();
  try {
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  await fsyncPath(dir);
}

/** Removes the file (absent is fine) and makes the removal durable. */
export async function removeFileDurable(path: string): Promise<void> {
  await rm(path, { force: true });
  try {
    await fsyncPath(dirname(path));
  } catch (err) {
    // The directory itself may not exist: then there was nothing to remove.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}
