// `pnpm bench:compare <other checkout> <suite…>`: runs each suite in another checkout of the
// repository (built, e.g. a worktree of an older commit) and in this one, alternately, round after
// round, and prints each case's rate here against there as a ratio (medians over the rounds).
// Alternating puts the same load from elsewhere on the machine on both, so a refactor's cost shows
// as a ratio below 1 even where absolute rates move from run to run. The suites' own settings come
// from the environment as usual (e.g. STREAMSTACK_BENCH_SCALE_RECORDS=1000000); `rounds` from
// STREAMSTACK_BENCH_COMPARE_ROUNDS (2 by default).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.resolve(fileURLToPath(new URL('..', import.meta.url)));
const [other, ...suites] = process.argv.slice(2).filter((argument) => argument !== '--');
if (!other || suites.length === 0) {
  console.error('usage: pnpm bench:compare <other checkout> <suite…>');
  process.exit(2);
}
const there = path.resolve(other);
const rounds = Number(process.env.STREAMSTACK_BENCH_COMPARE_ROUNDS ?? 2);

/** Runs `suite` in `checkout` and returns its report (the JSON its harness writes). */
function runSuite(checkout, suite) {
  const run = spawnSync(process.execPath, ['bench/run.mjs', suite], {
    cwd: checkout,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  if (run.status !== 0) throw new Error(`${suite} failed in ${checkout} (exit ${run.status})`);
  return JSON.parse(fs.readFileSync(path.join(checkout, 'bench', 'results', `${suite}.json`), 'utf8'));
}

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};

for (const suite of suites) {
  const rates = { there: new Map(), here: new Map() };
  for (let round = 0; round < rounds; round++) {
    for (const [side, checkout] of [
      ['there', there],
      ['here', here],
    ]) {
      process.stderr.write(`round ${round + 1} of ${rounds}: ${suite} in ${checkout}\n`);
      const report = runSuite(checkout, suite);
      for (const entry of report.cases) {
        const list = rates[side].get(entry.name) ?? [];
        list.push(entry.itemsPerSecond ?? entry.opsPerSecond);
        rates[side].set(entry.name, list);
      }
    }
  }
  console.log(`\n== ${suite}: this checkout against ${there} (${rounds} alternating rounds; ratio > 1 is faster here)`);
  const names = [...rates.here.keys()].filter((name) => rates.there.has(name));
  const width = Math.max(...names.map((name) => name.length));
  const ratios = [];
  for (const name of names) {
    const ratio = median(rates.here.get(name)) / median(rates.there.get(name));
    ratios.push(ratio);
    console.log(`  ${name.padEnd(width)}  ${ratio.toFixed(2)}×`);
  }
  if (ratios.length > 0) {
    console.log(
      `  slowest case here against there: ${Math.min(...ratios).toFixed(2)}×; median ${median(ratios).toFixed(2)}×`,
    );
  }
}
