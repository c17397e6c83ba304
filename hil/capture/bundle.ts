/**
 * The bundle file `fleetlab capture` writes and `fleetlab replay` and `bundle show` read: a
 * gzipped tar whose first entry, `manifest.json`, names the format and its version, says
 * whether the capture finished, records each step (what it wrote, or why it failed) and
 * holds a sha256 of every other file, so a reader can tell a whole bundle from a cut or
 * damaged one.
 *
 * Writing goes through a staging directory beside the output (`<out>.capture-partial/`);
 * the tarball is packed to `<out>.partial`, flushed and renamed into place. A capture
 * killed at any point leaves no file at `<out>`, only those two names, which say what they
 * are, and the next capture to the same path clears them.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import * as tar from 'tar';
import { fsyncPath } from '../../src/atomic-file.js';
import { FleetlabError, errorText } from '../../src/errors.js';

export const BUNDLE_FORMAT = 'fleetlab-bundle';
/** The version this fleetlab writes, and the newest it reads. */
export const BUNDLE_VERSION = 1;

const MANIFEST = 'manifest.json';
const STAGING_MARK = '.fleetlab-capture';
// Each segment starts with a letter or digit: no `.`, `..`, absolute path or option-like name.
const NAME_SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._@+=-]*$/;
const isFileName = (name: string) => name.length <= 200 && name.split('/').every((segment) => NAME_SEGMENT.test(segment));

/** Where the capture read the device: its API, a shell over SSH, or the cloud's proxy. */
export interface BundleSource {
  kind: 'api' | 'ssh' | 'cloud';
  /** URL or host, without credentials. */
  address: string;
  uuid?: string;
}

/** What was kept out of the bundle: secrets (`default`), every env value too (`env`), or nothing. */
export type Redaction = 'default' | 'env' | 'none';

export interface BundleStep {
  name: string;
  status: 'ok' | 'failed';
  files: string[];
  /** Why the step failed, as the device or tool said it. */
  error?: string;
  ms: number;
}

export interface BundleManifest {
  format: typeof BUNDLE_FORMAT;
  version: number;
  createdAt: string;
  /** The fleetlab version that wrote it. */
  fleetlab: string;
  source: BundleSource;
  /** False when the capture stopped before its last step (device gone, Ctrl-C). */
  complete: boolean;
  redaction: Redaction;
  steps: BundleStep[];
  files: Record<string, { sha256: string; bytes: number }>;
}

const bundleError = (message: string, cause?: unknown) => new FleetlabError('HIL_ERR_CAPTURE', message, cause === undefined ? undefined : { cause });

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

export interface BundleWriterOptions {
  source: BundleSource;
  redaction: Redaction;
  fleetlab: string;
  /** Replace a file already at the output path. */
  force?: boolean;
  /** Told when each step starts and ends, for progress. */
  onStep?: (event: { name: string; phase: 'start' | 'ok' | 'failed'; error?: string }) => void;
}

/** A bundle being written. Each step's files land in the staging directory as the step runs. */
export class BundleWriter {
  private readonly steps: BundleStep[] = [];
  private readonly files = new Map<string, { sha256: string; bytes: number }>();
  private done = false;

  private constructor(
    readonly out: string,
    private readonly staging: string,
    private readonly options: BundleWriterOptions,
  ) {}

  static async open(out: string, options: BundleWriterOptions): Promise<BundleWriter> {
    if (existsSync(out) && !options.force) throw bundleError(`${out} exists: pass --force to replace it, or --out another path`);
    if (!existsSync(dirname(out))) throw bundleError(`cannot write ${out}: the directory ${dirname(out)} does not exist`);
    const staging = `${out}.capture-partial`;
    await clearLeftovers(out, staging);
    await mkdir(staging);
    await writeFile(join(staging, STAGING_MARK), `a fleetlab capture to ${basename(out)} that has not finished\n`);
    return new BundleWriter(out, staging, options);
  }

  /**
   * Runs one step. A step that throws is recorded with its error and the capture goes on
   * (a device without dmesg permission still has a journal); what it put before it threw stays.
   */
  async step(name: string, run: (put: (file: string, data: string | Buffer) => Promise<void>) => Promise<void>): Promise<boolean> {
    if (this.done) throw new FleetlabError('SUP_ERR_INTERNAL', `bundle ${this.out}: step "${name}" after finish`);
    const started = Date.now();
    const record: BundleStep = { name, status: 'ok', files: [], ms: 0 };
    this.options.onStep?.({ name, phase: 'start' });
    try {
      await run(async (file, data) => {
        await this.put(file, data);
        record.files.push(file);
      });
    } catch (err) {
      record.status = 'failed';
      record.error = errorText(err);
    }
    record.ms = Date.now() - started;
    this.steps.push(record);
    this.options.onStep?.({ name, phase: record.status, ...(record.error !== undefined ? { error: record.error } : {}) });
    return record.status === 'ok';
  }

  private async put(file: string, data: string | Buffer): Promise<void> {
    if (!isFileName(file) || file === MANIFEST || file === STAGING_MARK) {
      throw new FleetlabError('SUP_ERR_INTERNAL', `bundle file name ${JSON.stringify(file)} is not allowed`);
    }
    if (this.files.has(file)) throw new FleetlabError('SUP_ERR_INTERNAL', `bundle file ${file} written twice`);
    const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data);
    await mkdir(dirname(join(this.staging, file)), { recursive: true });
    await writeFile(join(this.staging, file), bytes);
    this.files.set(file, { sha256: sha256(bytes), bytes: bytes.length });
  }

  /**
   * Writes the manifest and packs the bundle into place. `complete: false` marks a capture
   * that stopped early: what it has is kept and the manifest says so.
   */
  async finish({ complete }: { complete: boolean }): Promise<BundleManifest> {
    if (this.done) throw new FleetlabError('SUP_ERR_INTERNAL', `bundle ${this.out} finished twice`);
    this.done = true;
    const names = [...this.files.keys()].sort();
    const manifest: BundleManifest = {
      format: BUNDLE_FORMAT,
      version: BUNDLE_VERSION,
      createdAt: new Date().toISOString(),
      fleetlab: this.options.fleetlab,
      source: this.options.source,
      complete,
      redaction: this.options.redaction,
      steps: this.steps,
      files: Object.fromEntries(names.map((n) => [n, this.files.get(n)!])),
    };
    await writeFile(join(this.staging, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
    const partial = `${this.out}.partial`;
    await tar.create({ gzip: true, cwd: this.staging, file: partial, portable: true }, [MANIFEST, ...names]);
    await fsyncPath(partial);
    await rename(partial, this.out);
    await fsyncPath(dirname(this.out));
    await rm(this.staging, { recursive: true, force: true });
    return manifest;
  }
}

/** A killed capture's staging directory and half-packed file; refuses a directory not ours. */
async function clearLeftovers(out: string, staging: string): Promise<void> {
  if (existsSync(staging)) {
    if (!existsSync(join(staging, STAGING_MARK))) throw bundleError(`${staging} exists and is not a fleetlab capture's staging directory: move it away`);
    await rm(staging, { recursive: true, force: true });
  }
  await rm(`${out}.partial`, { force: true });
}

/** A bundle read back and checked. Bundles are bounded (the journal is cut at capture), so it is held in memory. */
export interface Bundle {
  readonly path: string;
  readonly manifest: BundleManifest;
  names(): string[];
  has(file: string): boolean;
  read(file: string): Buffer;
  text(file: string): string;
  json<T = unknown>(file: string): T;
}

/**
 * Opens a bundle, refusing with a clear message one that is not a bundle, was cut short or
 * damaged (gzip, tar, or a file whose sha256 differs from the manifest's), or is of a newer
 * format version than this fleetlab reads.
 */
export async function readBundle(path: string): Promise<Bundle> {
  const data = await readFile(path).catch((err: NodeJS.ErrnoException) => {
    throw bundleError(err.code === 'ENOENT' ? `${path}: no such file` : `${path}: ${err.message}`);
  });
  if (data.length < 2 || data[0] !== 0x1f || data[1] !== 0x8b) throw bundleError(`${path} is not a fleetlab bundle: it is not a gzip file`);
  const entries = await unpack(path, data);
  const manifest = parseManifest(path, entries.get(MANIFEST));
  verifyFiles(path, entries, manifest);
  return openBundle(path, entries, manifest);
}

/** Every plain file of the tarball by name; links, devices and the like are refused. */
async function unpack(path: string, data: Buffer): Promise<Map<string, Buffer>> {
  const entries = new Map<string, Buffer>();
  const strange: string[] = [];
  const parser = new tar.Parser({
    strict: true,
    onReadEntry: (entry) => {
      const name = entry.path.replace(/^\.\//, '');
      if (entry.type === 'Directory') return entry.resume();
      if (entry.type !== 'File' && entry.type !== 'OldFile') {
        strange.push(`${name} (${entry.type})`);
        return entry.resume();
      }
      const chunks: Buffer[] = [];
      entry.on('data', (chunk: Buffer) => chunks.push(chunk));
      entry.on('end', () => entries.set(name, Buffer.concat(chunks)));
    },
  });
  try {
    await new Promise<void>((resolve, reject) => {
      parser.on('error', reject);
      parser.on('abort', reject);
      parser.on('end', resolve);
      parser.end(data);
    });
  } catch (err) {
    throw bundleError(`${path} is truncated or damaged, so it cannot be read: ${errorText(err)}`, err);
  }
  if (strange.length > 0) throw bundleError(`${path} holds entries a bundle never has: ${strange.join(', ')}`);
  return entries;
}

function parseManifest(path: string, raw: Buffer | undefined): BundleManifest {
  if (raw === undefined) throw bundleError(`${path} has no ${MANIFEST}: it is not a fleetlab bundle, or it was cut short`);
  let manifest: Partial<BundleManifest>;
  try {
    manifest = JSON.parse(raw.toString('utf8')) as Partial<BundleManifest>;
  } catch (err) {
    throw bundleError(`${path}: ${MANIFEST} is not JSON (${errorText(err)})`, err);
  }
  if (manifest === null || typeof manifest !== 'object' || manifest.format !== BUNDLE_FORMAT) {
    throw bundleError(`${path} is not a fleetlab bundle: its manifest's format is ${JSON.stringify(manifest?.format)}`);
  }
  if (!Number.isInteger(manifest.version) || (manifest.version as number) < 1) {
    throw bundleError(`${path}: its manifest's version ${JSON.stringify(manifest.version)} is not a bundle format version`);
  }
  if ((manifest.version as number) > BUNDLE_VERSION) {
    throw bundleError(`${path} is bundle format version ${manifest.version}, newer than this fleetlab reads (${BUNDLE_VERSION}): update fleetlab to read it`);
  }
  if (typeof manifest.files !== 'object' || manifest.files === null || !Array.isArray(manifest.steps)) {
    throw bundleError(`${path}: its manifest lacks files or steps`);
  }
  return manifest as BundleManifest;
}

function verifyFiles(path: string, entries: Map<string, Buffer>, manifest: BundleManifest): void {
  for (const [name, want] of Object.entries(manifest.files)) {
    if (!isFileName(name)) throw bundleError(`${path}: its manifest names ${JSON.stringify(name)}, which is not a bundle file name`);
    const data = entries.get(name);
    if (data === undefined) throw bundleError(`${path} lacks ${name}, which its manifest lists: it was cut short or damaged`);
    if (sha256(data) !== want?.sha256) throw bundleError(`${path}: ${name} differs from what was captured (sha256 mismatch): the bundle is damaged`);
  }
}

function openBundle(path: string, entries: Map<string, Buffer>, manifest: BundleManifest): Bundle {
  const names = Object.keys(manifest.files).sort();
  const read = (file: string) => {
    const data = Object.hasOwn(manifest.files, file) ? entries.get(file) : undefined;
    if (data === undefined) throw bundleError(`${path} has no ${file}${manifest.complete ? '' : ' (the capture did not finish)'}`);
    return data;
  };
  return {
    path,
    manifest,
    names: () => [...names],
    has: (file) => Object.hasOwn(manifest.files, file),
    read,
    text: (file) => read(file).toString('utf8'),
    json: <T>(file: string) => {
      try {
        return JSON.parse(read(file).toString('utf8')) as T;
      } catch (err) {
        if (err instanceof FleetlabError) throw err;
        throw bundleError(`${path}: ${file} is not JSON (${errorText(err)})`, err);
      }
    },
  };
}
