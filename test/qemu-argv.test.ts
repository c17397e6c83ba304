import { describe, expect, it } from 'vitest';
import { FleetlabError } from '../src/errors.js';
import { boardCpus, buildQemuArgv, NETDEV_ID, NIC_ID, type QemuArgvInput } from '../qemu/qemu-argv.js';

function input(overrides: Partial<QemuArgvInput> = {}): QemuArgvInput {
  return {
    machine: 'raspi3b',
    kernel: '/img/vmlinuz',
    initrd: '/img/initrd.img',
    dtb: '/img/bcm2837-rpi-3-b.dtb',
    disk: '/run/board/disk.qcow2',
    hostfwd: { api: { host: 40001, guest: 48484 }, ssh: { host: 40002, guest: 22 } },
    qmpSocket: '/run/board/qmp.sock',
    serialLog: '/run/board/serial.log',
    epochSeconds: 1_790_000_000,
    ...overrides,
  };
}

/** The value that follows a flag; the flag must appear exactly once. */
function flag(argv: string[], name: string): string {
  const at = argv.flatMap((a, i) => (a === name ? [i] : []));
  expect(at, `${name} appears once`).toHaveLength(1);
  return argv[at[0]! + 1]!;
}

/** Every value given to a repeatable flag, in order. */
function flags(argv: string[], name: string): string[] {
  return argv.flatMap((a, i) => (a === name ? [argv[i + 1]!] : []));
}

describe('buildQemuArgv raspi3b', () => {
  const argv = buildQemuArgv(input({ appendExtra: ['fleetlab.led=17', 'quiet'] }));

  it('selects the board and leaves RAM and cores at the board fixed values', () => {
    expect(flag(argv, '-M')).toBe('raspi3b');
    expect(argv).not.toContain('-m');
    expect(argv).not.toContain('-smp');
    expect(argv).not.toContain('-cpu');
  });

  it('boots kernel, initrd and dtb with the mini UART console and the epoch', () => {
    expect(flag(argv, '-kernel')).toBe('/img/vmlinuz');
    expect(flag(argv, '-initrd')).toBe('/img/initrd.img');
    expect(flag(argv, '-dtb')).toBe('/img/bcm2837-rpi-3-b.dtb');
    expect(flag(argv, '-append')).toBe(
      'root=/dev/mmcblk0 rootwait rw console=ttyS1,115200 apparmor=0 dwc_otg.fiq_fsm_enable=0 net.ifnames=0 kpti=0 fleetlab.epoch=1790000000 fleetlab.led=17 quiet',
    );
  });

  it('puts the disk on the SD card and the network on usb-net with loopback-only forwards', () => {
    expect(flag(argv, '-drive')).toBe('if=sd,format=qcow2,file=/run/board/disk.qcow2');
    expect(flag(argv, '-netdev')).toBe(
      `user,id=${NETDEV_ID},hostfwd=tcp:127.0.0.1:40001-:48484,hostfwd=tcp:127.0.0.1:40002-:22`,
    );
    expect(flag(argv, '-device')).toBe(`usb-net,netdev=${NETDEV_ID},id=${NIC_ID}`);
  });

  it('sends the second serial (mini UART) to the log and the first (PL011) nowhere', () => {
    expect(flags(argv, '-serial')).toEqual(['null', 'file:/run/board/serial.log']);
  });

  it('is controlled by QMP only, with no default devices and no display; resets stay in place unless asked', () => {
    expect(flag(argv, '-qmp')).toBe('unix:/run/board/qmp.sock,server=on,wait=off');
    expect(argv).toContain('-nodefaults');
    expect(flag(argv, '-display')).toBe('none');
    expect(argv).not.toContain('-no-reboot');
    // The launcher asks for it and starts a new process after a reset (qemu/boot.ts).
    expect(buildQemuArgv(input({ appendExtra: ['fleetlab.led=17', 'quiet'], noReboot: true }))).toContain('-no-reboot');
    expect(argv).not.toContain('-nographic');
    expect(argv).not.toContain('-S');
  });

  it('is deterministic and pure', () => {
    const i = input();
    const copy = structuredClone(i);
    expect(buildQemuArgv(i)).toEqual(buildQemuArgv(i));
    expect(i).toEqual(copy);
  });

  it('accepts the fixed RAM and core count spelled out, and starts paused on request', () => {
    expect(() => buildQemuArgv(input({ memoryMiB: 1024, cpus: 4 }))).not.toThrow();
    expect(buildQemuArgv(input({ paused: true }))).toContain('-S');
  });

  it('refuses to start from a saved state, which QEMU cannot restore for its usb-net', () => {
    expect(() => buildQemuArgv(input({ incoming: true }))).toThrow(/raspi3b cannot start from a saved state/);
  });

  it('omits -dtb when none is given', () => {
    expect(buildQemuArgv(input({ dtb: undefined }))).not.toContain('-dtb');
  });
});

describe('buildQemuArgv virt', () => {
  const argv = buildQemuArgv(input({ machine: 'virt', dtb: undefined }));

  it('selects virt with a cortex-a53 and default RAM and cores', () => {
    expect(flag(argv, '-M')).toBe('virt');
    expect(flag(argv, '-cpu')).toBe('cortex-a53');
    expect(flag(argv, '-m')).toBe('1024');
    expect(flag(argv, '-smp')).toBe('2');
    expect(argv).not.toContain('-dtb');
  });

  it('waits for a saved state to be streamed in when asked, and otherwise boots', () => {
    expect(argv).not.toContain('-incoming');
    expect(flag(buildQemuArgv(input({ machine: 'virt', dtb: undefined, incoming: true })), '-incoming')).toBe('defer');
  });

  it('uses virtio block and net and the PL011 console', () => {
    expect(flag(argv, '-drive')).toBe('if=none,id=hd0,format=qcow2,file=/run/board/disk.qcow2');
    expect(flags(argv, '-device')).toEqual(['virtio-blk-device,drive=hd0', `virtio-net-device,netdev=${NETDEV_ID},id=${NIC_ID}`]);
    expect(flags(argv, '-serial')).toEqual(['file:/run/board/serial.log']);
    expect(flag(argv, '-append')).toBe('root=/dev/vda rootwait rw console=ttyAMA0 apparmor=0 kpti=0 fleetlab.epoch=1790000000');
  });

  it("boots without the guest kernel's page table isolation unless the tuning keeps the kernel's choice", () => {
    const kept = buildQemuArgv(input({ machine: 'virt', dtb: undefined, tuning: { kernelKpti: true } }));
    expect(flag(kept, '-append')).toBe('root=/dev/vda rootwait rw console=ttyAMA0 apparmor=0 fleetlab.epoch=1790000000');
  });

  it('puts the console on a pty too, logged to the same file, when asked', () => {
    const a = buildQemuArgv(input({ machine: 'virt', dtb: undefined, consolePty: true }));
    expect(flags(a, '-chardev')).toEqual(['pty,id=console,logfile=/run/board/serial.log']);
    expect(flags(a, '-serial')).toEqual(['chardev:console']);
    // raspi3b: the console is the second serial (mini UART), the first stays null.
    expect(flags(buildQemuArgv(input({ consolePty: true })), '-serial')).toEqual(['null', 'chardev:console']);
  });

  it('boots a card image\'s root partition by its label', () => {
    const a = buildQemuArgv(input({ machine: 'virt', dtb: undefined, root: 'LABEL=fleetlab-root' }));
    expect(flag(a, '-append')).toMatch(/^root=LABEL=fleetlab-root rootwait /);
  });

  it('takes memory and cores', () => {
    const a = buildQemuArgv(input({ machine: 'virt', dtb: undefined, memoryMiB: 2048, cpus: 4 }));
    expect(flag(a, '-m')).toBe('2048');
    expect(flag(a, '-smp')).toBe('4');
  });

  it("leaves TCG's threads and the disk cache to QEMU unless tuned, and then sets them on either machine", () => {
    expect(argv).not.toContain('-accel');
    const tuning = { tcgThreads: 'single', diskCache: 'unsafe' } as const;
    const a = buildQemuArgv(input({ machine: 'virt', dtb: undefined, tuning }));
    expect(flag(a, '-accel')).toBe('tcg,thread=single');
    expect(flag(a, '-drive')).toBe('if=none,id=hd0,format=qcow2,file=/run/board/disk.qcow2,cache=unsafe');
    expect(flag(buildQemuArgv(input({ tuning })), '-drive')).toBe('if=sd,format=qcow2,file=/run/board/disk.qcow2,cache=unsafe');
  });
});

describe('boardCpus: the vCPUs of a virt board from FLEETLAB_QEMU_CPUS', () => {
  it('is the default when unset or empty, and the number given from 1 to 8', () => {
    expect(boardCpus({})).toBeUndefined();
    expect(boardCpus({ FLEETLAB_QEMU_CPUS: '' })).toBeUndefined();
    expect(boardCpus({ FLEETLAB_QEMU_CPUS: '1' })).toBe(1);
    expect(boardCpus({ FLEETLAB_QEMU_CPUS: '8' })).toBe(8);
  });

  it('refuses anything else, saying what it takes', () => {
    for (const raw of ['0', '9', '1.5', 'one', ' 2', '-1']) {
      expect(() => boardCpus({ FLEETLAB_QEMU_CPUS: raw })).toThrow(`FLEETLAB_QEMU_CPUS must be a whole number from 1 to 8 (the vCPUs of each emulated virt board), not ${JSON.stringify(raw)}`);
    }
  });
});

describe('buildQemuArgv refuses what QEMU would misread', () => {
  const cases: [string, Partial<QemuArgvInput>, RegExp][] = [
    ['RAM other than 1 GiB on raspi3b', { memoryMiB: 2048 }, /1024 MiB/],
    ['a core count other than 4 on raspi3b', { cpus: 2 }, /4 cores/],
    ['a dtb on virt', { machine: 'virt' }, /device tree/],
    ['a comma in the disk path', { disk: '/tmp/a,b.qcow2' }, /comma/],
    ['a comma in the serial log path', { serialLog: '/tmp/a,b.log' }, /comma/],
    ['a QMP socket path over the unix limit', { qmpSocket: `/tmp/${'x'.repeat(120)}.sock` }, /unix socket limit/],
    ['a port out of range', { hostfwd: { api: { host: 70000, guest: 48484 }, ssh: { host: 40002, guest: 22 } } }, /1-65535/],
    ['the same host port twice', { hostfwd: { api: { host: 40001, guest: 48484 }, ssh: { host: 40001, guest: 22 } } }, /same host port/],
    ['an append item with a space', { appendExtra: ['a b'] }, /without whitespace/],
    ['a root with a space', { root: 'LABEL=a b' }, /root must be one kernel parameter/],
    ['a fractional epoch', { epochSeconds: 1.5 }, /epochSeconds/],
    ['an empty kernel path', { kernel: '' }, /kernel path/],
  ];
  for (const [what, overrides, message] of cases) {
    it(what, () => {
      let caught: unknown;
      try {
        buildQemuArgv(input(overrides));
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(FleetlabError);
      expect((caught as FleetlabError).code).toBe('SUP_ERR_BAD_REQUEST');
      expect((caught as FleetlabError).message).toMatch(message);
    });
  }
});
