/**
 * `decodeManifests`, native and ts: a commit run's manifest entries decode into the same columns
 * from both kernel sets, batch by batch, and a decode begun by one set may be finished by the
 * other; the columns hold what the run was built from; damaged manifests fail alike, with the
 * same `CORRUPT` message, and neither set reads outside the run.
 *
 * Runs are built by the engine's own `buildCommitRun`, so the bytes are the format as written:
 * dense and compacted (sparse) runs, payloads new in the run and payloads stored earlier (in
 * another segment), every record flag, and varints of every width up to 2^53 - 1.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Kernels } from '../../packages/engine/src/kernels/kernels.js';
import {
  manifestCursor,
  manifestCursorSlots,
  manifestStop,
} from '../../packages/engine/src/kernels/manifest-columns.js';
import { buildCommitRun, type CommitRunInput } from '../../packages/engine/src/storage/commit-run.js';
import { FrameKind } from '../../packages/engine/src/storage/frame-kinds.js';
import { FrameBuilder, type ScannedFrame, scanFrames } from '../../packages/engine/src/storage/framing.js';
import type { PayloadLocation } from '../../packages/engine/src/storage/records.js';
import { decoderLayout, type RunColumns, RunColumnsDecoder } from '../../packages/engine/src/storage/run-columns.js';
import { oneShotRunInput } from '../support/commit-runs.js';
import { branchTally, encoder, expectSameOutcome, native, ts } from './both.js';

/** Bytes a frame holds at most: small, so a run of a few hundred records spans many manifest frames. */
const frameDataBytesMax = 2048;
/** Records a run holds: 1 to this many (fast-check's default would stop near 10). */
const runRecordsMax = 300;
/** Runs generated per property. */
const runs = 120;

/** Values at every varint width: 1 to 8 bytes, up to 2^53 - 1. */
const wideNat = fc.oneof(
  fc.integer({ min: 0, max: 127 }),
  fc.integer({ min: 128, max: 2 ** 14 - 1 }),
  fc.integer({ min: 2 ** 14, max: 2 ** 28 - 1 }),
  fc.integer({ min: 2 ** 28, max: 2 ** 42 }),
  fc.constantFrom(2 ** 49, Number.MAX_SAFE_INTEGER),
);

const text = fc.string({
  unit: fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom('a', 'b', 'Z', '0', '-', '.') },
    { weight: 1, arbitrary: fc.constantFrom('é', '€', '\u{1f600}') },
  ),
  maxLength: 24,
});

interface GeneratedRecord {
  payload: Uint8Array;
  /** Stored by an earlier run: the lookup finds it in another segment. */
  storedEarlier: boolean;
  timestamp: number;
  fingerprint?: Uint8Array;
  key?: string;
  version?: number;
  tombstone: boolean;
  type?: string;
  tags: string[];
}

const recordArb = (typePool: readonly string[]) =>
  fc.record({
    payload: fc.uint8Array({ maxLength: 48 }),
    storedEarlier: fc.boolean(),
    timestamp: wideNat,
    fingerprint: fc.option(fc.uint8Array({ minLength: 1, maxLength: 40 }), { nil: undefined }),
    key: fc.option(text, { nil: undefined }),
    version: fc.option(wideNat, { nil: undefined }),
    tombstone: fc.boolean(),
    type: fc.option(fc.constantFrom(...typePool), { nil: undefined }),
    tags: fc.array(text, { maxLength: 5 }),
  }) as fc.Arbitrary<GeneratedRecord>;

/** A run: its records, its type pool (more than 16 types at times), and, when compacted, its span. */
const runArb = fc.integer({ min: 1, max: 40 }).chain((types) =>
  fc.record({
    // The length is drawn first: fast-check would otherwise keep arrays near ten elements.
    records: fc
      .integer({ min: 1, max: runRecordsMax })
      .chain((length) =>
        fc.array(
          recordArb(Array.from({ length: types }, (_, index) => `type-${index}${index % 7 === 0 ? '-é' : ''}`)),
          { minLength: length, maxLength: length },
        ),
      ),
    compacted: fc.boolean(),
    spanGap: fc.integer({ min: 0, max: 2 ** 20 }),
    storedSegment: wideNat.filter((segment) => segment > 0),
    rowsMax: fc.integer({ min: 1, max: 400 }),
  }),
);

/** Builds the run as the engine writes one, and returns its bytes and frames. */
async function buildRun(run: RunShape) {
  const storedLocations = new Map<string, PayloadLocation>();
  const lookup = (payload: Uint8Array): PayloadLocation | undefined =>
    storedLocations.get(Buffer.from(payload).toString('hex'));
  run.records.forEach((record, index) => {
    if (!record.storedEarlier) return;
    storedLocations.set(Buffer.from(record.payload).toString('hex'), {
      segment: run.storedSegment,
      offset: index * 1_000_003,
      length: record.payload.length,
      crc: 0x9e3779b9 ^ index,
    });
  });
  // A compacted run keeps some seqs of a longer span: every record's seq ascends, with gaps.
  let seq = 0;
  const records: CommitRunInput['records'] = run.records.map((record, index) => {
    seq += run.compacted ? 1 + ((index * 7919 + run.spanGap) % 5) : 1;
    return { ...record, ...(run.compacted ? { seq } : {}) };
  });
  const builder = new FrameBuilder(frameDataBytesMax);
  const built = await buildCommitRun(
    native,
    builder,
    {
      commit: 7,
      stream: 's',
      parent: 6,
      firstPosition: 1000,
      openedAt: 1,
      sealedAt: 2,
      epoch: 1,
      oneShot: false,
      records,
      timestampDefault: 0,
      ...(run.compacted ? { span: seq + run.spanGap } : {}),
    },
    lookup,
    frameDataBytesMax,
  );
  const bytes = builder.finish(native).slice();
  const frames = scanFrames(native, bytes, 0, bytes.length);
  return { bytes, frames, commit: built.commit };
}

/** A one-shot commit's run of `records`, as the engine lays it, with frames of `frameBytes` at most. */
async function oneShotRun(records: CommitRunInput['records'], frameBytes: number) {
  const builder = new FrameBuilder(frameBytes);
  const { commit } = await buildCommitRun(native, builder, oneShotRunInput(records, 5), () => undefined, frameBytes);
  const bytes = builder.finish(native).slice();
  return { bytes, frames: scanFrames(native, bytes, 0, bytes.length), commit };
}

interface RunShape {
  records: GeneratedRecord[];
  compacted: boolean;
  spanGap: number;
  storedSegment: number;
  rowsMax: number;
}

/** Kernels that alternate between the two sets at every decode call: the cursor is the contract. */
function alternating(): Kernels {
  let calls = 0;
  return { ...ts, decodeManifests: (job) => ((calls++ & 1) === 0 ? native : ts).decodeManifests(job) };
}

/**
 * The native set, counting the calls that stopped for type room (`manifestStop`): a decoder's
 * type table starts small, so a run of many types makes the kernel stop and go on. (Tag room is
 * shared and large; its stops are checked on their own below.)
 */
function countingStops(stops: { types: number }): Kernels {
  return {
    ...native,
    decodeManifests(job) {
      native.decodeManifests(job);
      if (job.cursor[manifestCursor.stop] === manifestStop.typesFull) stops.types++;
    },
  };
}

/** Every batch of a run from `kernels`, or the error that stopped it. */
function decodeAll(
  kernels: Kernels,
  bytes: Uint8Array,
  frames: readonly ScannedFrame[],
  count: number,
  sparseLast: number | undefined,
  rowsMax: number,
): { batches: RunColumns[] } | { code: string; message: string } {
  try {
    const run = {
      start: 0,
      end: bytes.length,
      frames,
      count,
      firstPosition: 1000,
      ...(sparseLast === undefined ? {} : { sparseLast }),
    };
    const decoder = new RunColumnsDecoder(kernels, bytes, decoderLayout([run]), 'run');
    const batches: RunColumns[] = [];
    while (!decoder.done) batches.push(decoder.next(rowsMax));
    return { batches };
  } catch (error) {
    const { code, message } = error as { code: string; message: string };
    return { code, message };
  }
}

/** A batch's columns as plain values, for comparison. */
function plain(batch: RunColumns) {
  const { bytes, ...rest } = batch;
  return { ...rest, bytesLength: bytes.length };
}

describe('decodeManifests: native and ts agree', () => {
  it('decode every run the engine writes into the same columns, holding what was written', async () => {
    const tally = branchTally('manifest decode', [
      'compacted run',
      'payload stored earlier',
      'more than 16 types',
      'tags',
      'a version of 5 bytes or more',
      'several manifest frames in one batch',
      'a batch of one row',
      'a batch of hundreds of rows',
      'Rust stopped for type room',
    ]);
    await fc.assert(
      fc.asyncProperty(runArb, async (run) => {
        const { bytes, frames, commit } = await buildRun(run);
        const sparseLast = run.compacted ? commit.lastPosition : undefined;
        const fromTs = decodeAll(ts, bytes, frames, commit.entries, sparseLast, run.rowsMax);
        const stops = { types: 0 };
        const fromNative = decodeAll(countingStops(stops), bytes, frames, commit.entries, sparseLast, run.rowsMax);
        tally.hit('Rust stopped for type room', stops.types > 0);
        const fromBoth = decodeAll(alternating(), bytes, frames, commit.entries, sparseLast, run.rowsMax);
        expect('batches' in fromTs, JSON.stringify(fromTs)).toBe(true);
        if (!('batches' in fromTs) || !('batches' in fromNative) || !('batches' in fromBoth)) {
          expect(fromNative).toEqual(fromTs);
          return;
        }
        expect(fromNative.batches.map(plain)).toEqual(fromTs.batches.map(plain));
        expect(fromBoth.batches.map(plain)).toEqual(fromTs.batches.map(plain));

        // What the columns say is what the run was built from.
        const decoder = new TextDecoder();
        let seq = 0;
        let index = 0;
        for (const batch of fromNative.batches) {
          for (let row = 0; row < batch.count; row++, index++) {
            const record = run.records[index];
            seq += run.compacted ? 1 + ((index * 7919 + run.spanGap) % 5) : 1;
            expect(batch.seqs[row]).toBe(seq);
            expect(batch.positions[row]).toBe(1000 + seq - 1);
            expect(batch.timestamps[row]).toBe(record.timestamp);
            const slice = (start: number, end: number) => batch.bytes.subarray(start, end);
            if (record.fingerprint)
              expect(slice(batch.fingerprintStarts[row], batch.fingerprintEnds[row])).toEqual(record.fingerprint);
            expect(
              record.key === undefined ? undefined : decoder.decode(slice(batch.keyStarts[row], batch.keyEnds[row])),
            ).toBe(record.key);
            expect(batch.versions[row]).toBe(record.version ?? 0);
            expect(batch.typeIds[row] < 0 ? undefined : batch.types[batch.typeIds[row]]).toBe(record.type);
            const tags = [];
            for (let tag = batch.tagRows[row]; tag < batch.tagRows[row + 1]; tag++)
              tags.push(decoder.decode(slice(batch.tagStarts[tag], batch.tagEnds[tag])));
            expect(tags).toEqual(record.tags);
            const external = batch.external.find((item) => item.row === row);
            // The lookup finds a payload by its bytes: a record that repeats a stored one's finds it too.
            const hex = Buffer.from(record.payload).toString('hex');
            const stored = run.records.some(
              (other) => other.storedEarlier && Buffer.from(other.payload).toString('hex') === hex,
            );
            if (stored) expect(external?.location.segment).toBe(run.storedSegment);
            else expect(slice(batch.payloadStarts[row], batch.payloadEnds[row])).toEqual(record.payload);
            tally.hit('payload stored earlier', external !== undefined);
            tally.hit('a version of 5 bytes or more', (record.version ?? 0) >= 2 ** 28);
          }
          tally.hit('tags', batch.tagStarts.length > 0);
          tally.hit('a batch of one row', batch.count === 1);
          tally.hit('a batch of hundreds of rows', batch.count >= 200);
          tally.hit('more than 16 types', batch.types.length > 16);
        }
        tally.hit('compacted run', run.compacted);
        const manifests = frames.filter((frame) => frame.kind === FrameKind.Manifest).length;
        tally.hit('several manifest frames in one batch', manifests > 1 && run.rowsMax >= commit.entries);
      }),
      { numRuns: runs },
    );
    tally.expectAllReached();
  });

  it('decode runs side by side (a stretch of commits) into batches that span them, as each decodes alone', async () => {
    const tally = branchTally('stretch decode', [
      'a batch spanning runs',
      'a run split between batches',
      'a compacted run in the stretch',
      'payload stored earlier',
      'bytes between runs',
    ]);
    // 2 to 8 runs of 1 to 40 records each (drawn as lengths first, as `runArb` does), with 0 to 64
    // bytes between them (a group's header lies between runs in a segment).
    const stretchArb = fc.record({
      runs: fc
        .integer({ min: 2, max: 8 })
        .chain((length) => fc.array(runArb, { minLength: length, maxLength: length })),
      gaps: fc.array(fc.integer({ min: 0, max: 64 }), { minLength: 8, maxLength: 8 }),
      rowsMax: fc.integer({ min: 1, max: 200 }),
    });
    await fc.assert(
      fc.asyncProperty(stretchArb, async (stretch) => {
        const built = await Promise.all(
          stretch.runs.map((run) => buildRun({ ...run, records: run.records.slice(0, 1 + (run.records.length % 40)) })),
        );
        let length = 0;
        const starts = built.map((run, index) => {
          length += stretch.gaps[index];
          const start = length;
          length += run.bytes.length;
          return start;
        });
        const bytes = new Uint8Array(length).fill(0xee);
        let position = 1000;
        const decoderRuns = built.map((run, index) => {
          bytes.set(run.bytes, starts[index]);
          const firstPosition = position;
          position += run.commit.records;
          const sparse = run.commit.entries !== run.commit.records;
          const start = starts[index];
          return {
            start,
            end: start + run.bytes.length,
            frames: run.frames.map((frame) => ({
              ...frame,
              offset: frame.offset + start,
              dataStart: frame.dataStart + start,
              dataEnd: frame.dataEnd + start,
            })),
            count: run.commit.entries,
            firstPosition,
            ...(sparse ? { sparseLast: firstPosition + run.commit.records - 1 } : {}),
          };
        });
        const decodeStretch = (kernels: Kernels) => {
          const decoder = new RunColumnsDecoder(kernels, bytes, decoderLayout(decoderRuns), 'stretch');
          const batches: RunColumns[] = [];
          while (!decoder.done) batches.push(decoder.next(stretch.rowsMax));
          return batches;
        };
        const fromTs = decodeStretch(ts);
        const fromNative = decodeStretch(native);
        expect(fromNative.map(plain)).toEqual(fromTs.map(plain));
        expect(decodeStretch(alternating()).map(plain)).toEqual(fromTs.map(plain));

        // Each row is what the run's own decode says, its ranges moved by where the run starts.
        const alone = built.map((run, index) => {
          const result = decodeAll(
            native,
            run.bytes,
            run.frames,
            run.commit.entries,
            decoderRuns[index].sparseLast,
            1 << 20,
          );
          if (!('batches' in result)) throw new Error(result.message);
          return result.batches[0];
        });
        let runIndex = 0;
        let runRow = 0;
        for (const batch of fromNative) {
          const runsInBatch = new Set(batch.rowRuns);
          tally.hit('a batch spanning runs', runsInBatch.size > 1);
          for (let row = 0; row < batch.count; row++) {
            while (runRow === alone[runIndex].count) {
              runIndex++;
              runRow = 0;
            }
            const single = alone[runIndex];
            const start = starts[runIndex];
            if (runRow > 0 && row === 0) tally.hit('a run split between batches', true);
            expect(batch.rowRuns![row]).toBe(runIndex);
            expect(batch.seqs[row]).toBe(single.seqs[runRow]);
            expect(batch.positions[row]).toBe(single.positions[runRow] - 1000 + decoderRuns[runIndex].firstPosition);
            expect(batch.timestamps[row]).toBe(single.timestamps[runRow]);
            expect(batch.versions[row]).toBe(single.versions[runRow]);
            expect(batch.flags[row]).toBe(single.flags[runRow]);
            expect(batch.entryStarts[row]).toBe(single.entryStarts[runRow] + start);
            expect(batch.fingerprintStarts[row]).toBe(single.fingerprintStarts[runRow] + start);
            expect(batch.keyEnds[row]).toBe(single.keyEnds[runRow] + start);
            const type = (columns: RunColumns, at: number) =>
              columns.typeIds[at] < 0 ? undefined : columns.types[columns.typeIds[at]];
            expect(type(batch, row)).toBe(type(single, runRow));
            const tags = (columns: RunColumns, at: number) =>
              Array.from({ length: columns.tagRows[at + 1] - columns.tagRows[at] }, (_, tag) =>
                Buffer.from(
                  columns.bytes.subarray(
                    columns.tagStarts[columns.tagRows[at] + tag],
                    columns.tagEnds[columns.tagRows[at] + tag],
                  ),
                ).toString('hex'),
              );
            expect(tags(batch, row)).toEqual(tags(single, runRow));
            const external = batch.external.find((item) => item.row === row);
            const singleExternal = single.external.find((item) => item.row === runRow);
            expect(external?.location).toEqual(singleExternal?.location);
            tally.hit('payload stored earlier', external !== undefined);
            if (!external) {
              expect(batch.payloadStarts[row]).toBe(single.payloadStarts[runRow] + start);
              expect(batch.payloadEnds[row]).toBe(single.payloadEnds[runRow] + start);
            }
            runRow++;
          }
        }
        tally.hit(
          'a compacted run in the stretch',
          stretch.runs.some((run) => run.compacted),
        );
        tally.hit(
          'bytes between runs',
          stretch.gaps.slice(0, built.length).some((gap) => gap > 0),
        );
      }),
      { numRuns: 60 },
    );
    tally.expectAllReached();
  });

  it('fail alike on damaged manifests, with the same message, and never read outside the run', async () => {
    const tally = branchTally(
      'damaged manifests',
      ['CORRUPT', 'decoded anyway', 'count too high', 'count too low', 'frame cut short'],
      ['a type that is not UTF-8'],
    );
    const damageArb = fc.record({
      flips: fc.array(fc.record({ at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }), {
        minLength: 0,
        maxLength: 4,
      }),
      countChange: fc.constantFrom(0, 0, 1, -1),
      cut: fc.oneof(fc.constant(0), fc.nat({ max: 40 })),
    });
    await fc.assert(
      fc.asyncProperty(runArb, damageArb, async (run, damage) => {
        const { bytes, frames, commit } = await buildRun(run);
        const manifests = frames.filter((frame) => frame.kind === FrameKind.Manifest);
        // Damage lands inside manifest data, past each frame's kind byte, as a read would see it
        // if the frames' CRCs had been forged: the decoder's own checks are what is tested.
        for (const flip of damage.flips) {
          const frame = manifests[flip.at % manifests.length];
          const span = frame.dataEnd - frame.dataStart - 1;
          if (span > 0) bytes[frame.dataStart + 1 + (flip.at % span)] = flip.byte;
        }
        const cutFrames = frames.map((frame, index) =>
          index === frames.indexOf(manifests[manifests.length - 1]) && damage.cut > 0
            ? { ...frame, dataEnd: Math.max(frame.dataStart + 1, frame.dataEnd - damage.cut) }
            : frame,
        );
        const count = Math.max(1, commit.entries + damage.countChange);
        const sparseLast = run.compacted ? commit.lastPosition : undefined;
        const fromTs = decodeAll(ts, bytes, cutFrames, count, sparseLast, run.rowsMax);
        const fromNative = decodeAll(native, bytes, cutFrames, count, sparseLast, run.rowsMax);
        if ('batches' in fromTs && 'batches' in fromNative) {
          expect(fromNative.batches.map(plain)).toEqual(fromTs.batches.map(plain));
        } else {
          expect(fromNative).toEqual(fromTs);
        }
        const failed = !('batches' in fromTs);
        tally.hit('CORRUPT', failed && fromTs.code === 'CORRUPT');
        if (failed) expect(fromTs.code).toBe('CORRUPT');
        tally.hit('decoded anyway', !failed);
        tally.hit('count too high', damage.countChange > 0);
        tally.hit('count too low', damage.countChange < 0 && commit.entries > 1);
        tally.hit('frame cut short', damage.cut > 0);
        tally.hit('a type that is not UTF-8', failed && fromTs.message.includes('not valid UTF-8'));
      }),
      { numRuns: runs },
    );
    tally.expectAllReached();
  });

  it('grow the room for tags when a batch holds more tags than the reader gave room for', async () => {
    // 3,000 records of three tags each: 9,000 tags in one batch, more than the decoder's first room.
    const records = Array.from({ length: 3000 }, (_, index) => ({
      payload: encoder.encode(`record ${index}`),
      tombstone: false,
      tags: [`a${index}`, `b${index % 7}`, `c${index % 11}`],
    }));
    const { bytes, frames, commit } = await oneShotRun(records, 1 << 20);
    const fromTs = decodeAll(ts, bytes, frames, commit.entries, undefined, 4096);
    const fromNative = decodeAll(native, bytes, frames, commit.entries, undefined, 4096);
    if (!('batches' in fromNative) || !('batches' in fromTs)) throw new Error(JSON.stringify(fromNative));
    expect(fromNative.batches.map(plain)).toEqual(fromTs.batches.map(plain));
    const [batch] = fromNative.batches;
    expect(batch.tagStarts.length).toBe(9000);
    const text = (tag: number) =>
      new TextDecoder().decode(batch.bytes.subarray(batch.tagStarts[tag], batch.tagEnds[tag]));
    expect([text(0), text(1), text(2), text(8997), text(8998), text(8999)]).toEqual([
      'a0',
      'b0',
      'c0',
      'a2999',
      `b${2999 % 7}`,
      `c${2999 % 11}`,
    ]);
  });

  it('refuse runs that do not describe the bytes, alike and before writing a column', async () => {
    const { bytes, frames, commit } = await oneShotRun(
      [{ payload: encoder.encode('one'), tombstone: false, type: 't', tags: ['x'] }],
      frameDataBytesMax,
    );
    const manifest = frames.find((frame) => frame.kind === FrameKind.Manifest)!;
    const job = (runs: Uint32Array, cursor = new Uint32Array(manifestCursorSlots)) => ({
      bytes,
      frames: Uint32Array.of(manifest.offset, manifest.dataStart, manifest.dataEnd),
      runs,
      place: 'run',
      rows: 1,
      cursor,
      columns: new Uint8Array(new ArrayBuffer(4096)),
      external: new Float64Array(5),
      tagStarts: new Uint32Array(4),
      tagEnds: new Uint32Array(4),
      typeRanges: new Uint32Array(8),
    });
    const whole = bytes.length;
    const cases: [string, Uint32Array, Uint32Array?][] = [
      ['no run', new Uint32Array(0)],
      ['a run of three numbers', Uint32Array.of(0, 1, 0)],
      ['a run past the bytes', Uint32Array.of(0, commit.entries, 0, whole + 1)],
      ['a run that ends before it starts', Uint32Array.of(0, commit.entries, 10, 5)],
      ['a frame outside its run', Uint32Array.of(0, commit.entries, manifest.dataEnd, whole)],
      ['frames out of order', Uint32Array.of(1, commit.entries, 0, whole, 0, 0, 0, whole)],
      [
        'a cursor on another run',
        Uint32Array.of(0, commit.entries, 0, whole),
        Uint32Array.of(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5),
      ],
    ];
    for (const [what, runs, cursor] of cases) {
      const jobs = { native: job(runs, cursor?.slice()), ts: job(runs, cursor?.slice()) };
      expect(
        expectSameOutcome((kernels) => kernels.decodeManifests(kernels === native ? jobs.native : jobs.ts)),
        what,
      ).toEqual({ ok: false, code: 'INVALID_ARGUMENT' });
      // Nothing was decoded: the columns are as they were given.
      for (const written of [jobs.native, jobs.ts])
        expect(
          written.columns.every((byte) => byte === 0),
          what,
        ).toBe(true);
    }
  });

  it('stop when the tag ranges or the type table are full, and go on from the cursor', async () => {
    // Three records, each with a type and two tags. Given no room for tags and one type slot,
    // each call decodes as far as its room allows and says what it needs.
    const entries = [
      { type: 'a', tags: ['x', 'y'] },
      { type: 'b', tags: ['z', 'w'] },
      { type: 'b', tags: ['v', 'u'] },
    ];
    const { bytes, frames, commit } = await oneShotRun(
      entries.map((entry) => ({ ...entry, payload: encoder.encode(entry.type), tombstone: false })),
      frameDataBytesMax,
    );
    const manifest = frames.find((frame) => frame.kind === FrameKind.Manifest)!;
    for (const kernels of [native, ts]) {
      const cursor = new Uint32Array(manifestCursorSlots);
      const job = {
        bytes,
        frames: Uint32Array.of(manifest.offset, manifest.dataStart, manifest.dataEnd),
        runs: Uint32Array.of(0, commit.entries, 0, bytes.length),
        place: 'run',
        rows: entries.length,
        cursor,
        columns: new Uint8Array(new ArrayBuffer(4096)),
        external: new Float64Array(5 * entries.length),
        tagStarts: new Uint32Array(0),
        tagEnds: new Uint32Array(0),
        typeRanges: new Uint32Array(2),
      };
      kernels.decodeManifests(job);
      expect([cursor[manifestCursor.stop], cursor[manifestCursor.row], cursor[manifestCursor.tagsNeeded]]).toEqual([
        manifestStop.tagsFull,
        0,
        2,
      ]);
      const tagStarts = new Uint32Array(2 * entries.length);
      const tagEnds = new Uint32Array(2 * entries.length);
      kernels.decodeManifests({ ...job, tagStarts, tagEnds });
      // The first record's type took the one slot; the second's does not fit.
      expect([cursor[manifestCursor.stop], cursor[manifestCursor.row], cursor[manifestCursor.types]]).toEqual([
        manifestStop.typesFull,
        1,
        1,
      ]);
      const typeRanges = new Uint32Array(4);
      typeRanges.set(job.typeRanges);
      kernels.decodeManifests({ ...job, tagStarts, tagEnds, typeRanges });
      expect([cursor[manifestCursor.stop], cursor[manifestCursor.row], cursor[manifestCursor.types]]).toEqual([
        manifestStop.done,
        entries.length,
        2,
      ]);
      const text = (start: number, end: number) => new TextDecoder().decode(bytes.subarray(start, end));
      expect([0, 1, 2, 3].map((tag) => text(tagStarts[tag], tagEnds[tag]))).toEqual(['x', 'y', 'z', 'w']);
      expect([0, 1].map((type) => text(typeRanges[2 * type], typeRanges[2 * type + 1]))).toEqual(['a', 'b']);
    }
  });
});
