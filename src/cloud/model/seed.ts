/**
 * Device types every cloud starts with: the Raspberry Pi boards fleetlab targets, generic
 * boards and the QEMU machines the HIL suite boots. Inserted once; existing slugs are kept.
 */
import type { Db } from '../db/port.js';

export const deviceTypes: { slug: string; name: string }[] = [
  { slug: 'raspberrypi3', name: 'Raspberry Pi 3' },
  { slug: 'raspberrypi3-64', name: 'Raspberry Pi 3 (64-bit)' },
  { slug: 'raspberrypi4-64', name: 'Raspberry Pi 4 (64-bit)' },
  { slug: 'raspberrypi5', name: 'Raspberry Pi 5' },
  { slug: 'raspberrypi0-2w-64', name: 'Raspberry Pi Zero 2 W (64-bit)' },
  { slug: 'generic-aarch64', name: 'Generic AARCH64 (ARMv8)' },
  { slug: 'generic-amd64', name: 'Generic x86_64 (GPT)' },
  { slug: 'qemux86-64', name: 'QEMU X86 64bit' },
  { slug: 'qemuarm64', name: 'QEMU ARMv8 (virt)' },
  { slug: 'qemu-raspberrypi3-64', name: 'QEMU emulated Raspberry Pi 3 (64-bit)' },
];

export async function seedDeviceTypes(db: Db, now: Date = new Date()): Promise<void> {
  await db.transaction(async (tx) => {
    const have = new Set((await tx.query<{ slug: string }>('SELECT slug FROM "device_type"', [])).map((r) => r.slug));
    for (const t of deviceTypes) {
      if (!have.has(t.slug)) await tx.query('INSERT INTO "device_type" (created_at, slug, name) VALUES (?, ?, ?)', [now.toISOString(), t.slug, t.name]);
    }
  });
}
