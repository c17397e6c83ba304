/**
 * The subset of systemd-hostnamed's org.freedesktop.hostname1 interface the supervisor uses,
 * with hostnamed's rules: names are checked with hostname_is_valid(), an empty static name
 * removes the configured name (Hostname then falls back to the transient name or the OS
 * default), and changes are announced with PropertiesChanged.
 */
import * as dbus from '@jellybrick/dbus-next';
import { ExportedInterface } from './exported-interface.js';
import { errorText } from '../../src/errors.js';
import { isValidHostname } from '../../src/supervisor/adapters/hostname-rules.js';

export const HOSTNAME1_NAME = 'org.freedesktop.hostname1';
export const HOSTNAME1_PATH = '/org/freedesktop/hostname1';
const INVALID_ARGS = 'org.freedesktop.DBus.Error.InvalidArgs';
const FAILED = 'org.freedesktop.DBus.Error.Failed';

export interface Hostname1Options {
  defaultHostname: string;
  /** The static name read from the state file at start; '' when none. */
  staticHostname: string;
  /** Makes the static name durable ('' removes it); the change is applied only after it resolves. */
  persist(staticHostname: string): Promise<void>;
  /** Called after every change of the effective hostname. */
  onChange(hostname: string): void;
}

export class Hostname1 extends ExportedInterface {
  static readonly readOnlyProperties: readonly string[] = ['Hostname', 'StaticHostname'];

  private staticName: string;
  private transientName = '';
  // hostnamed handles one request at a time; so do we, so file and memory never disagree.
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly options: Hostname1Options) {
    super(HOSTNAME1_NAME);
    this.staticName = options.staticHostname;
  }

  get Hostname(): string {
    return this.staticName || this.transientName || this.options.defaultHostname;
  }

  get StaticHostname(): string {
    return this.staticName;
  }

  /** Resolves when every accepted request has been applied. */
  idle(): Promise<void> {
    return this.queue;
  }

  SetStaticHostname(name: string, _interactive: boolean): Promise<void> {
    const run = this.queue.then(() => this.applyStatic(name));
    this.queue = run.catch(() => undefined);
    return run;
  }

  SetHostname(name: string, _interactive: boolean): void {
    if (name !== '' && !isValidHostname(name)) {
      throw new dbus.DBusError(INVALID_ARGS, `Invalid hostname '${name}'`);
    }
    const before = this.Hostname;
    this.transientName = name;
    // The static name, when set, keeps precedence over a transient one, as in hostnamed.
    if (this.Hostname !== before) this.announce({ Hostname: this.Hostname });
  }

  private async applyStatic(name: string): Promise<void> {
    if (name === this.staticName) return;
    if (name !== '' && !isValidHostname(name)) {
      throw new dbus.DBusError(INVALID_ARGS, `Invalid static hostname '${name}'`);
    }
    try {
      await this.options.persist(name);
    } catch (err) {
      throw new dbus.DBusError(FAILED, `Failed to write static hostname: ${errorText(err)}`);
    }
    const before = this.Hostname;
    this.staticName = name;
    const changed: Record<string, string> = { StaticHostname: name };
    if (this.Hostname !== before) changed.Hostname = this.Hostname;
    this.announce(changed);
  }

  private announce(changed: Record<string, string>): void {
    ExportedInterface.emitPropertiesChanged(this, changed, []);
    this.options.onChange(this.Hostname);
  }
}

Hostname1.configureMembers({
  properties: {
    Hostname: { signature: 's', access: 'read' },
    StaticHostname: { signature: 's', access: 'read' },
  },
  methods: {
    SetStaticHostname: { inSignature: 'sb', outSignature: '' },
    SetHostname: { inSignature: 'sb', outSignature: '' },
  },
});
