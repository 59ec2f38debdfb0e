/**
 * What the writer's stream requests are checked against, and what it answers about its streams.
 * The writer (`feed-writer.ts`) owns the streams, the one open now and the ids of those aborted,
 * and changes them only as its requests are laid into a group; these read them: whether a stream
 * may be opened, or written, sealed or aborted under an epoch, whether a batch's expected seq is
 * the next one, a stream's status, and the acknowledged records of the open stream.
 *
 * @example
 * const open = checkWritable(id, epoch, 'append', streams);
 * checkSeq(open, expectedSeq);
 */
import { StreamStackError } from '../../errors.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import type { RecordData } from '../../storage/records.js';
import type { Wal } from '../../storage/wal.js';
import type { OpenStream } from '../opening/feed-recovery.js';
import type { PublishedState } from './published-state.js';

export type StreamStatus =
  | {
      readonly state: 'open';
      readonly epoch: number;
      readonly openedAt: number;
      readonly message?: string;
      readonly acknowledged: number;
    }
  | { readonly state: 'sealed'; readonly commit: CommitRecord }
  | { readonly state: 'aborted' }
  | { readonly state: 'unknown' };

/** A feed's streams as the writer holds them now. */
export interface Streams {
  readonly open: OpenStream | undefined;
  readonly aborted: ReadonlySet<string>;
  /** The published commits, which say what each sealed stream was sealed as. */
  readonly published: PublishedState;
}

/**
 * The status of stream `id`. Sealed is known from the published commits; open, aborted or
 * unknown only while the WAL can be trusted, which `assertKnown` checks.
 */
export function streamStatusOf(id: string, streams: Streams, assertKnown: () => void): StreamStatus {
  const commit = streams.published.commitOfStream(id);
  if (commit !== undefined) return { state: 'sealed', commit: streams.published.commits.at(commit) };
  assertKnown();
  const open = streams.open;
  if (open?.id === id) {
    return {
      state: 'open',
      epoch: open.epoch,
      openedAt: open.openedAt,
      ...(open.message === undefined ? {} : { message: open.message }),
      acknowledged: open.records.length,
    };
  }
  return streams.aborted.has(id) ? { state: 'aborted' } : { state: 'unknown' };
}

/** The acknowledged records of the open stream `open`, from seq `fromSeq` on, when it is stream `id`. */
export async function openStreamRecords(
  wal: Wal,
  open: OpenStream | undefined,
  id: string,
  fromSeq: number,
): Promise<{ seq: number; record: RecordData }[]> {
  if (!open || open.id !== id) return [];
  // The list is read before awaiting: batches acknowledged meanwhile are not part of this
  // read, and must not shift the seqs of the records that are.
  const firstSeq = Math.max(1, fromSeq);
  const locations = open.records.slice(firstSeq - 1);
  const records = await wal.readRecords(locations);
  return records.map((record, index) => ({ seq: firstSeq + index, record }));
}

/** Fails with `STREAM_OPEN` while stream `open` is open: a feed has one open stream at a time. */
export function checkNoneOpen(open: OpenStream | undefined): void {
  if (open) {
    throw new StreamStackError('STREAM_OPEN', `stream ${open.id} is still open; seal or abort it first`, {
      details: { stream: open.id },
    });
  }
}

/** The open stream `id`, checked for a write (`action`) by the owner of the lease's epoch `epoch`. */
export function checkWritable(
  id: string,
  epoch: number,
  action: 'append' | 'seal' | 'abort',
  streams: Streams,
): OpenStream {
  const open = streams.open;
  if (!open || open.id !== id) {
    const sealedAs = streams.published.commitOfStream(id);
    if (sealedAs !== undefined) {
      throw new StreamStackError('STREAM_SEALED', `stream ${id} is sealed`, {
        details: { stream: id, commit: sealedAs },
      });
    }
    throw new StreamStackError(
      'STREAM_NOT_FOUND',
      streams.aborted.has(id) ? `stream ${id} was aborted` : `no open stream ${id} on this feed`,
      {
        details: { stream: id },
      },
    );
  }
  if (action === 'append' && open.epoch !== epoch) {
    // A new owner decides what happens to the stream it inherited: seal what is durable, or
    // abort. Appending to it would mix two owners' batches in one stream.
    throw new StreamStackError(
      'FENCED',
      `stream ${id} was opened under epoch ${open.epoch}; the owner of epoch ${epoch} may only seal or abort it`,
      {
        details: { stream: id, streamEpoch: open.epoch, epoch },
      },
    );
  }
  return open;
}

/** Fails with `SEQ_MISMATCH` when a batch expected seq `expectedSeq`, and the open stream's next is another. */
export function checkSeq(open: OpenStream, expectedSeq: number | undefined): void {
  if (expectedSeq !== undefined && expectedSeq !== open.nextSeq) {
    throw new StreamStackError(
      'SEQ_MISMATCH',
      `stream ${open.id} expected seq ${expectedSeq} but the next seq is ${open.nextSeq}`,
      {
        details: { stream: open.id, expected: expectedSeq, actual: open.nextSeq },
      },
    );
  }
}
