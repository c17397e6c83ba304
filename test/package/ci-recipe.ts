/**
 * The shell commands of examples/ci/'s recipes, as a CI system would run them for one job, so
 * the package test can run them as written (issue 39 item 5). Pure: the caller runs them.
 *
 * GitHub Actions: the `run:` steps of the `hil` job whose `if:` holds for the given matrix
 * entry, with `${{ matrix.* }}` put in. Steps that `uses:` an action (checkout, setup-node,
 * cache, upload) are GitHub's own, and skipped. GitLab CI: a job's `before_script` and `script`
 * with its variables and the parallel job's CI_NODE_INDEX/CI_NODE_TOTAL.
 */
import { parse } from 'yaml';

export interface RecipeStep {
  readonly name: string;
  /** A POSIX shell script (`sh -e`). */
  readonly script: string;
  /** The step uses sudo: the runner's user has it on GitHub, the test's user does not, so root runs it. */
  readonly root: boolean;
  readonly env: Readonly<Record<string, string>>;
}

export interface GithubJob {
  readonly target: string;
  readonly shard: string;
  /** Whether the image cache was restored (`steps.images.outputs.cache-hit`). */
  readonly cacheHit: boolean;
}

interface GithubStep {
  name?: string;
  uses?: string;
  run?: string;
  if?: string;
  env?: Record<string, string>;
}

/** The expressions the recipe's `if:` uses, joined by `&&`; anything else is refused, so a new one is handled here first. */
function holds(condition: string, job: GithubJob): boolean {
  return condition.split('&&').every((term) => {
    const t = term.trim();
    if (t === 'always()') return true;
    const m = /^([\w.-]+)\s*(==|!=)\s*'([^']*)'$/.exec(t);
    if (!m) throw new Error(`examples/ci/github-actions.yml: the package test cannot evaluate the condition ${JSON.stringify(t)}`);
    const values: Record<string, string> = { 'matrix.target': job.target, 'matrix.shard': job.shard, 'steps.images.outputs.cache-hit': String(job.cacheHit) };
    const value = values[m[1]!];
    if (value === undefined) throw new Error(`examples/ci/github-actions.yml: the package test knows no value for ${m[1]}`);
    return (value === m[3]) === (m[2] === '==');
  });
}

function substitute(text: string, values: Readonly<Record<string, string>>, file: string): string {
  return text.replace(/\$\{\{\s*([\w.-]+)\s*\}\}/g, (_, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`${file}: the package test knows no value for \${{ ${name} }}`);
    return value;
  });
}

/** The run steps of the GitHub Actions job `hil` for one matrix entry, in order. */
export function githubRunSteps(yamlText: string, job: GithubJob): RecipeStep[] {
  const doc = parse(yamlText) as { jobs?: Record<string, { steps?: GithubStep[] }> };
  const steps = doc.jobs?.hil?.steps;
  if (!steps?.length) throw new Error('examples/ci/github-actions.yml: no steps in jobs.hil');
  const values = { 'matrix.target': job.target, 'matrix.shard': job.shard };
  return steps.flatMap((s, i) => {
    if (s.run === undefined || (s.if !== undefined && !holds(s.if, job))) return [];
    const name = substitute(s.name ?? s.run.split('\n')[0]!, values, 'examples/ci/github-actions.yml');
    return [{ name: name || `step ${i + 1}`, script: substitute(s.run, values, 'examples/ci/github-actions.yml'), root: /(^|[\s;&|(])sudo\s/.test(s.run), env: s.env ?? {} }];
  });
}

/** A GitLab CI job's `before_script` then `script`, one step each, for node `index` of its `parallel` jobs. */
export function gitlabJobSteps(yamlText: string, jobName: string, index: number): RecipeStep[] {
  const doc = parse(yamlText) as Record<string, { extends?: string; variables?: Record<string, string>; parallel?: number; before_script?: string[]; script?: string[] }>;
  const own = doc[jobName];
  if (!own) throw new Error(`examples/ci/gitlab-ci.yml: no job ${jobName}`);
  const base = own.extends ? doc[own.extends] : undefined;
  if (own.extends && !base) throw new Error(`examples/ci/gitlab-ci.yml: ${jobName} extends ${own.extends}, which is not there`);
  const job = { ...base, ...own, variables: { ...base?.variables, ...own.variables } };
  const total = job.parallel ?? 1;
  if (index < 1 || index > total) throw new Error(`examples/ci/gitlab-ci.yml: ${jobName} runs ${total} parallel jobs, not a job ${index}`);
  const env = { ...job.variables, CI_NODE_INDEX: String(index), CI_NODE_TOTAL: String(total) };
  return (['before_script', 'script'] as const).flatMap((key) => {
    const lines = job[key] ?? [];
    return lines.length ? [{ name: `${jobName} ${key}`, script: lines.join('\n'), root: false, env }] : [];
  });
}
