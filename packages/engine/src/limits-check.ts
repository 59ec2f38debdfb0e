/**
 * The relations between the bounds in `limits.ts` that the code relies on, checked when the
 * module loads (as TigerBeetle checks its constants at compile time): a bound changed on its own
 * that breaks one fails every process at once, with the reason, instead of one rare request.
 * Kept apart from the bounds so that a test can check a deliberately broken set.
 */
import { assert } from './errors.js';

/** The bounds whose relations are checked: each is the constant of the same name in `limits.ts`. */
export interface LimitValues {
  readonly safeIntegerMax: number;
  readonly frameHeaderBytes: number;
  readonly frameControlBit: number;
  readonly frameLengthMask: number;
  readonly segmentHeaderBytes: number;
  readonly segmentBytesFirst: number;
  readonly segmentBytesMin: number;
  readonly segmentBytesDefault: number;
  readonly segmentBytesMax: number;
  readonly mergedSegmentBytesMax: number;
  readonly keyBytesMax: number;
  readonly typeBytesMax: number;
  readonly tagBytesMax: number;
  readonly fingerprintBytesMax: number;
  readonly messageBytesMax: number;
  readonly typesPerFeedMax: number;
  readonly leaseTtlMsMin: number;
  readonly leaseTtlMsDefault: number;
  readonly leaseTtlMsMax: number;
  readonly retentionAgeMsMax: number;
  readonly payloadDedupEntriesMax: number;
  readonly payloadCacheBytesMax: number;
  readonly payloadCacheBlockBytes: number;
  readonly indexCacheBytesMax: number;
  readonly tagFilterBytesMax: number;
  readonly keyCacheBytesMax: number;
  readonly keyWinnersHotReads: number;
  readonly commitPagesCachedMax: number;
  readonly summaryPageCommits: number;
  readonly publishIndexSliceRecords: number;
  readonly publishIndexBacklogRecordsMax: number;
  readonly keyBuildBacklogKeysMax: number;
  readonly groupsInFlightMax: number;
  readonly exportFilesInFlightMax: number;
  readonly rebuildBatchRowsMax: number;
  readonly columnBatchRowsMax: number;
  readonly readSlabBytes: number;
  readonly readSlabPieceBytesMax: number;
  readonly coalescedReadGapBytes: number;
  readonly coalescedReadBytesMax: number;
  readonly readLinesFirstChunkBytes: number;
  readonly readLinesChunkBytes: number;
  readonly keyTableSlotsInitial: number;
  readonly segmentKeyShards: number;
  readonly segmentKeyShardSlotsInitial: number;
  readonly directWriteAlignmentBytes: number;
  readonly exportDirectWriteBytes: number;
  readonly objectSinglePutBytesMax: number;
  readonly tieringBlockBytes: number;
  readonly tieringRetryMsMin: number;
  readonly tieringRetryMsMax: number;
  readonly tieredSegmentsMax: number;
  readonly groupWindowCommitsMax: number;
  readonly groupWorkerBytesMax: number;
  readonly groupReasonBytesMax: number;
  readonly remoteBlockCacheBytes: number;
  readonly atHandFetchesMax: number;
  readonly fetchSparseHitsMax: number;
  readonly remoteReadAheadBlocks: number;
  readonly remotePieceBytes: number;
  readonly remotePointReadBytesMax: number;
  readonly runsReadBytesFirst: number;
  readonly runsReadBytesMax: number;
  readonly stateLogBytesMax: number;
  readonly objectPartBytes: number;
  readonly objectPartBytesMin: number;
  readonly objectUploadPartsMax: number;
  readonly objectPartsInFlightMax: number;
  readonly objectListPageKeys: number;
  readonly objectDeleteBatchKeys: number;
  readonly objectRequestAttemptsMax: number;
}

const isPowerOfTwo = (value: number) => Number.isSafeInteger(value) && value > 0 && (value & (value - 1)) === 0;

/**
 * Throws `INTERNAL`, naming the broken relation and why it holds, when one does not.
 *
 * It is longer than 100 lines because it is a flat list of independent checks, each with its
 * reason, read top to bottom like the constants they check.
 */
export function checkLimits(limits: LimitValues): void {
  const check = (condition: boolean, reason: string) => assert(condition, `limits.ts: ${reason}`);
  const recordBytesMinMax = limits.segmentBytesMin / 4 - limits.frameHeaderBytes;

  // Segments.
  check(
    limits.segmentBytesMin <= limits.segmentBytesDefault && limits.segmentBytesDefault <= limits.segmentBytesMax,
    'the default segment size is one a store may be configured with (segmentBytesMin <= segmentBytesDefault <= segmentBytesMax)',
  );
  check(
    limits.segmentHeaderBytes < limits.segmentBytesFirst && limits.segmentBytesFirst <= limits.segmentBytesMin,
    "a log's first segment holds its header and is never larger than the segments a store is configured with (segmentBytesFirst <= segmentBytesMin)",
  );
  check(
    limits.segmentBytesMax <= 0xffff_ffff,
    'the kernels hold a frame offset inside a segment in a u32 (segmentBytesMax <= 2^32 - 1)',
  );
  check(
    limits.mergedSegmentBytesMax >= limits.segmentBytesDefault &&
      limits.mergedSegmentBytesMax <= limits.segmentBytesMax,
    'a merge joins default-size segments into one that is still a segment (segmentBytesDefault <= mergedSegmentBytesMax <= segmentBytesMax)',
  );

  // Frames and records: a record is at most a quarter of its store's segments.
  check(
    (limits.frameControlBit & limits.frameLengthMask) === 0 &&
      (limits.frameControlBit | limits.frameLengthMask) >>> 0 === 0xffff_ffff,
    "a frame's length word is its control bit and its length, nothing else (frameControlBit, frameLengthMask)",
  );
  check(
    limits.segmentBytesMax / 4 <= limits.frameLengthMask,
    "the largest record's data length fits a frame's length field (segmentBytesMax / 4 <= frameLengthMask)",
  );
  check(
    limits.segmentHeaderBytes + limits.segmentBytesMin / 4 <= limits.segmentBytesMin / 2,
    'the smallest segment holds its header, its largest record and the SegmentEnd after it, with room to spare',
  );
  for (const name of [
    'keyBytesMax',
    'typeBytesMax',
    'tagBytesMax',
    'fingerprintBytesMax',
    'messageBytesMax',
  ] as const) {
    check(
      limits[name] <= recordBytesMinMax,
      `a field at its own bound fits a frame of the smallest segment (${name} <= segmentBytesMin / 4 - frameHeaderBytes)`,
    );
  }
  check(
    limits.typesPerFeedMax <= 0xffff,
    'the type column stores a u16 id per record, 0 for none (typesPerFeedMax <= 65535)',
  );

  // Times.
  check(
    limits.leaseTtlMsMin <= limits.leaseTtlMsDefault && limits.leaseTtlMsDefault <= limits.leaseTtlMsMax,
    'the default lease is one a holder may ask for (leaseTtlMsMin <= leaseTtlMsDefault <= leaseTtlMsMax)',
  );
  check(
    limits.retentionAgeMsMax <= limits.safeIntegerMax,
    'an age limit is stored as a varint of a safe integer (retentionAgeMsMax <= safeIntegerMax)',
  );

  // Caches and queues hold at least one of what they hold.
  for (const name of [
    'payloadDedupEntriesMax',
    'indexCacheBytesMax',
    'keyCacheBytesMax',
    'keyWinnersHotReads',
    'commitPagesCachedMax',
    'summaryPageCommits',
    'publishIndexSliceRecords',
    'keyBuildBacklogKeysMax',
    'groupsInFlightMax',
    'exportFilesInFlightMax',
  ] as const) {
    check(
      Number.isSafeInteger(limits[name]) && limits[name] >= 1,
      `a cache, page or queue holds something (${name} >= 1)`,
    );
  }
  check(
    Number.isSafeInteger(limits.tagFilterBytesMax) && limits.tagFilterBytesMax >= 8,
    'a tag filter holds at least the eight bytes of the smallest filter (tagFilterBytesMax >= 8)',
  );
  check(
    limits.payloadCacheBlockBytes <= limits.payloadCacheBytesMax,
    'the payload cache holds the block it reads (payloadCacheBlockBytes <= payloadCacheBytesMax)',
  );
  check(
    limits.publishIndexSliceRecords <= limits.publishIndexBacklogRecordsMax,
    'the indexing backlog holds at least the slice folded at once (publishIndexSliceRecords <= publishIndexBacklogRecordsMax)',
  );

  // Reads.
  check(
    limits.rebuildBatchRowsMax <= limits.columnBatchRowsMax,
    "a rebuild's batch is within a read's batch (rebuildBatchRowsMax <= columnBatchRowsMax)",
  );
  check(
    limits.readSlabPieceBytesMax <= limits.readSlabBytes,
    'a piece carved out of a read slab fits in it (readSlabPieceBytesMax <= readSlabBytes)',
  );
  check(
    limits.coalescedReadGapBytes <= limits.coalescedReadBytesMax,
    'a gap bridged by a coalesced read fits in one (coalescedReadGapBytes <= coalescedReadBytesMax)',
  );
  check(
    limits.readLinesFirstChunkBytes <= limits.readLinesChunkBytes,
    'NDJSON chunks grow from the first to the full size (readLinesFirstChunkBytes <= readLinesChunkBytes)',
  );

  // Hash tables and direct writes.
  for (const name of ['keyTableSlotsInitial', 'segmentKeyShards', 'segmentKeyShardSlotsInitial'] as const)
    check(isPowerOfTwo(limits[name]), `a hash table or its shards are picked by a mask (${name} is a power of two)`);
  check(
    isPowerOfTwo(limits.directWriteAlignmentBytes) && limits.directWriteAlignmentBytes % 512 === 0,
    'O_DIRECT asks for a multiple of the logical block size (directWriteAlignmentBytes a power of two, a multiple of 512)',
  );
  check(
    limits.exportDirectWriteBytes % limits.directWriteAlignmentBytes === 0,
    'a direct write piece is a multiple of the alignment (exportDirectWriteBytes % directWriteAlignmentBytes === 0)',
  );

  // Object stores (S3's own bounds on a multipart upload and a list page).
  check(
    limits.objectPartBytes >= limits.objectPartBytesMin,
    'S3 refuses a part under 5 MiB but the last (objectPartBytes >= objectPartBytesMin)',
  );
  check(
    limits.segmentBytesMax / limits.objectPartBytes <= limits.objectUploadPartsMax,
    'the largest segment uploads in the parts S3 allows (segmentBytesMax / objectPartBytes <= objectUploadPartsMax)',
  );
  check(
    limits.objectSinglePutBytesMax >= limits.objectPartBytes && limits.objectSinglePutBytesMax <= 5 * 1024 ** 3,
    'a single PUT takes what a part would, and no more than S3 takes in one (objectPartBytes <= objectSinglePutBytesMax <= 5 GiB)',
  );
  check(
    limits.objectListPageKeys >= 1 && limits.objectListPageKeys <= 1000,
    'a list page asks for keys S3 returns (1 <= objectListPageKeys <= 1000)',
  );
  check(
    limits.objectDeleteBatchKeys >= 1 && limits.objectDeleteBatchKeys <= 1000,
    'a batch delete names no more keys than S3 takes (1 <= objectDeleteBatchKeys <= 1000)',
  );
  for (const name of ['objectPartsInFlightMax', 'objectRequestAttemptsMax'] as const)
    check(
      Number.isSafeInteger(limits[name]) && limits[name] >= 1,
      `an upload or a request makes progress (${name} >= 1)`,
    );

  // Tiering.
  check(
    limits.tieringRetryMsMin >= 1 && limits.tieringRetryMsMin <= limits.tieringRetryMsMax,
    'a failed upload waits before its retry, and the backoff has a cap above its start (1 <= tieringRetryMsMin <= tieringRetryMsMax)',
  );
  check(
    limits.tieringBlockBytes >= 64 * 1024 && limits.tieringBlockBytes <= limits.objectPartBytes,
    'a checked block is worth a request and fits in one part (64 KiB <= tieringBlockBytes <= objectPartBytes)',
  );
  check(
    limits.remoteBlockCacheBytes >= 2 * limits.tieringBlockBytes &&
      limits.atHandFetchesMax >= limits.remoteBlockCacheBytes / limits.tieringBlockBytes,
    'a read across two blocks fits the block cache, and a read may fetch as many blocks as it holds (remoteBlockCacheBytes >= 2 * tieringBlockBytes, atHandFetchesMax >= remoteBlockCacheBytes / tieringBlockBytes)',
  );
  check(
    limits.fetchSparseHitsMax >= 1 && 2 * limits.fetchSparseHitsMax <= limits.atHandFetchesMax,
    'the sparse hits fetched together may each miss for their entry and payload within one read of evicted history (1 <= fetchSparseHitsMax, 2 * fetchSparseHitsMax <= atHandFetchesMax)',
  );
  check(
    limits.remoteReadAheadBlocks >= 1 &&
      (limits.remoteReadAheadBlocks + 2) * limits.tieringBlockBytes <= limits.remoteBlockCacheBytes,
    'a scan fetches ahead, and its block and those ahead fit the cache ((remoteReadAheadBlocks + 2) * tieringBlockBytes <= remoteBlockCacheBytes)',
  );
  check(
    limits.remotePieceBytes >= 4096 &&
      limits.remotePointReadBytesMax >= limits.remotePieceBytes &&
      limits.remotePointReadBytesMax < limits.tieringBlockBytes,
    'a point read fetches pieces smaller than a block (4 KiB <= remotePieceBytes <= remotePointReadBytesMax < tieringBlockBytes)',
  );
  check(
    limits.runsReadBytesFirst >= 4096 && limits.runsReadBytesFirst <= limits.runsReadBytesMax,
    'a read starts with a short stretch and grows to the longest (4 KiB <= runsReadBytesFirst <= runsReadBytesMax)',
  );
  check(
    limits.tieredSegmentsMax * tierEntryBytesMax <= limits.stateLogBytesMax,
    'the tiering log holds every segment it may track in one record (tieredSegmentsMax * tierEntryBytesMax <= stateLogBytesMax)',
  );
  check(
    limits.groupWindowCommitsMax * (2 * groupEntryBytesMax + limits.groupWorkerBytesMax + limits.groupReasonBytesMax) +
      groupEntryBytesMax * 16 <=
      limits.stateLogBytesMax,
    "a subscription group's state, with every commit of its window held and given a reason, is one record of its log (groupWindowCommitsMax * (worker + reason + entry) <= stateLogBytesMax)",
  );
}

/** The most bytes of a subscription group's entry besides its worker and reason: varints. */
const groupEntryBytesMax = 5 * 9;

/** The most bytes one segment's entry takes in the tiering log: five varints and a CRC. */
const tierEntryBytesMax = 5 * 9 + 4 + 1;
