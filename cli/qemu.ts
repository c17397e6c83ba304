/** `fleetlab qemu`: the emulated Raspberry Pi, its image, its boot and its power switch. */
import { join } from 'node:path';
import { Option, type Command } from 'commander';
import { action } from '../src/command/action.js';
import { UsageError } from '../src/command/usage-hint.js';
import { fleetlabRoot } from '../src/package-root.js';

export function addQemuCommands(program: Command): void {
  const qemu = program.command('qemu').description('The emulated Raspberry Pi: build its image, boot it');
  qemu
    .command('build')
    .description('Build (or reuse) the Raspberry Pi 3 image from Debian arm64 packages: rootfs, kernel, Node 24, the supervisor; cached by its inputs')
    .option('--suite <name>', 'Debian suite (trixie: Debian 13; bookworm: Debian 12)', 'trixie')
    .option('--mirror <url>', 'Debian mirror', 'http://deb.debian.org/debian')
    .option('--force', 'rebuild even when cached', false)
    .option('--bare', 'the board\'s operating system without anything of fleetlab\'s: a fresh board to try `fleetlab board install` on', false)
    .action(
      action(async (opts: { suite: string; mirror: string; force: boolean; bare: boolean }) => {
        const { buildImage, formatBuildProgress } = await import('../device-image/build.js');
        const result = await buildImage({
          repoRoot: fleetlabRoot(import.meta.url),
          suite: opts.suite,
          mirror: opts.mirror,
          force: opts.force,
          bare: opts.bare,
          progress: (e) => console.error(formatBuildProgress(e)),
        });
        console.log(JSON.stringify({ event: 'built', dir: result.image.dir, key: result.image.key, builtRootfs: result.builtRootfs, builtImage: result.builtImage, totalMs: result.totalMs }));
      }),
    );
  qemu
    .command('payload')
    .description("Write the board's supervisor bundle and arm64 epoll addon to --out, from a checkout's sources (npm pack runs it: an installed fleetlab builds its board image from them)")
    .requiredOption('--out <dir>', 'where to write them (the package takes dist/device)')
    .action(
      action(async (opts: { out: string }) => {
        const { writePrebuiltPayload } = await import('../device-image/payload.js');
        const { NODE_PACKAGE } = await import('../device-image/recipe.js');
        const { cacheRoot } = await import('../device-image/tools.js');
        const { resolve } = await import('node:path');
        const written = await writePrebuiltPayload(fleetlabRoot(import.meta.url), join(cacheRoot(), 'qemu'), NODE_PACKAGE, resolve(opts.out));
        console.error(`fleetlab qemu payload: ${written.bundle}, ${written.epollAddon} (for ${written.node})`);
      }),
    );
  qemu
    .command('boot')
    .description('Boot the image (building it first if needed); prints one JSON ready line once the supervisor answers /ping; Ctrl-C powers it off')
    .addOption(new Option('--machine <kind>', 'virt (generic arm64, default: the fastest) or raspi3b (the Pi 3: its BCM2835 GPIO, device tree and USB network)').choices(['raspi3b', 'virt']).default('virt'))
    .option('--snapshot', 'throw the disk changes away at exit (default: keep them in the machine\'s overlay under the cache); on virt, start from the image\'s saved ready board when there is one (seconds)', false)
    .option('--api-port <port>', 'loopback port forwarded to the device API (default: a free one)')
    .option('--ssh-port <port>', 'loopback port forwarded to SSH (default: a free one)')
    .option('--board-config <file>', 'also write a board target config for this board (FLEETLAB_BOARD_CONFIG=<file> npm run hil -- --project=board)')
    .option('--suite <name>', 'Debian suite of the image (trixie, bookworm)', 'trixie')
    .option('--bare', 'boot the bare image (qemu build --bare: no supervisor); ready once SSH answers, for `fleetlab board install`', false)
    .option('--flash-image <file>', 'boot a card image (fleetlab card build) instead: its kernel and root partition, provisioned with this harness\'s SSH key; --machine virt')
    .option('--serial-pty', 'the console on a pseudo-terminal too (serialPty in the ready line, serial in --board-config), as a lab board\'s USB serial adapter', false)
    .action(
      action(async (opts: { machine: 'raspi3b' | 'virt'; snapshot: boolean; apiPort?: string; sshPort?: string; boardConfig?: string; suite: string; bare: boolean; flashImage?: string; serialPty: boolean }) => {
        const { buildImage, formatBuildProgress } = await import('../device-image/build.js');
        const { bootBoard } = await import('../qemu/boot.js');
        const { untilStopped } = await import('../src/stop-signals.js');
        if (opts.flashImage && opts.machine !== 'virt') throw new UsageError('--flash-image boots on --machine virt (QEMU 7.2 has no Pi 4; the Pi 4 kernel and root partition run there as they are)');
        if (opts.flashImage && opts.bare) throw new UsageError('--flash-image and --bare are two different disks: give one');
        const { image } = opts.flashImage
          ? { image: await (await import('../qemu/flash-boot.js')).flashImageForQemu({ image: opts.flashImage, progress: (d) => console.error(d) }) }
          : await buildImage({
              repoRoot: fleetlabRoot(import.meta.url),
              suite: opts.suite,
              bare: opts.bare,
              progress: (e) => console.error(formatBuildProgress(e)),
            });
        const port = (v: string | undefined) => (v === undefined ? undefined : Number(v));
        const { dirname } = await import('node:path');
        const ports = { ...(opts.apiPort ? { apiPort: port(opts.apiPort) } : {}), ...(opts.sshPort ? { sshPort: port(opts.sshPort) } : {}) };
        // A board on a throwaway disk holds nothing of a run's: it starts from its image's saved
        // state (seconds: the bare board's, saved at its first boot; the supervised one's, saved
        // ready by the qemu target) rather than booting for half a minute or more.
        const { mkdtemp, rm } = await import('node:fs/promises');
        const savedRunDir = opts.snapshot && opts.machine === 'virt' && !opts.flashImage ? await mkdtemp(join((await import('node:os')).tmpdir(), 'fleetlab-qemu-')) : undefined;
        const restore = savedRunDir ? await import('../hil/targets/qemu-restore.js') : undefined;
        const { board, ready } = savedRunDir && restore
          ? await (opts.bare ? restore.startBareBoard : restore.startSupervisedBoard)({ image, runDir: savedRunDir, consolePty: opts.serialPty, progress: (d) => console.error(d), ...ports })
          : await bootBoard({
              image,
              machine: opts.machine,
              snapshot: opts.snapshot,
              readyWhen: opts.bare ? 'ssh' : 'api',
              consolePty: opts.serialPty,
              ...ports,
              progress: (d) => console.error(d),
            });
        if (opts.boardConfig) {
          const { writeFileSync } = await import('node:fs');
          const { boardConfigFor } = await import('../hil/lab/board-config-for-qemu.js');
          // The lab's power switch for this board is QMP, driven by this same CLI.
          const self = [process.execPath, ...process.execArgv, process.argv[1]!];
          writeFileSync(opts.boardConfig, `${JSON.stringify(boardConfigFor(ready, self, image.bootDir), null, 2)}\n`);
          console.error(`board config: ${opts.boardConfig}`);
        }
        console.log(JSON.stringify(ready));
        console.error(`ssh -i ${ready.sshKey} -p ${ready.sshPort} root@127.0.0.1    # Ctrl-C here powers the board off`);
        // QEMU runs with -no-reboot: a reboot of the guest, or `qemu power cycle`, ends the
        // process and the board is powered on again here; anything else ends the command.
        const { relaunch, takePowerCycleRequest } = await import('../qemu/boot.js');
        let current = board;
        let stopping = false;
        const { done, trigger } = untilStopped(async () => {
          stopping = true;
          await current.stop();
        });
        const follow = async (): Promise<void> => {
          await current.exited;
          if (stopping) return;
          if (current.guestReset || takePowerCycleRequest(ready.qmpSocket)) {
            console.error(`board reset (${current.guestReset ? current.resetCause : 'power cycle'}): starting QEMU again`);
            current = await relaunch(current, image, dirname(ready.qmpSocket));
            return follow();
          }
          console.error(current.exitReason);
          trigger();
        };
        void follow().catch((err) => (console.error(`fleetlab: ${String(err)}`), trigger()));
        await done;
        if (savedRunDir) await rm(savedRunDir, { recursive: true, force: true });
      }),
    );

  qemu
    .command('power <action>')
    .description('Power control of a running board through its QMP socket: cycle (off, then `qemu boot` powers it on again) or off')
    .requiredOption('--qmp <socket>', 'the board\'s QMP socket (qmpSocket in the ready line)')
    .action(
      action(async (what: string, opts: { qmp: string }) => {
        if (what !== 'cycle' && what !== 'off') throw new UsageError(`power action must be cycle or off, not ${JSON.stringify(what)}`);
        const { QmpClient } = await import('../qemu/qmp.js');
        // A cycle is off, then on: `qemu boot` starts QEMU again when it sees the request.
        if (what === 'cycle') (await import('../qemu/boot.js')).requestPowerCycle(opts.qmp);
        const qmp = await QmpClient.connect({ socketPath: opts.qmp });
        try {
          await qmp.execute('quit');
        } finally {
          await qmp.close().catch(() => undefined);
        }
      }),
    );
}
