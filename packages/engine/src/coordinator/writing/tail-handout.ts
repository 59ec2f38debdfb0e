/**
 * The writer's side and the read-only view's side of a follower's unsealed tail (the bytes are in
 * `storage/history-tail.ts`, the follower's copying in `opening/follower-tail-copy.ts`). The
 * writer hands out the durable groups of its active segment, waiting a while for some when there
 * are none yet, and those of a segment it just finished while that is still whole locally. The
 * follower's read-only view takes the commits its copy gained: indexes and publishes them, and
 * opens the next segment in place when the active one is finished.
 *
 * @example
 * const { tail } = await handOutTail(parties, { base, from, bytesMax: 4 << 20, waitMs: 1000 });
 * const taken = await takeCopiedTail(viewParties, base, end, false);
 */
import type { Kernels } from '../../kernels/kernels.js';
import { segmentHeaderBytes } from '../../limits.js';
import { fingerprintKey } from '../../storage/commit-run.js';
import { segmentFileName, segmentSuffix } from '../../storage/feed-layout.js';
import type { History } from '../../storage/history-log.js';
import { catchUpCommits, readTailGroups, type TailGroups } from '../../storage/history-tail.js';
import type { IndexedRecord } from '../opening/derived-indexes.js';
import type { PublishedRun } from './publish-indexer.js';
import type { PublishedState } from './published-state.js';

/** What the tail's two sides need of a feed writer. */
export interface TailParties {
  readonly kernels: Kernels;
  readonly history: History;
  readonly published: PublishedState;
  /** Runs a read of sealed history inside the feed's read gate: no merge closes its file meanwhile. */
  holdReads<T>(read: () => Promise<T>): Promise<T>;
  /** Publishes a commit the view took: into the history's commit list, the indexes and the watermark. */
  take(run: PublishedRun<IndexedRecord>, types: ReadonlySet<string>): void;
  /** Where the bytes of segment `base` that may be handed out end (a replicated feed's stored slots). */
  visibleEnd(base: number): number;
}

/** Where a follower asks for the tail from, and how long it waits for one. */
export interface TailRequest {
  /** The segment the follower copies: the writer's active one, or one it just finished. */
  readonly base: number;
  readonly from: number;
  readonly bytesMax: number;
  /** How long to wait for a group when there is none after `from` yet (0: answer at once). */
  readonly waitMs: number;
  readonly signal?: AbortSignal;
}

/**
 * The durable groups of the active history segment from `from` on (`readTailGroups`), when the
 * segment is based at `base`; `base` says which segment is active when it is another.
 */
export async function handOutTail(
  writer: TailParties,
  request: TailRequest,
): Promise<{ base: number | undefined; tail?: TailGroups }> {
  const { base, from, bytesMax, waitMs, signal } = request;
  const active = () => writer.history.segments.active;
  const visible = () => Math.min(active()!.durableEnd, writer.visibleEnd(base));
  if (waitMs > 0 && active()?.header.base === base && visible() <= Math.max(from, segmentHeaderBytes)) {
    const waited = AbortSignal.timeout(waitMs);
    await writer.published
      .waitForCommitAfter(writer.published.watermark.commit, signal ? AbortSignal.any([signal, waited]) : waited)
      .catch((error) => {
        // A wait cut short (its time is up, or the caller went) answers with what there is.
        if (!waited.aborted && !signal?.aborted) throw error;
      });
    // A commit is published as its group's slot is stored, in the same turn as the visible end
    // moves past it: once the promise callbacks of that turn ran, both have.
    await new Promise((resolve) => setImmediate(resolve));
  }
  const segment = active();
  if (segment && segment.header.base !== base) {
    const finished = await finishedTail(writer, base, from, bytesMax);
    if (finished) return { base, tail: finished };
  }
  if (!segment || segment.header.base !== base) return { base: segment?.header.base };
  return { base, tail: await readTailGroups(writer.kernels, segment, from, bytesMax, false, writer.visibleEnd(base)) };
}

/**
 * The groups from `from` of the finished segment at `base`, its `SegmentEnd` last, while it is
 * whole here: a follower takes a segment the writer just finished without waiting for its
 * upload. Undefined once it is evicted (object storage has it), trimmed or merged away, or when
 * it has no `SegmentEnd` to give (a crash tore it; the next segment shows it is whole): the
 * follower then has it from object storage.
 */
async function finishedTail(
  writer: TailParties,
  base: number,
  from: number,
  bytesMax: number,
): Promise<TailGroups | undefined> {
  const { segments, store } = writer.history;
  // In the read gate, no merge closes the segment's file; tracked by the store, no eviction cuts it.
  return writer.holdReads(async () => {
    const segment = segments.segments.find((candidate) => candidate.header.base === base);
    if (!segment || segment === segments.active) return undefined;
    const tail = await store.whileLocal(segmentFileName(base, segmentSuffix.history), () =>
      readTailGroups(writer.kernels, segment, from, bytesMax, true, writer.visibleEnd(base)),
    );
    return tail && (tail.end > from || tail.next) ? tail : undefined;
  });
}

/**
 * Takes the commits the view's active segment (when based at `base`) gained up to `end` (the
 * follower wrote them there, copied from the writer). When the active segment is finished and
 * `base` is the next one's, opens that segment first. One call at a time. Returns how many it
 * took, or undefined when the view cannot take them (another segment; or, `replaced`, the
 * segment's file was made anew since the view opened it): a newer view must be opened.
 */
export async function takeCopiedTail(
  view: TailParties,
  base: number,
  end: number,
  replaced: boolean,
): Promise<number | undefined> {
  const segments = view.history.segments;
  if (segments.active?.header.base === base) {
    if (replaced) return undefined;
  } else if (segments.activeTrailer?.nextBase === base) {
    segments.adoptNext();
  } else {
    return undefined;
  }
  const { commits } = await catchUpCommits(view.kernels, view.history, end);
  for (const commit of commits) {
    const run = await view.history.runs.readRun(commit);
    view.take(
      {
        commit,
        records: run.entries,
        runStart: 0,
        entryOffsets: run.entryOffsets,
        fingerprints: run.entries.map((entry) => fingerprintKey(entry.fingerprint)),
      },
      typesOf(run.entries),
    );
  }
  return commits.length;
}

/** The types a run's records carry. */
function typesOf(records: readonly { readonly type?: string }[]): Set<string> {
  const types = new Set<string>();
  for (const record of records) if (record.type !== undefined) types.add(record.type);
  return types;
}
