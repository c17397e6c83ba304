/**
 * The subset of systemd-logind's org.freedesktop.login1.Manager the supervisor uses:
 * Reboot(b interactive) and PowerOff(b interactive). The request is reported synchronously
 * (so it is recorded before the caller sees the reply); acting on it is the simulated
 * device's job.
 */
import { ExportedInterface } from './exported-interface.js';

export const LOGIN1_NAME = 'org.freedesktop.login1';
export const LOGIN1_PATH = '/org/freedesktop/login1';

export type PowerAction = 'reboot' | 'poweroff';

export interface Login1ManagerOptions {
  onPower(action: PowerAction): void;
}

export class Login1Manager extends ExportedInterface {
  constructor(private readonly options: Login1ManagerOptions) {
    super('org.freedesktop.login1.Manager');
  }

  Reboot(_interactive: boolean): void {
    this.options.onPower('reboot');
  }

  PowerOff(_interactive: boolean): void {
    this.options.onPower('poweroff');
  }
}

Login1Manager.configureMembers({
  methods: {
    Reboot: { inSignature: 'b', outSignature: '' },
    PowerOff: { inSignature: 'b', outSignature: '' },
  },
});
