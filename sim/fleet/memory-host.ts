/**
 * A fleet device's host OS, held in memory: hostname, proxy settings, and reboot/poweroff
 * handed to the fleet. One dbus-daemon per device would cost a process each and change
 * nothing the device's cloud-facing logic sees; a single simulated device keeps the real
 * D-Bus peer (sim/dbus).
 */
import type { HostPort, ProxySettings } from '../../src/supervisor/adapters/ports.js';

export class MemoryHost implements HostPort {
  private hostname: string;
  private proxy: ProxySettings | undefined;

  constructor(
    initialHostname: string,
    private readonly power: { reboot(): void; powerOff(): void },
  ) {
    this.hostname = initialHostname;
  }

  async getHostname(): Promise<string> {
    return this.hostname;
  }

  async setHostname(name: string): Promise<void> {
    this.hostname = name;
  }

  async getProxy(): Promise<ProxySettings | undefined> {
    return this.proxy;
  }

  async setProxy(proxy: ProxySettings | undefined): Promise<void> {
    this.proxy = proxy;
  }

  async reboot(): Promise<void> {
    this.power.reboot();
  }

  async powerOff(): Promise<void> {
    this.power.powerOff();
  }

  async close(): Promise<void> {}
}
