/**
 * `fleetlab bundle show`: the first thing a developer reads about a captured device. What was
 * running, what was wanted, what the supervisor was waiting for, the last errors in its log,
 * and what the capture could not read. Pure: a bundle in, text out.
 */
import type { Bundle } from './bundle.js';
import type { CapturedLocks } from './capture.js';

interface DeviceV1 {
  status?: string;
  commit?: string;
  supervisor_version?: string;
  os_version?: string;
  update_pending?: boolean;
  update_downloaded?: boolean;
  update_failed?: boolean;
  download_progress?: number | null;
}
interface StatusV2 {
  status?: string;
  appState?: string;
  overallDownloadProgress?: number | null;
  release?: string;
  containers?: Array<{ appId?: number; serviceName?: string; status?: string; containerId?: string }>;
  images?: Array<{ appId?: number; serviceName?: string; name?: string; status?: string; downloadProgress?: number | null; downloadError?: string }>;
}
interface LocalTarget {
  state?: { local?: { apps?: Record<string, { name?: string; releaseId?: string | number; commit?: string; services?: Record<string, { serviceName?: string; image?: string }> }> } };
}
interface JournalEntry {
  MESSAGE?: unknown;
  PRIORITY?: string;
  SYSLOG_IDENTIFIER?: string;
  _SYSTEMD_UNIT?: string;
  __REALTIME_TIMESTAMP?: string;
}

const SUPERVISOR = /fleetlab-supervisor/;
const ERRORISH = /\b(error|fail(ed|ure)?|refused|cannot|unable|timed out|locked|lock held)\b/i;
const LAST_ERRORS = 10;

/** The bundle's JSON file, or undefined when the capture did not get it. */
function optional<T>(bundle: Bundle, file: string): T | undefined {
  return bundle.has(file) ? bundle.json<T>(file) : undefined;
}

export function showBundle(bundle: Bundle): string {
  const m = bundle.manifest;
  const out: string[] = [];
  out.push(`${bundle.path}: captured ${m.createdAt} from ${m.source.kind} ${m.source.address}${m.source.uuid ? ` (device ${m.source.uuid})` : ''} by fleetlab ${m.fleetlab}, bundle format ${m.version}`);
  out.push(m.complete ? 'complete: the capture ran every step' : 'INCOMPLETE: the capture stopped before its last step (see "not captured")');
  out.push(`redaction: ${m.redaction === 'none' ? 'none (this bundle may hold secrets)' : m.redaction === 'env' ? 'secrets and every environment value' : 'secrets'}`);

  const device = optional<DeviceV1>(bundle, 'device/device.json');
  const status = optional<StatusV2>(bundle, 'state/status.json');
  if (device) {
    const flags = [device.update_pending && 'update pending', device.update_downloaded && 'update downloaded', device.update_failed && 'UPDATE FAILED'].filter(Boolean);
    out.push('', `device: ${device.status ?? '?'}, running release ${device.commit ?? '(none)'}${flags.length ? `; ${flags.join(', ')}` : ''}`);
    out.push(`  supervisor ${device.supervisor_version ?? '?'}, os ${device.os_version ?? '?'}`);
  }
  if (status) {
    const progress = status.overallDownloadProgress === null || status.overallDownloadProgress === undefined ? '' : `, download ${status.overallDownloadProgress}%`;
    out.push(`state engine: ${status.status ?? '?'}, apps ${status.appState ?? '?'}${progress}${status.release ? `, release ${status.release}` : ''}`);
    const containers = status.containers ?? [];
    out.push(containers.length ? 'running:' : 'running: no service containers');
    for (const c of containers) out.push(`  app ${c.appId} ${c.serviceName}: ${c.status}${c.containerId ? ` (${c.containerId.slice(0, 12)})` : ''}`);
  }

  const target = optional<LocalTarget>(bundle, 'state/local-target.json')?.state?.local?.apps;
  if (target) {
    out.push('wanted (local target state):');
    for (const [appId, app] of Object.entries(target)) {
      const services = Object.values(app.services ?? {}).map((s) => `${s.serviceName} ${s.image}`);
      out.push(`  app ${appId} ${app.name ?? ''} release ${app.releaseId ?? '?'}${app.commit ? ` (${app.commit})` : ''}: ${services.join(', ') || 'no services'}`);
    }
  }

  const cloudDevice = optional<{ is_online?: boolean; device_name?: string; last_connectivity_event?: string }>(bundle, 'cloud/device.json');
  if (cloudDevice) {
    const fleet = optional<{ app_name?: string }>(bundle, 'cloud/fleet.json');
    const release = optional<{ commit?: string; id?: number }>(bundle, 'cloud/release.json');
    const tags = optional<Array<{ tag_key?: string; value?: string }>>(bundle, 'cloud/tags.json') ?? [];
    out.push(`cloud: ${cloudDevice.is_online ? 'online' : 'OFFLINE'}${fleet?.app_name ? `, fleet ${fleet.app_name}` : ''}${release ? `, should run release ${release.commit ?? release.id}` : ''}${tags.length ? `; tags ${tags.map((t) => `${t.tag_key}=${t.value}`).join(', ')}` : ''}`);
  }

  const waiting = [...lockLines(optional<CapturedLocks>(bundle, 'supervisor/locks.json')), ...waitingFor(device, status)];
  if (waiting.length) out.push('', 'waiting for:', ...waiting.map((w) => `  ${w}`));

  const errors = lastSupervisorErrors(bundle);
  if (errors.length) out.push('', `last errors in the supervisor's log (newest last):`, ...errors.map((e) => `  ${e}`));

  // Steps that failed for one reason (no shell on the device) are one line.
  const byReason = new Map<string, string[]>();
  for (const step of m.steps.filter((s) => s.status === 'failed')) byReason.set(step.error ?? '', [...(byReason.get(step.error ?? '') ?? []), step.name]);
  if (byReason.size) out.push('', 'not captured:', ...[...byReason].map(([why, names]) => `  ${names.join(', ')}: ${why}`));
  out.push('', `files: ${bundle.names().length} (${bundle.names().join(', ')})`);
  return `${out.join('\n')}\n`;
}

/** What keeps the device from its target, as far as the captured state tells. */
function waitingFor(device: DeviceV1 | undefined, status: StatusV2 | undefined): string[] {
  const lines: string[] = [];
  for (const image of status?.images ?? []) {
    if (image.downloadError) lines.push(`image ${image.name} of ${image.serviceName}: download failing (${image.downloadError})`);
    else if (image.status && image.status !== 'Downloaded') lines.push(`image ${image.name} of ${image.serviceName}: ${image.status}${image.downloadProgress != null ? ` ${image.downloadProgress}%` : ''}`);
  }
  for (const c of status?.containers ?? []) {
    if (c.status && !/^running$/i.test(c.status)) lines.push(`service ${c.serviceName} of app ${c.appId}: ${c.status}`);
  }
  if (device?.update_pending && lines.length === 0) lines.push('an update is pending with nothing downloading or stopped: an update lock, or the apply loop (see the log below)');
  return lines;
}

/** Each lock file on the device, and who holds it: the app (its file is empty or its own), or a supervisor (its mark). */
function lockLines(locks: CapturedLocks | undefined): string[] {
  return (locks?.files ?? []).map((f) => {
    const [appId, service] = f.path.split('/');
    let holder = 'the app';
    try {
      const mark = JSON.parse(f.content) as { lockedBy?: string; pid?: number };
      if (mark.lockedBy === 'fleetlab-supervisor') holder = `the supervisor (pid ${mark.pid}; freed at its next start if it is gone)`;
    } catch {
      // Not a supervisor's mark: the app's lock, whatever it wrote.
    }
    return `update lock of service ${service} of app ${appId}, held by ${holder}: ${locks!.root}/${f.path}`;
  });
}

function lastSupervisorErrors(bundle: Bundle): string[] {
  if (!bundle.has('journal/journal.jsonl')) return [];
  const found: string[] = [];
  for (const line of bundle.text('journal/journal.jsonl').split('\n')) {
    if (!line) continue;
    let entry: JournalEntry;
    try {
      entry = JSON.parse(line) as JournalEntry;
    } catch {
      continue;
    }
    const ofSupervisor = SUPERVISOR.test(entry._SYSTEMD_UNIT ?? '') || SUPERVISOR.test(entry.SYSLOG_IDENTIFIER ?? '');
    const message = typeof entry.MESSAGE === 'string' ? entry.MESSAGE : JSON.stringify(entry.MESSAGE);
    const serious = Number(entry.PRIORITY ?? 6) <= 3 || ERRORISH.test(message);
    if (ofSupervisor && serious) found.push(`${timeOf(entry)}${message}`);
  }
  return found.slice(-LAST_ERRORS);
}

function timeOf(entry: JournalEntry): string {
  const us = Number(entry.__REALTIME_TIMESTAMP);
  return Number.isFinite(us) && us > 0 ? `${new Date(us / 1000).toISOString()} ` : '';
}
