/**
 * The surface every way of reaching a device offers, modelled on labgrid's protocols: a spec
 * only ever sees these interfaces, so one spec runs on sim, container, qemu and board targets.
 * A target declares which protocols it provides; a spec that needs a missing one is skipped
 * with the missing capability named (see hil/harness/fixtures.ts), never silently.
 */

/** Everything a target can provide. Finer than the protocols where targets differ. */
export const CAPABILITIES = [
  'api', // HTTP to the device API
  'exec', // run a command on the device
  'led', // the LED line's transitions, timestamped by the observer
  'power.reboot', // reboot through the device's OS (login1)
  'power.cycle', // hard power cycle: no shutdown, state on disk kept
  'power.cut', // power off until power.on()
  'network', // partition the device from the cloud, heal it
  'network.registry', // NetworkProtocol.partition cuts the registry a deployed release is pulled from too
  'engine.restart', // EngineProtocol.restart: the device's own container engine stopped and started by its OS
  'disk.fill', // DiskProtocol: the filesystems of the engine and the supervisor's store left with no free block
  'journal', // the device's journal
  'files', // read and write files on the device
  'files.volumes', // FilesProtocol.volumePath: where an app's named volume lives on the device
  'images', // ImagesProtocol: a release's images reach the device's engine (device.deploy)
  'ports', // PortsProtocol: where the harness reaches a service's published port (device.address)
  'supervisor.kill', // SupervisorProtocol.kill: SIGKILL to the supervisor; the OS starts it again
] as const;
export type Capability = (typeof CAPABILITIES)[number];

/** Who the device is, as the target knows it before asking the API. */
export interface DeviceIdentity {
  /** Base URL of the device API as reachable from the harness, no trailing slash. */
  readonly url: string;
  /** The device key (full access). */
  readonly apiKey: string;
  readonly uuid: string;
  /** The `vendor` word of the device (docs/decisions.md item 1): `PLATFORM_*` variables, lock dir. */
  readonly vendor: string;
  /** Where the supervisor keeps update locks on the device: `<lockRoot>/<appId>/<service>/updates.lock`. */
  readonly lockRoot: string;
  /**
   * Where the host OS keeps what host-config changes, as device paths for `files` (on a
   * board `/etc/hostname`, `<boot>/system-proxy/`, `<boot>/config.txt`). Absent when the
   * target cannot tell.
   */
  readonly hostPaths?: {
    /** The static hostname file hostname1 writes. */
    readonly hostname: string;
    /** The directory with `redsocks.conf` and `no_proxy`. */
    readonly proxyConfigDir: string;
    readonly bootConfig: string;
  };
}

/** What a spec may need to know about how the device runs, to decide what it can observe. */
export interface TargetFacts {
  /** The container engine (`docker`, `balena`, `sim`...). */
  readonly engine: string;
  /** Applying a release downloads images from a registry, so download progress is observable. */
  readonly imagesArePulled: boolean;
  /**
   * How much longer than the simulator the device takes (default 1): specs' deadlines are
   * multiplied by it (hil/lib/wait.ts `scaled`), never what they measure.
   */
  readonly timeScale?: number;
}

export interface HttpResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  /** The body as text; `json()` parses it. */
  readonly text: string;
  json<T = unknown>(): T;
}

export interface RequestOptions {
  /** JSON body; sent with `Content-Type: application/json`. */
  readonly body?: unknown;
  /** Raw body with its own content type (for malformed-body specs). */
  readonly rawBody?: { readonly contentType: string; readonly data: string };
  readonly query?: Record<string, string | number | boolean>;
  /** Key to send as `Authorization: Bearer`; `null` sends none; default the device key. */
  readonly key?: string | null;
  readonly headers?: Record<string, string>;
  readonly timeoutMs?: number;
}

/** A response whose body is read as it arrives (journal-logs follow, local logs). */
export interface HttpStream {
  readonly status: number;
  readonly headers: Record<string, string>;
  /** Body chunks as text, in order, until the server ends the body or `close()` is called. */
  chunks(): AsyncIterable<string>;
  /** Aborts the request; the device sees the client go away. Idempotent. */
  close(): Promise<void>;
}

export interface ApiProtocol {
  readonly identity: DeviceIdentity;
  request(method: string, path: string, options?: RequestOptions): Promise<HttpResponse>;
  /** Like `request`, but resolves once the headers arrive and hands the body over as a stream. */
  stream(method: string, path: string, options?: RequestOptions): Promise<HttpStream>;
  /** Resolves when `/ping` answers 200, or rejects after `timeoutMs`. */
  waitReady(timeoutMs?: number): Promise<void>;
  /**
   * The device key changed (`POST /v1/regenerate-api-key` with the device key): later
   * requests send `key` by default, and `identity.apiKey` reads it back.
   */
  useKey(key: string): void;
}

export interface ExecResult {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CommandProtocol {
  /** Runs argv on the device (no shell unless argv asks for one). Never rejects on exit code. */
  run(argv: readonly string[], options?: { readonly input?: string; readonly timeoutMs?: number }): Promise<ExecResult>;
}

export interface LedTransition {
  /** Milliseconds, epoch, from the observer's clock. */
  readonly at: number;
  readonly value: 0 | 1;
}

export interface LedProtocol {
  /** The line's level now. */
  level(): Promise<0 | 1>;
  /** Transitions seen since `sinceMs` (epoch ms), oldest first. */
  transitions(sinceMs?: number): Promise<readonly LedTransition[]>;
  /** A human description of the line (e.g. `gpio 529, pinctrl-bcm2835 pin 17`). */
  readonly line: string;
}

export interface PowerProtocol {
  /** Reboot through the OS (login1), resolves when the API answers again. */
  reboot(): Promise<void>;
  /** Hard power cycle (no clean shutdown), resolves when the API answers again. */
  cycle(): Promise<void>;
  /** Cut power; the device stays off until `on()`. */
  off(): Promise<void>;
  /** Restore power, resolves when the API answers again. */
  on(): Promise<void>;
}

export interface SupervisorProtocol {
  /**
   * SIGKILL to the supervisor process, as an OOM kill or a crash ends it mid-whatever; resolves
   * once the OS has started it again (systemd's Restart=always on a board, the simulated
   * device's own restart) and it answers.
   */
  kill(): Promise<void>;
}

export interface NetworkProtocol {
  /**
   * Cut the device off from the cloud, and with `network.registry` from the registry its
   * releases are pulled from (the device API stays reachable from the harness).
   */
  partition(): Promise<void>;
  heal(): Promise<void>;
}

export interface EngineProtocol {
  /**
   * The device's container engine restarted by its service manager, as an engine crash or
   * upgrade does mid-update: its containers stop and those with a restart policy start again.
   * Resolves once the engine answers. Only where the device has an engine of its own.
   */
  restart(): Promise<void>;
}

export interface DiskProtocol {
  /**
   * Takes every free block (root's reserve too) of the filesystems holding the engine's data
   * and the supervisor's store, as a full SD card does; `free()` gives them back.
   */
  fill(): Promise<void>;
  free(): Promise<void>;
}

export interface JournalEntryText {
  readonly unit?: string;
  readonly message: string;
  /** Microseconds since the epoch, as journald stamps it. */
  readonly realtimeUs: number;
}

export interface JournalProtocol {
  /** Entries, newest last; `unit` filters by systemd unit; `lines` keeps the last N. */
  entries(options?: { readonly unit?: string; readonly lines?: number }): Promise<readonly JournalEntryText[]>;
}

export interface FilesProtocol {
  read(path: string): Promise<Buffer>;
  write(path: string, data: string | Buffer): Promise<void>;
  remove(path: string): Promise<void>;
  exists(path: string): Promise<boolean>;
  list(path: string): Promise<readonly string[]>;
  /**
   * Where the named volume `volume` of app `appId` is mounted on the device (a directory the
   * other methods accept), or undefined while it does not exist. Only on targets that
   * declare `files.volumes`: the answer depends on the engine's storage layout.
   */
  volumePath?(appId: number, volume: string): Promise<string | undefined>;
}

/** A host and port the harness reaches, as an engine published them. */
export interface PublishedPort {
  /** An IP address (IPv6 without brackets). */
  readonly host: string;
  readonly port: number;
}

/**
 * Where the harness reaches an app's published ports. A device's ports are its own (DESIGN.md,
 * "a device is a device"): two devices of a run publish the same port number at different
 * addresses, so a spec asks here rather than guessing a host port.
 */
export interface PortsProtocol {
  /**
   * Where `containerPort` of the running container of `service` (app `appId`) is published, as
   * the device's engine reports it (the container's NetworkSettings.Ports), not as its compose
   * file says; for a service with `network_mode: host`, the port it listens on at the device's
   * host network's address. Rejects when no container of the service runs or it publishes no
   * such port.
   */
  published(service: string, containerPort: number, options?: { readonly appId?: number; readonly protocol?: 'tcp' | 'udp' }): Promise<PublishedPort>;
}

/**
 * Where the supervisor keeps its files on the device (as its flags set them) and how its engine
 * is reached: what `fleetlab capture` needs beyond the API to make a bundle a replay starts from.
 */
export interface DevicePaths {
  /** `--data-dir`: the store, device.json. */
  dataDir?: string;
  /** `--lock-root`: `<app>/<service>/updates.lock`. */
  lockRoot?: string;
  /** The engine for the docker CLI (`-H`); default the CLI's own. */
  dockerHost?: string;
  /** Where that docker CLI runs when not on the device: an engine the harness shares (the container target). */
  engineShell?: CommandProtocol;
}

/** The supervisor process's use of the machine, read from its /proc. */
export interface ProcessUsage {
  /** User plus system CPU time since it started, seconds. */
  readonly cpuSeconds: number;
  readonly rssBytes: number;
}

/**
 * What the harness watches while a test runs, for the test's device timeline
 * (hil/harness/timeline-recorder.ts). Each part is optional where the target cannot read it
 * cheaply; `missing` says which and why, and the page says it too.
 */
export interface ObserveProtocol {
  /** A unix socket on this machine reaching the device's container engine (its /events stream). */
  engineSocket?(): Promise<string>;
  /** The supervisor process's CPU time and RSS now; undefined while it does not run (the device is off). */
  supervisorUsage?(): Promise<ProcessUsage | undefined>;
  /** Update locks held now, `<appId>/<service>` of each lock file. */
  heldLocks?(): Promise<readonly string[]>;
  /** The serial console's lines since `sinceMs` (epoch ms), stamped as they arrived. */
  consoleLines?(sinceMs: number): Promise<ReadonlyArray<{ readonly at: number; readonly text: string }>>;
  /** What this target cannot observe, and why. */
  readonly missing?: readonly string[];
  /** Ends what observing started (an SSH follower); the device's close() calls it. */
  close?(): Promise<void>;
}

/** One device reached through one target. Protocols a target lacks are `undefined`. */
export interface DeviceUnderTest extends AsyncDisposable {
  readonly target: string;
  readonly capabilities: ReadonlySet<Capability>;
  /** Optional so a driver can start without it; specs treat a missing one as "unknown". */
  readonly facts?: TargetFacts;
  readonly api: ApiProtocol;
  readonly exec?: CommandProtocol;
  readonly led?: LedProtocol;
  readonly power?: PowerProtocol;
  readonly network?: NetworkProtocol;
  readonly journal?: JournalProtocol;
  readonly files?: FilesProtocol;
  readonly images?: ImagesProtocol;
  readonly ports?: PortsProtocol;
  readonly supervisor?: SupervisorProtocol;
  readonly engine?: EngineProtocol;
  readonly disk?: DiskProtocol;
  /** Where a capture finds the supervisor's files and engine (with `exec`). */
  readonly paths?: DevicePaths;
  /** What the harness watches for the test's device timeline. */
  readonly observe?: ObserveProtocol;
  /** The supervisor's own log so far (attached to failed tests). */
  supervisorLog(): Promise<string>;
  /**
   * The board's serial console: what it said when SSH cannot reach it. From `sinceMs` (a test's
   * start, less a margin) where the target keeps times (a lab board's capture); the emulated
   * board's recent tail otherwise.
   */
  consoleLog?(sinceMs?: number): Promise<string>;
  /**
   * Set when the lab, not the device, failed the test (a board that did not come back after
   * its power control): the test is labelled an infrastructure failure.
   */
  readonly infrastructureFailure?: string;
  close(): Promise<void>;
}

/**
 * How a release's images reach the device's engine. The sim and container targets share an
 * engine with the harness, so an image built there is one the supervisor finds without a pull;
 * the qemu and board targets build for the board's architecture and push to a registry the
 * device pulls from.
 */
export interface ImagesProtocol {
  /** Where to build (and push) a release; what it needs is started on the first call. */
  prepare(): Promise<ReleaseEngine>;
}

export interface ReleaseEngine {
  /** Unix socket of the Engine API to build a release's images in. */
  readonly engineSocket: string;
  /** `host:port` of the registry to push to, which the device reaches by the same name; absent when the device shares the build engine. */
  readonly registry?: string;
  /**
   * When `engineSocket` is a private build engine: this machine's dockerd, from which an `image:`
   * service's image is copied when it is there for the device's architecture.
   */
  readonly imageSource?: { readonly engineSocket: string; readonly architecture: string };
}
