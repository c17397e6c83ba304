/**
 * The bare board test/qemu-boards/ works on, from the board config `qemu boot --bare
 * --board-config` wrote, and `fleetlab board install|uninstall` run as a user runs them.
 */
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { expect } from 'vitest';
import { loadBoardConfig, type BoardConfig } from '../../hil/lab/board-config.js';
import { startSupervisedBoard } from '../../hil/targets/qemu-restore.js';
import { READINESS } from '../../hil/targets/qemu/reset-snapshot.js';
import { findReadyState } from '../../qemu/ready-state.js';
import { SshDevice } from '../../device-access/ssh-device.js';
import type { QemuBoard, ReadyInfo } from '../../qemu/boot.js';
import type { QemuImage } from '../../device-image/build.js';

export const repoRoot = join(import.meta.dirname, '..', '..');

/**
 * The user `board install` logs in as: an ordinary user with passwordless sudo, as Raspberry Pi
 * OS's first user is (./install.test.ts makes it, as root, before reading the bare board).
 */
export const INSTALL_USER = 'pi';
/** A user without sudo, whom the install must refuse with a clear message. */
export const PLAIN_USER = 'guest';

/** Shell lines (run as root) that add the two users, each logging in with root's key. */
export function addUsersScript(): string {
  const user = (name: string) => [
    `id ${name} >/dev/null 2>&1 || useradd -m -s /bin/bash ${name}`,
    `install -d -m 700 -o ${name} -g ${name} /home/${name}/.ssh`,
    `install -m 600 -o ${name} -g ${name} /root/.ssh/authorized_keys /home/${name}/.ssh/authorized_keys`,
  ];
  return ['set -e', ...user(INSTALL_USER), ...user(PLAIN_USER), `echo '${INSTALL_USER} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/010_${INSTALL_USER}-nopasswd`, `chmod 440 /etc/sudoers.d/010_${INSTALL_USER}-nopasswd`].join('\n');
}

export function boardUnderTest(): { config: BoardConfig; ssh: SshDevice; address: string; baselineFile: string } {
  const baselineFile = process.env.FLEETLAB_INSTALL_BASELINE;
  if (!process.env.FLEETLAB_BOARD_CONFIG || !baselineFile) {
    throw new Error('test/qemu-boards/ runs against a bare board: boot one with `fleetlab qemu boot --bare --machine virt --board-config F`, then set FLEETLAB_BOARD_CONFIG=F and FLEETLAB_INSTALL_BASELINE=<file> (see .ci/run)');
  }
  const config = loadBoardConfig();
  const ssh = new SshDevice({ host: config.host, port: config.sshPort, username: config.user, privateKey: readFileSync(config.privateKey) });
  return { config, ssh, address: `ssh://${INSTALL_USER}@${config.host}:${config.sshPort}`, baselineFile };
}

/** `--led` for the board's line as its config names it (`none` without one). */
export function ledOption(config: BoardConfig): string {
  return config.led && typeof config.led.gpio !== 'number' ? `${config.led.gpio.chip}:${config.led.gpio.offset}` : 'none';
}

/** `fleetlab board <args>` from this checkout, as a user types it; never rejects. */
export function fleetlabBoard(args: readonly string[]): ResultPromise<{ reject: false; all: true }> {
  return execa(process.execPath, [join(repoRoot, 'bin', 'fleetlab.js'), 'board', ...args], { reject: false, all: true });
}

/** The last JSON line of a command's stdout. */
export function lastEvent(stdout: string): Record<string, unknown> {
  const line = stdout.trim().split('\n').filter((l) => l.startsWith('{')).at(-1);
  if (!line) throw new Error(`no JSON line in:\n${stdout}`);
  return JSON.parse(line) as Record<string, unknown>;
}

/**
 * A team's directory at `dir`: fleetlab linked from this checkout (as `npm link` does), an ES
 * module package (Playwright then loads the config and fleetlab's compiled modules as ES
 * modules: the linked files are outside node_modules, which it would otherwise transpile as
 * CommonJS), the default config, and `specs` (file name -> source) under fleetlab/.
 */
export function writeTeam(dir: string, specs: Readonly<Record<string, string>>): void {
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  mkdirSync(join(dir, 'fleetlab'), { recursive: true });
  symlinkSync(repoRoot, join(dir, 'node_modules', 'fleetlab'));
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify({ name: 'lab-team', private: true, type: 'module' }, null, 2)}\n`);
  writeFileSync(join(dir, 'fleetlab.config.ts'), "import { defineConfig } from 'fleetlab/test';\n\nexport default defineConfig({});\n");
  for (const [name, source] of Object.entries(specs)) writeFileSync(join(dir, 'fleetlab', name), source);
}

/** Every attachment, annotation or test result in a Playwright JSON report (--reporter=json), wherever the suites nest them. */
export function reportItems<T = { name?: string; type?: string; body?: string; description?: string }>(node: unknown, key: 'attachments' | 'annotations' | 'results'): T[] {
  if (Array.isArray(node)) return node.flatMap((n) => reportItems<T>(n, key));
  if (typeof node !== 'object' || node === null) return [];
  const o = node as Record<string, unknown>;
  const own = Array.isArray(o[key]) ? (o[key] as T[]) : [];
  return [...own, ...Object.entries(o).filter(([k]) => k !== key).flatMap(([, v]) => reportItems<T>(v, key))];
}

/**
 * Runs `fleetlab test --target <target> --reporter=json` in a team's directory, expects it to
 * fail (the team's spec fails on purpose) and returns the text of the one "serial console"
 * attachment of its report.
 */
export async function failedRunSerialConsole(dir: string, target: string, env: Record<string, string>): Promise<string> {
  const run = await execa(process.execPath, [join(repoRoot, 'bin', 'fleetlab.js'), 'test', '--target', target, '--reporter=json'], { cwd: dir, reject: false, env });
  expect(run.exitCode, run.stderr).toBe(1);
  const report = JSON.parse(run.stdout.slice(run.stdout.indexOf('{'))) as unknown;
  const serial = reportItems(report, 'attachments').filter((a) => a.name === 'serial console');
  expect(serial, `not one serial console attachment; stderr:\n${run.stderr}`).toHaveLength(1);
  return Buffer.from(serial[0]!.body ?? '', 'base64').toString('utf8');
}

/**
 * A supervised virt board for a lab test, in `runDir`, its console on a pseudo-terminal: from
 * the image's saved ready board when the qemu target has saved one (.ci/run's virt run does,
 * before the lab tests), booted otherwise. What the lab tests check (leases, power, the board
 * target) is the same on both.
 */
export async function labBoard(image: QemuImage, runDir: string, progress: (line: string) => void): Promise<{ board: QemuBoard; ready: ReadyInfo }> {
  const saved = await findReadyState(image, 'virt', READINESS);
  const lines: string[] = [];
  const started = await startSupervisedBoard({ image, runDir, consolePty: true, progress: (line) => (lines.push(line), progress(line)) });
  // With the qemu target's save in the cache, the board starts from it: `qemu boot --snapshot`
  // (CI's board-target blink run) depends on the two finding the same save.
  if (saved && !lines.some((l) => l.startsWith(`started from the saved ready board ${saved.dir}`))) {
    await started.board.stop();
    throw new Error(`the qemu target's saved ready board ${saved.dir} is in the cache, but the lab board did not start from it:\n${lines.join('\n')}`);
  }
  return started;
}
