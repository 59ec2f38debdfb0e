/**
 * Progress bars on stderr for the commands a user waits for (docs/cli.md, Progress): how much is
 * done of the total, the rate and the time left. Only when stderr is a terminal and `--quiet` was
 * not given: in a pipe or a log a bar would be noise, so the command then writes nothing there.
 */

import type { Progress, ProgressUnit } from '@streamstack/engine';
import cliProgress from 'cli-progress';
import { Option } from 'commander';
import { progressFps } from './limits.js';

/** The `--quiet` flag every command with a bar takes. */
export function quietOption(): Option {
  return new Option('-q, --quiet', 'no progress bar on stderr (there is none either when stderr is not a terminal)');
}

/** A bar for one command: `update` as the work reports, `stop` once it ends or fails. */
export interface ProgressBar {
  update(progress: Pick<Progress, 'done' | 'unit'> & { total?: number | undefined }): void;
  stop(): void;
}

const byteUnits = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** `value` in `unit`, short: `1.2M records`, `340 MiB`. */
export function amount(value: number, unit: ProgressUnit): string {
  if (unit === 'bytes') {
    let scaled = value;
    let at = 0;
    while (scaled >= 1024 && at < byteUnits.length - 1) {
      scaled /= 1024;
      at++;
    }
    return `${at === 0 ? scaled : scaled.toFixed(1)} ${byteUnits[at]}`;
  }
  const short =
    value >= 1e6 ? `${(value / 1e6).toFixed(1)}M` : value >= 1e4 ? `${(value / 1e3).toFixed(1)}k` : String(value);
  return `${short} records`;
}

/** Seconds as `1m05s` or `7s`. */
function duration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const whole = Math.ceil(seconds);
  return whole >= 60 ? `${Math.floor(whole / 60)}m${String(whole % 60).padStart(2, '0')}s` : `${whole}s`;
}

/**
 * A bar labelled `label` on stderr, or undefined when there must be none (`quiet`, or stderr is
 * not a terminal). Without a total (input from a pipe), it shows what is done and the rate.
 */
export function progressBar(label: string, quiet: boolean | undefined): ProgressBar | undefined {
  if (quiet || !process.stderr.isTTY) return undefined;
  let bar: cliProgress.SingleBar | undefined;
  // The rate is measured from the first report on, over what was done since: work done before
  // it (a bar that starts late) would make the first rates absurd.
  let started = 0;
  let firstDone = 0;
  let last: { done: number; total: number | undefined; unit: ProgressUnit } | undefined;
  const payload = () => {
    const { done, total, unit } = last!;
    const seconds = (performance.now() - started) / 1000;
    const rate = seconds > 0 ? (done - firstDone) / seconds : 0;
    return {
      label,
      // Not `value` and `total`: cli-progress fills those in itself, unformatted.
      doneText: amount(done, unit),
      totalText: total === undefined ? '' : amount(total, unit),
      rate: `${amount(Math.round(rate), unit)}/s`,
      left:
        total === undefined
          ? ''
          : duration(done >= total ? 0 : rate > 0 ? (total - done) / rate : Number.POSITIVE_INFINITY),
    };
  };
  // The bar hides the cursor and turns line wrapping off while it draws: a Ctrl-C or a kill
  // stops it first, restoring both, and is then raised again to end the command as it would have.
  const onSignal = (signal: NodeJS.Signals) => {
    stop();
    process.kill(process.pid, signal);
  };
  function stop() {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    bar?.stop();
  }
  return {
    update(progress) {
      const total = progress.total;
      last = { done: progress.done, total, unit: progress.unit };
      if (!bar) {
        started = performance.now();
        firstDone = progress.done;
        bar = new cliProgress.SingleBar(
          {
            stream: process.stderr,
            format:
              total === undefined
                ? '{label} {doneText} | {rate}'
                : '{label} [{bar}] {percentage}% | {doneText} of {totalText} | {rate} | {left} left',
            hideCursor: true,
            // The bar is drawn when it starts and when it stops, so even a run shorter than a
            // frame shows it, ending at its last value.
            fps: progressFps,
          },
          cliProgress.Presets.shades_classic,
        );
        process.once('SIGINT', onSignal);
        process.once('SIGTERM', onSignal);
        // A total of 0 (nothing to do) is shown as done, not as 0 of 0.
        bar.start(Math.max(1, total ?? 1), total === 0 ? 1 : progress.done, payload());
      }
      if (total !== undefined) bar.setTotal(Math.max(1, total));
      bar.update(total === 0 ? 1 : progress.done, payload());
    },
    stop,
  };
}

/**
 * Runs `work` with a bar that `work` feeds through the callback it is given (undefined when there
 * is no bar, so the engine is not asked for progress at all), and stops the bar however it ends.
 */
export async function withProgress<T, P extends Progress>(
  label: string,
  quiet: boolean | undefined,
  work: (onProgress: ((progress: P) => void) | undefined) => Promise<T>,
): Promise<T> {
  const bar = progressBar(label, quiet);
  try {
    return await work(bar ? (progress) => bar.update(progress) : undefined);
  } finally {
    bar?.stop();
  }
}
