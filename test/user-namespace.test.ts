/**
 * The sim target as a user other than root needs an unprivileged user namespace for its GPIO
 * mount namespace (sim/gpio/namespace.ts). Where the machine refuses one, that is one sentence
 * with the way out. The refusal is real: the check runs in a user namespace whose limit of
 * further user namespaces is 0, so the kernel refuses as a machine with them turned off does.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { requireUserNamespace } from '../sim/gpio/namespace.js';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('requireUserNamespace', () => {
  it('passes where the kernel gives an unprivileged user namespace (this machine)', () => {
    expect(() => requireUserNamespace({ root: false })).not.toThrow();
  });

  // In a user namespace the kernel refuses to bind a directory with mounts below it: the check
  // once bound /tmp, and failed whenever a root build had its chroot's /proc mounted there.
  const notRoot = process.getuid?.() !== 0;
  if (notRoot) console.log(`skipped "passes while something is mounted below the temporary directory": mounting a tmpfs needs root, and this runs as uid ${process.getuid?.()}`);
  it.skipIf(notRoot)('passes while something is mounted below the temporary directory (needs root to mount)', () => {
    const below = mkdtempSync(join(tmpdir(), 'fleetlab-mounted-'));
    execFileSync('mount', ['-t', 'tmpfs', 'none', below]);
    try {
      expect(() => requireUserNamespace({ root: false })).not.toThrow();
    } finally {
      execFileSync('umount', [below]);
      rmSync(below, { recursive: true, force: true });
    }
  });

  it('says in one sentence what to do where the kernel refuses one', async () => {
    const check = `import('./sim/gpio/namespace.ts').then((m) => m.requireUserNamespace({ root: false })).then(() => console.log('passed'), (e) => console.log(e.code + ': ' + e.message))`;
    const out = await new Promise<string>((done, fail) =>
      execFile(
        'unshare',
        ['--user', '--map-root-user', 'sh', '-c', 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" --import tsx -e "$1"', process.execPath, check],
        { cwd: root },
        (err, stdout, stderr) => (err ? fail(new Error(`${err.message}\n${stderr}`)) : done(stdout.trim())),
      ),
    );
    expect(out).toMatch(/^HIL_ERR_PERMISSION: the sim target keeps its simulated GPIO in a private mount namespace, which for a user other than root \(uid \d+\) needs an unprivileged user namespace, and this machine refuses one \(unshare: .+\): allow them \(sudo sysctl -w kernel\.apparmor_restrict_unprivileged_userns=0 .*\), run as root, or use --target container$/);
    expect(out.split('\n')).toHaveLength(1);
  });
});
