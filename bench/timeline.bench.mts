/**
 * What the device timeline's recording costs a HIL suite: the same specs run with the recording
 * off and on (FLEETLAB_HIL_TIMELINE=off / on-failure), alternating so that the machine's drift
 * (another run, a cache warming up) falls on both alike. Prints each run's wall time, the
 * median of each mode, the ratio on/off and the spread within each mode, which is the noise the
 * ratio has to be read against. Asserts nothing.
 *
 *   npx tsx bench/timeline.bench.mts [--rounds N] [--project sim] [spec files or --grep ...]
 */
import { spawnSync } from 'node:child_process';

const argv = process.argv.slice(2);
const take = (name: string, fallback: string) => {
  const i = argv.indexOf(name);
  if (i < 0) return fallback;
  const [, value] = argv.splice(i, 2);
  return value ?? fallback;
};
const rounds = Number(take('--rounds', '3'));
const project = take('--project', 'sim');
const modes = ['off', 'on-failure'] as const;
const times: Record<(typeof modes)[number], number[]> = { off: [], 'on-failure': [] };

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const spread = (xs: number[]) => (Math.max(...xs) - Math.min(...xs)) / median(xs);

for (let round = 0; round < rounds; round++) {
  // Each round starts with the other mode than the one before, so neither always goes first.
  const order = round % 2 === 0 ? modes : [...modes].reverse();
  for (const mode of order) {
    const started = performance.now();
    const run = spawnSync('node', ['hil/run.mjs', `--project=${project}`, '--reporter=dot', ...argv], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, FLEETLAB_HIL_TIMELINE: mode } });
    const seconds = (performance.now() - started) / 1000;
    times[mode].push(seconds);
    console.log(`round ${round + 1} ${mode.padEnd(10)} ${seconds.toFixed(1).padStart(7)} s${run.status ? `   (exit ${run.status})` : ''}`);
  }
}
for (const mode of modes) console.log(`${mode.padEnd(10)} median ${median(times[mode]).toFixed(1)} s, spread ${(spread(times[mode]) * 100).toFixed(0)}% over ${rounds} runs`);
console.log(`recording on / off: ${(median(times['on-failure']) / median(times.off)).toFixed(3)}x`);
