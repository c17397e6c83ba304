/**
 * Builds one compose service's image through the Engine API (dockerode), from its build
 * context sent as a tar. The tag is the service's `image:` when given, else
 * `<project>-<service>:<hash of the context>`, so an unchanged context is an unchanged tag.
 * Failures say which service, which file and what the build printed last.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import type Docker from 'dockerode';
import { FleetlabError, errorText } from '../../src/errors.js';
import type { ComposeProject, ComposeService } from './compose.js';

/** `line` is a build step's output; `summary` marks the start and end lines worth printing on their own. */
export type BuildProgress = (event: { service: string; line: string; summary?: boolean }) => void;

const LOG_TAIL_LINES = 15;

/**
 * Every line of every service's build as it arrives, prefixed with the service as docker
 * compose prints it (`[web] Step 2/3 : RUN make`): a build of minutes is not silent, and two
 * services' lines are told apart.
 */
export function buildLog(log: (line: string) => void): BuildProgress {
  return (e) => log(`[${e.service}] ${e.line}`);
}

/** Image names must be lower case; compose derives `<project>-<service>` the same way. */
function defaultRepository(project: ComposeProject, service: ComposeService): string {
  return `${project.name}-${service.name}`.toLowerCase().replace(/[^a-z0-9_.-]/g, '-').replace(/^[^a-z0-9]+/, '');
}

/**
 * `.dockerignore` as a list of matchers: each line a path (prefix of a directory) or a glob
 * with `*` and `?`; `!` re-includes. Enough for the common files; `**` matches across dirs.
 */
export function dockerignoreMatcher(text: string): (path: string) => boolean {
  const rules = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'))
    .map((l) => {
      const negate = l.startsWith('!');
      const pattern = (negate ? l.slice(1) : l).replace(/^\/+/, '').replace(/\/+$/, '');
      const source = pattern
        .split('')
        .map((c, i, all) => (c === '*' ? (all[i + 1] === '*' ? '' : all[i - 1] === '*' ? '.*' : '[^/]*') : c === '?' ? '[^/]' : c.replace(/[.+^${}()|[\]\\]/g, '\\$&')))
        .join('');
      return { negate, re: new RegExp(`^${source}(/.*)?$`) };
    });
  return (path) => {
    let ignored = false;
    for (const rule of rules) if (rule.re.test(path)) ignored = !rule.negate;
    return ignored;
  };
}

/** Files of the context (relative, `/`-separated), less what `.dockerignore` excludes. */
async function contextFiles(context: string): Promise<string[]> {
  const ignorePath = join(context, '.dockerignore');
  const ignored = existsSync(ignorePath) ? dockerignoreMatcher(readFileSync(ignorePath, 'utf8')) : () => false;
  const out: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name);
      const rel = relative(context, full).split(sep).join('/');
      if (ignored(rel) && rel !== 'Dockerfile') continue;
      if (entry.isDirectory()) await walk(full);
      else out.push(rel);
    }
  };
  await walk(context);
  return out.sort();
}

async function contextHash(context: string, files: readonly string[], service: ComposeService): Promise<string> {
  const hash = createHash('sha256').update(JSON.stringify({ dockerfile: service.build!.dockerfile, args: service.build!.args }));
  for (const file of files) hash.update(`${file}\0`).update(await readFile(join(context, file))).update('\0');
  return hash.digest('hex').slice(0, 12);
}

/** Builds the service's image in the engine and returns its reference. */
export async function buildServiceImage(project: ComposeProject, service: ComposeService, options: { docker: Docker; progress?: BuildProgress }): Promise<string> {
  const build = service.build!;
  const at = `${project.file}: services.${service.name}.build`;
  if (!existsSync(build.context) || !statSync(build.context).isDirectory()) {
    throw new FleetlabError('HIL_ERR_BUILD', `${at}: the build context ${build.context} is not a directory; fix build.context`);
  }
  const dockerfilePath = join(build.context, build.dockerfile);
  if (!existsSync(dockerfilePath)) {
    throw new FleetlabError('HIL_ERR_BUILD', `${at}: no Dockerfile at ${dockerfilePath}; create it, or point build.dockerfile at yours`);
  }
  const files = await contextFiles(build.context);
  const ref = service.image ?? `${defaultRepository(project, service)}:${await contextHash(build.context, files, service)}`;
  const progress = options.progress ?? (() => undefined);
  const started = Date.now();
  progress({ service: service.name, line: `building ${ref} from ${build.context}`, summary: true });

  const tail: string[] = [];
  let failure: string | undefined;
  try {
    const stream = await options.docker.buildImage({ context: build.context, src: files }, { t: ref, dockerfile: build.dockerfile, buildargs: build.args, rm: true, forcerm: true });
    await new Promise<void>((resolve, reject) => {
      options.docker.modem.followProgress(
        stream,
        (err: Error | null) => (err ? reject(err) : resolve()),
        (event: { stream?: string; error?: string; errorDetail?: { message?: string } }) => {
          if (event.error) failure = event.errorDetail?.message ?? event.error;
          for (const line of (event.stream ?? '').split('\n').filter((l) => l.trim())) {
            tail.push(line);
            if (tail.length > LOG_TAIL_LINES) tail.shift();
            progress({ service: service.name, line });
          }
        },
      );
    });
  } catch (err) {
    failure ??= errorText(err);
  }
  if (failure) {
    const hint = /pull access denied|failed to resolve|no such host|dial tcp|manifest .*not found/i.test(failure)
      ? ' (a base image in FROM is missing locally and no registry is reachable: build or import it first; `npx fleetlab test-images base` makes fleetlab/busybox:latest)'
      : '';
    throw new FleetlabError('HIL_ERR_BUILD', `${at}: building ${ref} failed: ${failure.trim()}${hint}${tail.length ? `\n  last build output:\n    ${tail.join('\n    ')}` : ''}`);
  }
  progress({ service: service.name, line: `built ${ref} in ${((Date.now() - started) / 1000).toFixed(1)} s`, summary: true });
  return ref;
}
