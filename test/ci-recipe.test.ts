/**
 * How the package test reads the CI recipes of examples/ci/ (test/package/ci-recipe.ts), on
 * the recipes themselves: which steps a job runs, with what, and as whom.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { githubRunSteps, gitlabJobSteps } from './package/ci-recipe.js';

const github = readFileSync(join(import.meta.dirname, '..', 'examples/ci/github-actions.yml'), 'utf8');
const gitlab = readFileSync(join(import.meta.dirname, '..', 'examples/ci/gitlab-ci.yml'), 'utf8');

describe('the GitHub Actions recipe', () => {
  it('a container job without the image cache: provision, install, load, build the image as root, test its shard, save the images', () => {
    const steps = githubRunSteps(github, { target: 'container', shard: '2/2', cacheHit: false });
    expect(steps.map((s) => [s.name, s.root])).toEqual([
      ["Provision the tools fleetlab's targets run", true],
      ['npm ci', false],
      ['Load them into dockerd', false],
      ["The container target's image (its debootstrap base needs root; a no-op once cached)", true],
      ['fleetlab test (container, shard 2/2)', false],
      ["Save fleetlab's images for the next run", false],
    ]);
    expect(steps[4]!.script).toBe('npx fleetlab test --target container --shard 2/2');
  });

  it('a sim job with the cache restored skips the image steps; actions (uses:) are never run', () => {
    const names = githubRunSteps(github, { target: 'sim', shard: '1/2', cacheHit: true }).map((s) => s.name);
    expect(names).toEqual(["Provision the tools fleetlab's targets run", 'npm ci', 'Load them into dockerd', 'fleetlab test (sim, shard 1/2)']);
  });

  it('refuses a condition or an expression it cannot evaluate, rather than guessing', () => {
    const odd = github.replace("if: matrix.target == 'container'", "if: runner.os == 'Linux'");
    expect(() => githubRunSteps(odd, { target: 'container', shard: '1/2', cacheHit: false })).toThrow(/cannot evaluate the condition "runner.os == 'Linux'"|knows no value for runner.os/);
    const expr = github.replace('--shard ${{ matrix.shard }}', '--shard ${{ matrix.shards }}');
    expect(() => githubRunSteps(expr, { target: 'sim', shard: '1/2', cacheHit: true })).toThrow(/knows no value for \$\{\{ matrix.shards \}\}/);
  });
});

describe('the GitLab CI recipe', () => {
  it('a parallel job: the template\'s before_script and script, the job\'s variables and its node index', () => {
    const steps = gitlabJobSteps(gitlab, 'hil:sim', 2);
    expect(steps.map((s) => s.name)).toEqual(['hil:sim before_script', 'hil:sim script']);
    expect(steps[0]!.script).toMatch(/^npm ci /);
    expect(steps[1]!.script).toBe('npx fleetlab test --target "$TARGET" --shard "$CI_NODE_INDEX/$CI_NODE_TOTAL"');
    expect(steps[1]!.env).toEqual({ TARGET: 'sim', CI_NODE_INDEX: '2', CI_NODE_TOTAL: '2' });
    expect(steps.every((s) => !s.root)).toBe(true);
  });

  it('refuses a job or a node that is not there', () => {
    expect(() => gitlabJobSteps(gitlab, 'hil:qemu', 1)).toThrow(/no job hil:qemu/);
    expect(() => gitlabJobSteps(gitlab, 'hil:sim', 3)).toThrow(/runs 2 parallel jobs, not a job 3/);
  });
});
