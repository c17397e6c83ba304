/**
 * A usage error of the `fleetlab` command ends with where that command's help is: commander's
 * own (unknown command or option, missing argument) and a flag value a command checks itself.
 * Both entries: the full CLI and the device's own (`device-image/fleetlab-device.ts`, what a board runs).
 * And the old spellings of two renamed groups (`image` is now `card`, `images` is now
 * `test-images`): hidden from `fleetlab --help`, they say the new name on stderr and run as before.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

function run(entry: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', join(root, entry), ...args], { cwd: root }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, stdout, stderr });
    });
  });
}

describe('fleetlab usage errors', () => {
  it('end with "Run \'fleetlab <cmd> --help\' for usage." and exit 1', async () => {
    const cases: Array<[entry: string, args: string[], first: string, hint: string]> = [
      ['cli/main.ts', ['nope'], "error: unknown command 'nope'", "Run 'fleetlab --help' for usage."],
      ['cli/main.ts', ['cloud', '--bogus'], "error: unknown option '--bogus'", "Run 'fleetlab cloud --help' for usage."],
      ['cli/main.ts', ['deploy'], "error: missing required argument 'compose'", "Run 'fleetlab deploy --help' for usage."],
      ['cli/main.ts', ['sim', 'stack', '--port', '99999'], 'error: --port must be 0..65535, got 99999', "Run 'fleetlab sim stack --help' for usage."],
      ['cli/main.ts', ['sim', 'device', '--cloud-url', 'http://127.0.0.1:1'], 'error: --cloud-url needs --provisioning-key', "Run 'fleetlab sim device --help' for usage."],
      ['cli/main.ts', ['cloud', '--port', '0', '--database', 'mysql://nope'], 'error: --database must be postgres://... or sqlite:FILE', "Run 'fleetlab cloud --help' for usage."],
      ['cli/main.ts', ['cloud', '--port', '0', '--database', 'postgres://127.0.0.1:1/x', '--db-pool', '0'], 'error: --db-pool must be a whole number of connections, 1..1000, got 0', "Run 'fleetlab cloud --help' for usage."],
      ['cli/main.ts', ['cloud', '--port', '0', '--db-pool', '4'], 'error: --db-pool sizes the PostgreSQL connection pool: it needs --database postgres://...', "Run 'fleetlab cloud --help' for usage."],
      ['cli/main.ts', ['sim', 'fleet', '--devices', '0', '--cloud', 'http://127.0.0.1:1', '--provisioning-key', 'k'], 'error: --devices must be a whole number from 1 to 100000, got 0', "Run 'fleetlab sim fleet --help' for usage."],
      ['cli/main.ts', ['sim', 'fleet', '--devices', '10', '--cloud', 'http://127.0.0.1:1'], 'error: give --fleet and --api-key', "Run 'fleetlab sim fleet --help' for usage."],
      ['cli/main.ts', ['sim', 'fleet', '--devices', '10', '--cloud', 'http://127.0.0.1:1', '--provisioning-key', 'k', '--fault', 'partition:10'], 'error: --fault "partition:10": write it as <kind>:<percent>%', "Run 'fleetlab sim fleet --help' for usage."],
      ['cli/main.ts', ['sim', 'fleet', '--devices', '10', '--cloud', 'http://127.0.0.1:1', '--provisioning-key', 'k', '--shard', '3/2'], 'error: --shard "3/2": write it as i/n', "Run 'fleetlab sim fleet --help' for usage."],
      ['cli/main.ts', ['sim', 'fleet', '--devices', '10', '--cloud', 'http://127.0.0.1:1', '--provisioning-key', 'k', '--workers', '1.5'], 'error: --workers must be a whole number, got 1.5', "Run 'fleetlab sim fleet --help' for usage."],
      ['cli/main.ts', ['sim', 'device', '--supervisor-version', '9.7'], 'error: --supervisor-version: "9.7" is not a version X.Y.Z; accepted: a supervisor version from 1.1.0 to 14.7.0', "Run 'fleetlab sim device --help' for usage."],
      ['cli/main.ts', ['sim', 'stack', '--supervisor-version', '15.0.0'], 'error: --supervisor-version: "15.0.0" is newer than 14.7.0', "Run 'fleetlab sim stack --help' for usage."],
      ['cli/main.ts', ['test', '--supervisor-version', '1.0.9'], 'error: --supervisor-version: "1.0.9" is older than 1.1.0', "Run 'fleetlab test --help' for usage."],
      ['device-image/fleetlab-device.ts', ['supervisor', '--bogus'], "error: unknown option '--bogus'", "Run 'fleetlab supervisor --help' for usage."],
    ];
    const results = await Promise.all(cases.map(([entry, args]) => run(entry, args)));
    cases.forEach(([entry, args, first, hint], i) => {
      const { code, stderr } = results[i]!;
      const lines = stderr.trimEnd().split('\n');
      expect({ cmd: `${entry} ${args.join(' ')}`, code, first: lines[0]!.slice(0, first.length), last: lines.at(-1) }).toEqual({ cmd: `${entry} ${args.join(' ')}`, code: 1, first, last: hint });
    });
  });

  it('a failure of what the command does is not a usage error: no pointer to --help', async () => {
    const { code, stderr } = await run('cli/main.ts', ['cloud', '--port', '0', '--data-dir', '/dev/null/cloud']);
    expect(code).toBe(1);
    expect(stderr).toMatch(/^fleetlab: .*ENOTDIR/);
    expect(stderr).not.toContain('--help');
  });
});

describe('renamed commands: the card and the test images', () => {
  /** Where `fleetlab --help` (or a group's) lists a command: two spaces in, at the start of a line. */
  const listed = (help: string, name: string) => new RegExp(`^  ${name}(?= |$)`, 'm').test(help);

  it('fleetlab --help lists card and test-images, not image or images; the groups list their subcommands', async () => {
    const [top, card, images] = await Promise.all([run('cli/main.ts', ['--help']), run('cli/main.ts', ['card', '--help']), run('cli/main.ts', ['test-images', '--help'])]);
    expect([top.code, card.code, images.code]).toEqual([0, 0, 0]);
    expect({ card: listed(top.stdout, 'card'), testImages: listed(top.stdout, 'test-images'), image: listed(top.stdout, 'image'), images: listed(top.stdout, 'images') })
      .toEqual({ card: true, testImages: true, image: false, images: false });
    expect(listed(card.stdout, 'build')).toBe(true);
    expect(['build', 'base', 'device-sim', 'build-device'].map((name) => listed(images.stdout, name))).toEqual([true, true, true, false]);
  });

  it("each old spelling's --help: one line on stderr naming the new spelling, then the same help, exit 0", async () => {
    const cases: Array<[old: string[], now: string[]]> = [
      [['image', 'build'], ['card', 'build']],
      [['images', 'build'], ['test-images', 'build']],
      [['images', 'base'], ['test-images', 'base']],
      [['images', 'build-device'], ['test-images', 'device-sim']],
    ];
    const results = await Promise.all(cases.flatMap(([old, now]) => [run('cli/main.ts', [...old, '--help']), run('cli/main.ts', [...now, '--help'])]));
    cases.forEach(([old, now], i) => {
      const [o, n] = [results[2 * i]!, results[2 * i + 1]!];
      expect({ old: old.join(' '), code: o.code, stderr: o.stderr }).toEqual({ old: old.join(' '), code: 0, stderr: `fleetlab ${old.join(' ')} is now fleetlab ${now.join(' ')}\n` });
      expect(n).toEqual({ code: 0, stdout: expect.stringContaining('Options:'), stderr: '' });
      // The same command under its old name: its usage line names the spelling typed, the rest is the same.
      expect(o.stdout.replace(`fleetlab ${old.join(' ')} `, `fleetlab ${now.join(' ')} `)).toBe(n.stdout);
    });
  });

  it('an old spelling runs the command: the notice, then what the new spelling does', async () => {
    const socket = join(root, 'no-such-engine.sock');
    const cases: Array<[old: string[], now: string[]]> = [
      [['image', 'build', '--board', 'rpi5'], ['card', 'build', '--board', 'rpi5']],
      [['images', 'build', '--docker-socket', socket], ['test-images', 'build', '--docker-socket', socket]],
    ];
    const results = await Promise.all(cases.flatMap(([old, now]) => [run('cli/main.ts', old), run('cli/main.ts', now)]));
    cases.forEach(([old, now], i) => {
      const [o, n] = [results[2 * i]!, results[2 * i + 1]!];
      expect(n.code).toBe(1);
      expect(n.stderr).toMatch(/^fleetlab: (--board rpi5 is not built|no container engine answers at )/);
      expect(o).toEqual({ ...n, stderr: `fleetlab ${old.slice(0, 2).join(' ')} is now fleetlab ${now.slice(0, 2).join(' ')}\n${n.stderr}` });
    });
  });
});
