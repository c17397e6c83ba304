/**
 * Durable file replacement for state that must survive a power cut: a reader sees the old
 * content or the new one, never a torn file. Write a temporary file in the same directory,
 * fsync it, rename it over the target, fsync the directory so the rename itself is on disk.
 */
import { open, rename, rm, mkdir } from 'node:fs/promises';
import { dirname, basename, join } from 'node:path';
import { randomBytes } from 'node:crypto';

async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export async function writeFileAtomic(path: string, data: string, mode = 0o644): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true });
  // A random suffix lets two writers (two instances in one process) never share a temp file.
  const tmp = join(dir, `.${basename(path)}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
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
  await fsyncDir(dir);
}

/** Removes the file (absent is fine) and makes the removal durable. */
export async function removeFileDurable(path: string): Promise<void> {
  await rm(path, { force: true });
  try {
    await fsyncDir(dirname(path));
  } catch (err) {
    // The directory itself may not exist: then there was nothing to remove.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}
