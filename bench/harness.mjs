// The benchmark harness behind `pnpm bench`: benchmark.js runs each case, and every suite reports
// ratios against a peer or the machine's limit measured in the same run, because absolute figures
// on shared, noisy machines mean little.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Benchmark from 'benchmark';

const resultsDirectory = new URL('./results/', import.meta.url);

/** Seconds benchmark.js may spend sampling one case; short, because suites run many cases. */
const caseSecondsMax = Number(process.env.STREAMSTACK_BENCH_SECONDS ?? 1.5);
/** Fewest samples per case, so the relative margin of error means something. */
const caseSamplesMin = 5;

export function machine() {
  const cpus = os.cpus();
  return {
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    memoryBytes: os.totalmem(),
    platform: `${os.platform()} ${os.release()}`,
    node: process.version,
  };
}

/** A positive number from environment variable `name`, or `fallback` when it is unset or empty. */
export function envNumber(name, fallback) {
  const text = process.env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text);
  if (!(value > 0)) throw new Error(`${name} must be a positive number, not ${JSON.stringify(text)}`);
  return value;
}

/** The value below which `fraction` of the sorted `values` lie. */
export function quantile(sorted, fraction) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))];
}

/** The middle of `values` (the mean of the two middle ones for an even count). */
export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/** Student's t at 95% for 1…10 degrees of freedom; 1.96 beyond. */
const tValues = [12.71, 4.3, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23];

/** The relative margin of error (95%) of the mean of `values`, in percent, as benchmark.js reports it. */
export function relativeMargin(values) {
  if (values.length < 2) return 0;
  const mean = values.reduce((sum, value) => sum + value, 0) / values.length;
  const variance = values.reduce((sum, value) => sum + (value - mean) ** 2, 0) / (values.length - 1);
  const t = tValues[values.length - 2] ?? 1.96;
  return (100 * t * Math.sqrt(variance / values.length)) / mean;
}

/**
 * Runs `workers` loops of `operation` for `seconds`. Returns operations per second, each
 * operation's latency (ms, sorted), and the CPU the main thread (event-loop utilization) and the
 * whole process spent per operation (µs).
 */
export async function timedConcurrent(seconds, workers, operation) {
  const deadline = performance.now() + seconds * 1000;
  const latencies = [];
  const loop = performance.eventLoopUtilization();
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      while (performance.now() < deadline) {
        const begun = performance.now();
        await operation(worker);
        latencies.push(performance.now() - begun);
      }
    }),
  );
  const elapsedMs = performance.now() - started;
  const { active } = performance.eventLoopUtilization(loop);
  const used = process.cpuUsage(cpu);
  latencies.sort((a, b) => a - b);
  return {
    perSecond: latencies.length / (elapsedMs / 1000),
    latencies,
    mainThreadMicros: (active * 1000) / latencies.length,
    processMicros: (used.user + used.system) / latencies.length,
  };
}

export class Suite {
  constructor(name) {
    this.name = name;
    this.cases = [];
    this.ratios = [];
  }

  /**
   * Measures `fn` (sync, or async when `options.async`) and records operations per second and,
   * when given, items per operation (`items`) and bytes per operation (`bytes`).
   */
  async measure(name, fn, options = {}) {
    const benchmark = await new Promise((resolve, reject) => {
      const bench = new Benchmark(name, {
        defer: Boolean(options.async),
        fn: options.async ? (deferred) => fn().then(() => deferred.resolve(), reject) : fn,
        maxTime: options.seconds ?? caseSecondsMax,
        minSamples: options.minSamples ?? caseSamplesMin,
        onComplete: () => resolve(bench),
        onError: (event) => reject(event.target.error),
      });
      bench.run({ async: true });
    });
    const opsPerSecond = benchmark.hz;
    const entry = {
      name,
      opsPerSecond,
      itemsPerSecond: options.items ? opsPerSecond * options.items : undefined,
      bytesPerSecond: options.bytes ? opsPerSecond * options.bytes : undefined,
      relativeMarginPercent: benchmark.stats.rme,
      samples: benchmark.stats.sample.length,
    };
    this.cases.push(entry);
    process.stderr.write(`  ${name}: ${formatRate(entry)}\n`);
    return entry;
  }

  /** Records `value` (a ratio, or a rate) against a target: met when value >= target. */
  ratio(name, value, target, unit = '×') {
    const entry = { name, value, target, unit, met: target === undefined ? undefined : value >= target };
    this.ratios.push(entry);
    return entry;
  }

  finish() {
    fs.mkdirSync(resultsDirectory, { recursive: true });
    const report = {
      suite: this.name,
      date: new Date().toISOString(),
      machine: machine(),
      cases: this.cases,
      ratios: this.ratios,
    };
    const file = new URL(`${this.name}.json`, resultsDirectory);
    fs.writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
    printTable(report);
    process.stdout.write(`results: ${path.relative(process.cwd(), file.pathname)}\n\n`);
    return report;
  }
}

function formatNumber(value) {
  if (value >= 1e9) return `${(value / 1e9).toFixed(2)}G`;
  if (value >= 1e6) return `${(value / 1e6).toFixed(2)}M`;
  if (value >= 1e3) return `${(value / 1e3).toFixed(1)}k`;
  return value.toFixed(value < 10 ? 2 : 0);
}

function formatRate(entry) {
  const parts = [`${formatNumber(entry.opsPerSecond)} op/s`];
  if (entry.itemsPerSecond) parts.push(`${formatNumber(entry.itemsPerSecond)} items/s`);
  if (entry.bytesPerSecond) parts.push(`${formatNumber(entry.bytesPerSecond)}B/s`);
  parts.push(`±${entry.relativeMarginPercent.toFixed(1)}%`);
  return parts.join('  ');
}

function printTable(report) {
  const out = process.stdout;
  out.write(`\n== ${report.suite} (${report.machine.cpu}, ${report.machine.cores} cores, ${report.machine.node})\n`);
  const width = Math.max(...report.cases.map((entry) => entry.name.length), 10);
  for (const entry of report.cases) out.write(`  ${entry.name.padEnd(width)}  ${formatRate(entry)}\n`);
  if (report.ratios.length > 0) {
    out.write('  ratios and targets:\n');
    const ratioWidth = Math.max(...report.ratios.map((entry) => entry.name.length));
    for (const entry of report.ratios) {
      const value = entry.unit === '×' ? `${entry.value.toFixed(2)}×` : `${formatNumber(entry.value)} ${entry.unit}`;
      const target =
        entry.target === undefined
          ? ''
          : `  target ≥ ${entry.unit === '×' ? `${entry.target}×` : `${formatNumber(entry.target)} ${entry.unit}`}  ${entry.met ? 'met' : 'NOT MET'}`;
      out.write(`    ${entry.name.padEnd(ratioWidth)}  ${value}${target}\n`);
    }
  }
}
