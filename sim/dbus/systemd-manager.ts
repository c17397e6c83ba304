/**
 * The subset of systemd's org.freedesktop.systemd1.Manager the supervisor uses: StartUnit,
 * StopUnit and RestartUnit (s name, s mode) -> o job. Nothing is run; each accepted call is
 * reported as a job so a simulated device and its tests can see which unit was asked for.
 * Errors follow PID 1: a malformed unit name or an unknown job mode is InvalidArgs, a unit
 * outside the configured set is org.freedesktop.systemd1.NoSuchUnit.
 */
import * as dbus from '@jellybrick/dbus-next';
import { ExportedInterface } from './exported-interface.js';

export const SYSTEMD1_NAME = 'org.freedesktop.systemd1';
export const SYSTEMD1_PATH = '/org/freedesktop/systemd1';
const INVALID_ARGS = 'org.freedesktop.DBus.Error.InvalidArgs';
const NO_SUCH_UNIT = 'org.freedesktop.systemd1.NoSuchUnit';

/** job_mode_table in systemd's src/core/job.c. */
const JOB_MODES = new Set([
  'fail',
  'replace',
  'replace-irreversibly',
  'isolate',
  'flush',
  'ignore-dependencies',
  'ignore-requirements',
  'triggering',
  'restart-dependencies',
  'lenient',
]);

const UNIT_TYPES = 'service|socket|target|device|mount|automount|swap|timer|path|slice|scope';
// unit_name_is_valid(): [A-Za-z0-9:_.\-\\] plus an optional @instance, a known suffix, < 256 bytes.
const UNIT_NAME = new RegExp(`^[A-Za-z0-9:_.\\\\-]+(@[A-Za-z0-9:_.\\\\-]*)?\\.(${UNIT_TYPES})$`);

export type JobType = 'start' | 'stop' | 'restart';

export interface UnitJob {
  type: JobType;
  unit: string;
  mode: string;
  /** The job object path returned to the caller. */
  job: string;
  /** Date.now() when the job was queued. */
  at: number;
}

export interface Systemd1ManagerOptions {
  /** Units that exist; when absent every well-formed unit name exists. */
  units?: readonly string[];
  onJob(job: UnitJob): void;
}

export class Systemd1Manager extends ExportedInterface {
  private nextJobId = 1;

  constructor(private readonly options: Systemd1ManagerOptions) {
    super('org.freedesktop.systemd1.Manager');
  }

  StartUnit(name: string, mode: string): string {
    return this.queue('start', name, mode);
  }

  StopUnit(name: string, mode: string): string {
    return this.queue('stop', name, mode);
  }

  RestartUnit(name: string, mode: string): string {
    return this.queue('restart', name, mode);
  }

  private queue(type: JobType, unit: string, mode: string): string {
    if (unit.length > 255 || !UNIT_NAME.test(unit)) {
      throw new dbus.DBusError(INVALID_ARGS, `Unit name ${unit} is not valid.`);
    }
    if (this.options.units && !this.options.units.includes(unit)) {
      throw new dbus.DBusError(NO_SUCH_UNIT, `Unit ${unit} not found.`);
    }
    if (!JOB_MODES.has(mode)) {
      throw new dbus.DBusError(INVALID_ARGS, `Job mode ${mode} invalid`);
    }
    if (mode === 'isolate' && type !== 'start') {
      throw new dbus.DBusError(INVALID_ARGS, 'Isolate is only valid for start.');
    }
    if (mode === 'triggering' && type !== 'stop') {
      throw new dbus.DBusError(INVALID_ARGS, "Job mode 'triggering' is only valid for stop.");
    }
    const job = `${SYSTEMD1_PATH}/job/${this.nextJobId++}`;
    this.options.onJob({ type, unit, mode, job, at: Date.now() });
    return job;
  }
}

Systemd1Manager.configureMembers({
  methods: {
    StartUnit: { inSignature: 'ss', outSignature: 'o' },
    StopUnit: { inSignature: 'ss', outSignature: 'o' },
    RestartUnit: { inSignature: 'ss', outSignature: 'o' },
  },
});
