/**
 * Idempotent producers (the Durable Streams protocol, §5.2.1): `Producer-Id`, `Producer-Epoch`
 * and `Producer-Seq` on an append, all three or none. Epochs are the client's own (a producer
 * raises its epoch when it restarts), so they are kept apart from StreamStack's lease epochs,
 * which the server issues. Per producer the server keeps the highest epoch and the last seq of
 * it; the state is stored with each append in its commit's message (durable-stream-state.ts),
 * so a duplicate is still recognised after a restart.
 *
 * Checks, in the protocol's order: an epoch below the producer's is fenced (`FENCED`, 403, with
 * the current epoch); a higher epoch must start at seq 0 (`INVALID_ARGUMENT`); within the
 * epoch a seq at or below the last is a duplicate (answered 204, nothing written), the next one
 * is accepted, and one past it is a gap (`SEQ_MISMATCH`, 409, with the expected and received
 * seq). A producer the stream has never seen starts at seq 0, in any epoch.
 */
import { StreamStackError } from '@streamstack/engine';
import { dsHeader, protocolInteger, singleHeader } from './durable-stream-protocol.js';

/** One producer's append. */
export interface ProducerTuple {
  readonly id: string;
  readonly epoch: number;
  readonly seq: number;
}

/** What the server keeps per producer. */
export interface ProducerState {
  readonly epoch: number;
  readonly lastSeq: number;
}

/** Longest `Producer-Id`, in characters: it is stored in every commit message the producer writes. */
export const producerIdCharactersMax = 1024;

type Headers = Record<string, string | string[] | undefined>;

/** The producer headers of a request, or undefined when there are none. */
export function producerOf(headers: Headers): ProducerTuple | undefined {
  const id = singleHeader(headers, dsHeader.producerId);
  const epoch = singleHeader(headers, dsHeader.producerEpoch);
  const seq = singleHeader(headers, dsHeader.producerSeq);
  if (id === undefined && epoch === undefined && seq === undefined) return undefined;
  if (id === undefined || epoch === undefined || seq === undefined) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      'Producer-Id, Producer-Epoch and Producer-Seq are given together or not at all',
      {
        details: { header: id === undefined ? 'Producer-Id' : epoch === undefined ? 'Producer-Epoch' : 'Producer-Seq' },
      },
    );
  }
  if (id.length === 0 || id.length > producerIdCharactersMax) {
    throw new StreamStackError('INVALID_ARGUMENT', `Producer-Id is 1 to ${producerIdCharactersMax} characters`, {
      details: { header: 'Producer-Id' },
    });
  }
  return { id, epoch: protocolInteger(epoch, 'Producer-Epoch'), seq: protocolInteger(seq, 'Producer-Seq') };
}

/** The outcome of a producer's append that may go ahead: write it, or answer it as a duplicate. */
export type ProducerCheck = { readonly kind: 'accept' } | { readonly kind: 'duplicate'; readonly state: ProducerState };

/** Checks `tuple` against the producers' state; refusals throw (see the module comment). */
export function checkProducer(producers: ReadonlyMap<string, ProducerState>, tuple: ProducerTuple): ProducerCheck {
  const state = producers.get(tuple.id);
  if (!state || tuple.epoch > state.epoch) {
    if (tuple.seq === 0) return { kind: 'accept' };
    if (!state) throw gap(tuple, 0);
    const message = `producer ${tuple.id} starts epoch ${tuple.epoch} at seq ${tuple.seq}: a new epoch starts at seq 0`;
    throw new StreamStackError('INVALID_ARGUMENT', message, {
      details: { producer: tuple.id, epoch: tuple.epoch, seq: tuple.seq },
    });
  }
  if (tuple.epoch < state.epoch) {
    throw new StreamStackError(
      'FENCED',
      `producer ${tuple.id} writes with epoch ${tuple.epoch}, but epoch ${state.epoch} has taken over`,
      {
        details: { producer: tuple.id, producerEpoch: state.epoch, epoch: tuple.epoch },
      },
    );
  }
  if (tuple.seq <= state.lastSeq) return { kind: 'duplicate', state };
  if (tuple.seq === state.lastSeq + 1) return { kind: 'accept' };
  throw gap(tuple, state.lastSeq + 1);
}

function gap(tuple: ProducerTuple, expected: number): StreamStackError {
  return new StreamStackError('SEQ_MISMATCH', `producer ${tuple.id} sent seq ${tuple.seq}, expected ${expected}`, {
    details: { producer: tuple.id, expectedSeq: expected, receivedSeq: tuple.seq },
  });
}

/** True when `tuple` is exactly the append that closed the stream (its retry is a duplicate). */
export function isClosingAppend(closedBy: ProducerTuple | undefined, tuple: ProducerTuple | undefined): boolean {
  return (
    closedBy !== undefined &&
    tuple !== undefined &&
    closedBy.id === tuple.id &&
    closedBy.epoch === tuple.epoch &&
    closedBy.seq === tuple.seq
  );
}
