/**
 * The `disk.fill` driver (hil/targets/drivers/disk-fill.ts) as qemu and board run it over their
 * shell, here through this machine's shell on a small tmpfs of its own: after fill() not one
 * more byte fits, root's included; free() gives it all back and leaves no file of its own.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { diskFill } from '../hil/targets/drivers/disk-fill.js';
import { hostShell } from '../hil/targets/host-shell.js';

const root = process.getuid?.() === 0;
let dir: string;

beforeAll(() => {
  if (!root) return;
  dir = mkdtempSync(join(tmpdir(), 'fleetlab-disk-fill-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m', 'fleetlab-disk-fill', dir]);
});
afterAll(() => {
  if (!root) return;
  execFileSync('umount', [dir]);
  rmSync(dir, { recursive: true, force: true });
});

// Mounting the tmpfs it fills needs root (CI runs as root); the reason is in the skipped test's name.
it.skipIf(!root)(`fills a filesystem to its last block and frees it again${root ? '' : ' (skipped: mounting a tmpfs needs root)'}`, async () => {
  const disk = diskFill(hostShell, [join(dir, 'engine'), dir]);
  writeFileSync(join(dir, 'before'), 'x');
  execFileSync('mkdir', [join(dir, 'engine')]);
  await disk.fill();
  expect(() => writeFileSync(join(dir, 'after'), Buffer.alloc(4096))).toThrow(/ENOSPC/);
  await disk.fill(); // a second fill while full: nothing more to take, no error
  await disk.free();
  writeFileSync(join(dir, 'after'), Buffer.alloc(1024 * 1024));
  expect(readdirSync(dir).sort()).toEqual(['after', 'before', 'engine']);
});
