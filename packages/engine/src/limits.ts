/**
 * Every bound StreamStack enforces, in one place, each with its unit last and the reason for it.
 * Formats depend on some of these: changing one that is marked "format" needs a format version.
 * The relations between them that the code relies on are checked when this module loads (at the
 * bottom, by `limits-check.ts`).
 *
 * It is longer than 500 lines because every bound of the engine is here, each with the reason for
 * its value, so that they can be read, and checked against each other, in one place.
 */
import { checkLimits } from './limits-check.js';

/** Largest integer a position, sequence or FST value may take: JS numbers are exact below 2^53. */
export const safeIntegerMax = Number.MAX_SAFE_INTEGER;

/**
 * Posting lists with at least this many entries use the block form, whose skip directory lets an
 * intersection jump over whole blocks; shorter lists are plain delta-varint, where a directory
 * would cost more than it saves. Format.
 */
export const postingsBlockThreshold = 128;

/** Entries per block in the block form of a posting list (the last block may be shorter). Format. */
export const postingsBlockLength = 128;

/**
 * When one list is this many times longer than the other, intersection gallops (exponential
 * search) through the longer one instead of merging: merging costs O(a + b), galloping
 * O(a log(b / a)), and the crossover on current machines sits around a ratio of 16-32.
 */
export const intersectGallopRatio = 24;

/** Bytes of a frame header: u32 length (with the control bit) and u32 CRC. Format. */
export const frameHeaderBytes = 8;

/** The top bit of a frame's length field marks a control record. Format. */
export const frameControlBit = 0x8000_0000;

/** The other 31 bits of a frame's length field are the data length. Format. */
export const frameLengthMask = 0x7fff_ffff;

/** Bytes of a segment file's header (docs/formats.md). Format. */
export const segmentHeaderBytes = 48;

/** Zeros are written in chunks of this many bytes when preallocating or cutting a tail. */
export const zeroFillChunkBytes = 1024 * 1024;

/** A state log (leases, subscriptions) is rewritten with only its last record past this size. */
export const stateLogBytesMax = 1024 * 1024;

/** A lease lasts this long unless the holder asks otherwise: long enough to ride out a GC pause. */
export const leaseTtlMsDefault = 30_000;

/** Shortest lease: shorter ones would expire between a holder's renewals under normal jitter. */
export const leaseTtlMsMin = 10;

/** Longest lease: a crashed holder blocks the feed for at most this long. */
export const leaseTtlMsMax = 24 * 60 * 60 * 1000;

/**
 * Payloads remembered for deduplication per feed (about 40 bytes each in memory, none of it
 * objects): the recent quarter million, which catches the repeats of consecutive polls. Past it
 * the map starts over, so an old payload may be stored again; that costs disk, never correctness.
 * A larger map costs every append a slower, cache-missing lookup.
 */
export const payloadDedupEntriesMax = 1 << 18;

/**
 * Default capacity of a WAL or history segment (the `segmentBytes` a store is opened with): the
 * size a log's segments grow to. A record may be at most a quarter of it, whatever size the
 * segment it lands in has (see `segmentBytesFirst`).
 */
export const segmentBytesDefault = 64 * 1024 * 1024;

/**
 * Capacity of the first segment of a log; each next segment is twice the one before it, up to
 * `segmentBytes`. A segment costs its whole capacity on disk from the moment it is created
 * (it is preallocated with zeros), so with every segment at 64 MiB a feed of one record took
 * 128 MiB (one WAL and one history segment), and a store of hundreds of small feeds ran out of
 * disk. Doubling keeps a growing log's unused preallocation below the bytes it already holds,
 * and reaches full-size segments after ten rolls (the first 64 MiB). Equal to
 * `segmentBytesMin`, so it is never larger than the segments a store is configured with.
 */
export const segmentBytesFirst = 64 * 1024;

/** Smallest segment a store may be configured with (tests use small ones to roll often). */
export const segmentBytesMin = 64 * 1024;

/** Largest segment: frame offsets inside a segment are u32 in the kernels. */
export const segmentBytesMax = 1024 * 1024 * 1024;

/** Longest feed name: it is a directory name, and it appears in every output line. */
export const feedNameCharactersMax = 128;

/** Longest record key, in UTF-8 bytes: keys are index terms, and long ones bloat the index. */
export const keyBytesMax = 1024;

/** Longest type name and tag, in UTF-8 bytes. */
export const typeBytesMax = 256;
export const tagBytesMax = 256;

/** Most tags on one record: tags are for selecting records, not for carrying data. */
export const tagsPerRecordMax = 64;

/** Longest fingerprint: it identifies a record for dedup; 64 bytes fits any hash. */
export const fingerprintBytesMax = 64;

/** Longest commit message, in UTF-8 bytes. */
export const messageBytesMax = 4096;

/**
 * Deepest nesting of arrays and objects in a JSON payload, in levels: a bound of the record line
 * format, so it lives with that format in @streamstack/protocol and is listed here with the rest.
 */
export { jsonNestingDepthMax } from '@streamstack/protocol';

/**
 * Shortest wait between a command-line tail's looks for new commits, in milliseconds: a tail
 * runs beside the writing process without a lock, so it polls; faster polling would cost the
 * reader more than it saves the user.
 */
export const tailPollMsMin = 200;

/**
 * Bytes of buffer a byte writer keeps between uses, at most. A group of a full batch of small
 * records (about 8 MiB) still reuses its buffer; a larger group (a seal of a long stream, a
 * merge) hands its buffer to the write instead of copying it, and the writer starts again at
 * this size rather than holding hundreds of megabytes after one large seal.
 */
export const writerRetainedBytesMax = 16 * 1024 * 1024;

/**
 * Distinct types and tags the WAL's decoder keeps one shared copy of, at most (about 4 MB of
 * short strings): enough for the tags of any realistic stream, and a stream of unique tags
 * costs a cleared map now and then, not unbounded memory.
 */
export const walSharedStringsMax = 65_536;

/** Most records in one batch or one-shot append. */
export const batchRecordsMax = 100_000;

/** Records a subscription poll returns at most when the caller does not say. */
export const subscriptionPollRecordsDefault = 10_000;

/**
 * Commits past a subscription group's settled cursor that its workers may hold or have finished.
 * The group's durable state names each of them, and every claim and acknowledgement rewrites that
 * state, so this bounds the bytes each one writes (a few KiB). A group whose oldest unsettled
 * commit is this far behind hands out nothing newer until it is settled.
 */
export const groupWindowCommitsMax = 1024;
/** How long a worker holds claimed work when the group does not say: then it goes to another. */
export const groupAckTimeoutMsDefault = 30_000;
/** Below this a claim would expire before a network round trip acknowledged it. */
export const groupAckTimeoutMsMin = 100;
/** A day: work held longer than this is lost work, not slow work. */
export const groupAckTimeoutMsMax = 86_400_000;
/** Deliveries of one commit before it is parked, when the group does not say. */
export const groupDeliveriesDefault = 5;
/** Most deliveries a group may allow one commit: past it, work that always fails is never parked. */
export const groupDeliveriesMax = 1000;
/**
 * Commits whose keys a key-ordered claim reads at a time (from the key column), when it has not
 * found enough free commits among those it knows: a claim waits for one such read, not a window's.
 */
export const groupKeyReadCommits = 256;
/** Most commits one claim hands out (each is read in full for the worker). */
export const groupClaimCommitsMax = 1000;
/** Longest a claim waits for work (long-poll), so a request never hangs past a proxy's timeout. */
export const groupClaimWaitMsMax = 60_000;
/** A worker's name and a nack's reason are kept in the group's state: bounded like a tag. */
export const groupWorkerBytesMax = 128;
export const groupReasonBytesMax = 256;

/** Distinct record types per feed: the type column stores a u16 id per record (0 is "none"). */
export const typesPerFeedMax = 65_535;

/**
 * What the planner weighs finding a query's positions by: the index path costs a pass over the
 * posting lists it intersects (or over the range of the in-memory type column, a byte compare a
 * record), the scan path decodes every manifest entry of the range from disk. Both paths then
 * fetch the same records, so only this finding differs. Decoding an entry costs about as much as
 * this many posting-list (or type-column) entries, measured on the query benchmark.
 */
export const scanEntryCostPostings = 32;

/** Most items in one query (an OR of items). */
export const queryItemsMax = 256;

/** When a read fetches at least this many records of one commit, it reads the whole run once. */
export const fetchRunHitsMin = 16;

/**
 * Most sparse hits (fewer than `fetchRunHitsMin` to a commit) a read fetches together, within
 * one segment: one await and one read per stretch for all of them, instead of per commit. Each
 * hit's entry and payload may each miss a piece of evicted history, so twice this stays within
 * `atHandFetchesMax`.
 */
export const fetchSparseHitsMax = 16;

/**
 * Tags whose highest position the condition checker remembers. A condition on a remembered tag
 * that has not been written since `after` is settled with no I/O; the rest go to the index.
 */
export const tagHighWaterEntriesMax = 100_000;

/**
 * Bytes of history the payload cache holds: the runs a scan read last and blocks read for
 * payloads stored elsewhere in their segment. A payload stored once and referenced by many later
 * records (repeats, stored once per segment) is then read from memory instead of with one
 * positional read per record. A quarter of a default segment covers the repeats of recent polls.
 */
export const payloadCacheBytesMax = 32 * 1024 * 1024;

/**
 * Bytes read around a payload that the cache does not hold: a page-cache read of 64 KiB costs
 * little more than one of 200 bytes, and the payloads near a repeated one tend to repeat too.
 */
export const payloadCacheBlockBytes = 64 * 1024;

/**
 * Heap bytes the payload cache charges a region beyond its payload: the region object, its view
 * and buffer headers and its two list slots come to about 250 bytes. Without the charge, the runs
 * of one-record commits (about 100 bytes each) that readers following the head cache would hold
 * three to four times `payloadCacheBytesMax` of heap.
 */
export const payloadCacheRegionBytes = 256;

/**
 * Bytes of sealed segments' indexes held in memory (type and locator columns, FST, postings).
 * Index files are read when a query first needs them and the least recently used are dropped
 * past this bound, so memory does not grow with the history. A default segment's index is a
 * few megabytes, so this holds the last dozen or so segments that queries touch.
 */
export const indexCacheBytesMax = 64 * 1024 * 1024;

/**
 * Bits per key in a key dictionary's Bloom filter, and probes per key. Ten bits and seven probes
 * give about one false positive in a hundred: a `get` for a key a segment lacks almost never
 * touches that segment's FST. Format.
 */
export const keyFilterBitsPerKey = 10;
export const keyFilterProbes = 7;

/**
 * Bits per tag in an index file's tag filter, and probes per tag at most: about one false
 * positive in 100,000. Tighter than keys', because a condition asks about many tags at once and
 * a false positive loads a whole index (milliseconds): a uniqueness check of a hundred fresh tags
 * over a hundred segments makes 10,000 lookups, which at one in a hundred each would load most
 * indexes, and at one in 15,000 (20 bits) still one index every other request.
 */
export const tagFilterBitsPerTag = 24;
export const tagFilterProbesMax = 17;

/**
 * Bytes of one index file's tag filter at most. Every sealed segment's filter stays in memory
 * for the life of the feed, so its size is bounded whatever a segment holds: 512 KiB filters
 * about 175,000 distinct tags at full precision (a segment of 300,000 records tagged with
 * 100,000 customers needs 300 KiB; with 5,000, 15 KiB), and a hundred segments of that many tags
 * hold 50 MiB. Past it, tags share the bits and get fewer probes each (`filterShapeOf`): at
 * 400,000 tags about one absent tag in a hundred passes, like the key filters.
 */
export const tagFilterBytesMax = 512 * 1024;

/**
 * Bytes of key dictionaries (filters, FSTs, winners) held in memory, least recently used out
 * first: a lookup touches the filters of the segments newer than its key's last write and one
 * FST, so this keeps warm lookups in memory without growing with the history.
 */
export const keyCacheBytesMax = 64 * 1024 * 1024;

/**
 * Dictionary files whose whole check (every section's CRC, at a read-write open) a process
 * remembers, by file identity, oldest forgotten first. A fork shares its source's dictionaries
 * as the same files: its open then takes the check the source's open made (or is making) instead
 * of reading hundreds of megabytes again. Two per sealed segment of every feed open at once.
 */
export const wholeChecksRememberedMax = 65_536;

/**
 * Winners a key dictionary answers with one read each before its whole winners section is held
 * in the cache (when it fits without pushing anything out): a read costs a system call, 2 to
 * 5 µs, on every warm point lookup; a section (28 bytes a key) is read once in about the time
 * of a thousand of them.
 */
export const keyWinnersHotReads = 1024;

/**
 * Winners a dictionary merge reads one at a time from one earlier dictionary before it reads that
 * dictionary's whole winners section instead: a few lookups cost a 28-byte read each, but a
 * merge that finds most of its keys in the segment before (the usual case for keys) is cheaper
 * reading the section once than making a system call per key.
 */
export const mergeWinnerReadsMax = 256;

/**
 * Winners of a dictionary being encoded whose CRCs one kernel call computes: the call takes
 * each winner's range and gives two numbers back, so over a segment's million winners at once
 * its arguments and result took 16 MB beside the file being built; in slices they take 1 MB.
 */
export const keyFileChecksumSliceWinners = 65_536;

/**
 * Bytes of the chunks string payloads are encoded into (one allocation per chunk, not one per
 * payload or per batch). Small enough that a chunk kept alive by one payload wastes little.
 */
export const payloadChunkBytes = 64 * 1024;

/**
 * The niceness of the index build worker's thread (Linux: 0 normal, 19 lowest). A build competes
 * with the event loop for the CPU on small machines; at the lowest priority it takes what the
 * event loop leaves and never delays an append.
 */
export const buildWorkerNiceness = 19;

/** Keys a key dictionary build merges before it yields the event loop to appends and reads. */
export const keyBuildYieldKeys = 8192;

/**
 * Records a large seal handles between yields to the event loop (decoding its WAL batches,
 * laying out its run): about 10 ms of work, so reads, timers and other feeds' appends wait less
 * behind a seal of 100,000 records.
 */
export const eventLoopSliceRecords = 8192;

/**
 * How long a piece of background work (a merge, a compaction, a derived file's rebuild) runs
 * before it yields the event loop, checked every `eventLoopCheckRecords` records: records cost
 * from a microsecond (a key) to tens (a record rewritten), so slices are timed, not counted.
 * Well under the 50 ms a read or append may wait behind history work.
 */
export const eventLoopSliceMs = 8;

/** Records between two looks at the clock by timed slices (a look costs about 50 ns). */
export const eventLoopCheckRecords = 256;

/**
 * Rows a derived file's rebuild decodes at a time (a quarter of a read's batch): the clock is
 * looked at between batches, so a batch must be well within `eventLoopSliceMs`.
 */
export const rebuildBatchRowsMax = 1024;

/**
 * Published records folded into the derived indexes and condition maps between yields to the
 * event loop at most (a few microseconds each: about 10 ms a slice), so that indexing a seal of
 * 100,000 records never holds the loop for long. A slice also ends once it has run
 * `eventLoopSliceMs`.
 */
export const publishIndexSliceRecords = 2048;

/**
 * Published records waiting to be folded into the derived indexes, at most, before a one-shot
 * append or a seal waits for them to catch up: a bulk load of one-shot commits publishes faster
 * than the indexes take records, and every queued record is held in memory (a few hundred bytes
 * each, its payload included). Two seconds or so of indexing; a single commit larger than this
 * is queued whole, and the next write waits for it.
 */
export const publishIndexBacklogRecordsMax = 250_000;

/**
 * Key occurrences a key index (and, apart, the fingerprint index: one per record) holds in
 * memory, at most, for sealed segments whose dictionaries are not built yet, before a one-shot
 * append or a seal waits for the builds to catch up. The builds run one at a time in the
 * background and lag a bulk load; unbounded, the held keys grew with the input. Each held
 * occurrence costs 40 to 70 bytes (its columns, grown by doubling, and its key in the table), so
 * this is 40 to 70 MB per index. It is about what a full default segment of small records holds
 * (64 MiB of records of 70 bytes stored, payloads deduplicated: some 900,000), so writes go on
 * while one segment is built and wait once the next has piled up behind it: with 600,000, every
 * full segment's seal stopped the writer until its build was done (a load of 3 million lines took
 * 69 s instead of 50 to 54 s), for 60 to 190 MB less at the peak.
 */
export const keyBuildBacklogKeysMax = 1_000_000;

/**
 * Commits per page of a segment summary. A page is the unit a sealed segment's commit records
 * are read, decoded and cached in: a point lookup (a `get` in a feed of millions of one-record
 * commits) decodes the page holding its commit, and 128 commits (about 6 KiB) decode in tens of
 * microseconds where 1,024 took about a millisecond. Written into each summary's head, so a
 * change needs no format version.
 */
export const summaryPageCommits = 128;

/**
 * Summary pages of decoded commit records kept in memory, least recently used out first. A feed
 * keeps its active segment's commits in memory; those of sealed segments are read from their
 * summaries a page at a time, so memory does not grow with the number of commits. 512 pages hold
 * 65,536 commits, a few tens of megabytes at most.
 */
export const commitPagesCachedMax = 512;

/**
 * Group commits of one lane in flight at once: one being synced while the next is prepared and
 * written behind it. Two overlap the CPU work with the disk; more would only widen the tail a
 * power loss may tear (every group in flight) without another fdatasync to overlap.
 */
export const groupsInFlightMax = 2;

/**
 * Group commits of one lane in flight at once in a replicated feed: each waits mostly on its
 * slot's PUT (milliseconds on a server nearby, hundreds on S3), not on the disk, so more of them
 * overlap those round trips; the local writes behind them still finish in order, each group
 * naming the durable end it was written after, so a power loss tears only unacknowledged groups.
 */
export const replicatedGroupsInFlightMax = 8;

/**
 * Rows in one batch of a columnar read at most. A commit of more records is read as several
 * batches: a batch's columns (about 70 bytes a row) then stay within the CPU's L2 cache while
 * they are decoded and consumed, where one set of columns per 100,000-record commit did not.
 */
export const columnBatchRowsMax = 4096;

/**
 * An index fetch reads manifest entries, and payloads, that lie at most this many bytes apart
 * with one read: a positional read costs a system call (microseconds in a VM), reading the
 * bytes between two nearby hits from the page cache costs far less.
 */
export const coalescedReadGapBytes = 16 * 1024;

/** One coalesced read of an index fetch spans at most this many bytes. */
export const coalescedReadBytesMax = 1024 * 1024;

/**
 * Bytes of consecutive commit runs read at once when a scan or a derived file's build walks a
 * segment: a segment of many small commits costs one read (a trip through the thread pool) per
 * stretch, not one per commit, and no stretch holds more than this in memory.
 */
export const runsReadBytesMax = 8 * 1024 * 1024;

/**
 * Payloads stored by other runs that one run's decode reads side by side: a run's repeated
 * payloads lie all over its segment, and read one after another each waits for a trip through
 * the thread pool (or, from evicted history, a request). Eight keep a few requests in flight
 * without a run flooding the pool.
 */
export const externalReadsInFlightMax = 8;

/**
 * Derived files' heads (index files, key and fingerprint dictionaries) an open reads side by
 * side: a feed of hundreds of sealed segments read them one after another for most of its open
 * (a fork of a 10M-record feed opened in about 40 ms instead of 10). Eight keep the thread pool
 * busy without taking it from the process's other reads and writes.
 */
export const headReadsInFlightMax = 8;

/**
 * Bytes of the first stretch a read takes (each next one doubles, up to `runsReadBytesMax`): a
 * read that wants its first records soon — a consumer following a cursor, a page of a few —
 * waits for a short read, not for eight MiB (from object storage, eight blocks).
 */
export const runsReadBytesFirst = 256 * 1024;

/**
 * A run longer than `runsReadBytesMax`, read into a buffer of its own, gets this fraction more
 * room than it needs. Commits of one size make runs of nearly one length: a buffer of exactly
 * one run's length fitted no run a byte longer, so an export read most of its large runs into
 * new memory, faulting in and zeroing every page of it (a tenth of its page faults).
 */
export const runBufferHeadroomFraction = 1 / 8;

/**
 * Small synchronous reads (payloads of index hits and point lookups, up to
 * `readSlabPieceBytesMax`) are carved out of shared slabs of this many bytes.
 */
export const readSlabBytes = 64 * 1024;
export const readSlabPieceBytesMax = 4 * 1024;

/** Slots a key table (a latest-mode read's winners) starts with; it doubles as keys arrive. */
export const keyTableSlotsInitial = 1024;

/**
 * Tables a segment's key occurrences are split over (a power of two), by a hash of the key: a
 * merged segment holds millions of fingerprints, and one table rehashing millions of entries at
 * once would hold the event loop.
 */
export const segmentKeyShards = 64;

/**
 * Slots each of those tables starts with: few, because every segment's keys are held in all the
 * shards from its first record, and doubling is cheap.
 */
export const segmentKeyShardSlotsInitial = 16;

/**
 * Code units a string key table passes to `String.fromCharCode` at once when it gives a key
 * back: far below the engine's limit on a call's arguments, for keys however long.
 */
export const keyTableDecodeChunkUnits = 8192;

/**
 * How often a feed with a retention policy checks it on its own, besides after each history
 * segment it finishes: an age limit is crossed by the clock, not by a write. A minute keeps the
 * check (a walk over the segments' extents) negligible and trims at most a minute late.
 */
export const retentionCheckIntervalMs = 60_000;

/**
 * How long a trimmed segment's file descriptor stays open after the segment left the feed: a
 * read that looked the segment up just before the trim has its read in flight and finishes;
 * later lookups fail with `TRIMMED`. The disk space comes back when it closes.
 */
export const trimmedSegmentCloseDelayMs = 1_000;

/** The largest age limit a retention policy takes: about 100 years, in milliseconds. */
export const retentionAgeMsMax = 100 * 365 * 24 * 60 * 60 * 1000;

/**
 * An export closes a file at the first batch boundary past this many bytes of records read
 * (payloads, keys, tags, fingerprints). A file's records are held until it is written, because
 * a file's batches go to its export worker together: this bounds that memory (twice over: one
 * file is written on the export worker while the next is read), and keeps each file a size
 * tools handle whole.
 */
export const exportFileBytesTarget = 128 * 1024 * 1024;

/**
 * An export finds which payloads are UTF-8 text (the rows its `payloadText` column holds) this
 * many rows at a time: one check of their bytes together answers for all of them when they are
 * all text, and only a chunk that holds a payload that is not is checked again row by row. A
 * check per row cost a call and a view per record; a larger chunk checks more rows one by one
 * for each binary payload among text ones (1 in 1,000 costs 64 checks per 1,000 rows).
 */
export const exportTextCheckRows = 64;

/**
 * An export's Arrow record batches, and so its Parquet row groups, hold at most this many rows.
 * A reader decodes a row group at a time: with payloads of a few hundred bytes this is some
 * tens of megabytes, which any reader holds comfortably, while larger groups compress no better.
 */
export const exportRowGroupRowsMax = 65_536;

/**
 * … and at most about this many bytes of record data, so a feed of large payloads still gives
 * row groups a reader can hold in memory.
 */
export const exportRowGroupBytesMax = 64 * 1024 * 1024;

/**
 * A read as NDJSON (`feed.readLines`: the CLI's `read`, the server's record reads) hands out
 * lines in chunks of about this many bytes: many small commits' lines go out in one write (a
 * write per one-record commit was most of the cost of streaming such a feed), and a chunk is
 * small enough that a slow reader holds little and the first lines leave at once.
 */
export const readLinesChunkBytes = 256 * 1024;

/**
 * The first chunk of a read as NDJSON takes this many bytes (or what its first batch needs);
 * each next one twice the last, up to `readLinesChunkBytes`: a read of one small commit, as a
 * long-poll makes, allocates little.
 */
export const readLinesFirstChunkBytes = 8 * 1024;

/**
 * A read as NDJSON writes the lines of a batch of fewer rows than this in JavaScript, the same
 * bytes, rather than through the kernels: handing a batch's columns to the native kernel costs
 * about as much as making a dozen lines one record at a time (a tag query's batches hold a
 * record or a few each, one per commit it hits).
 */
export const readLinesKernelRowsMin = 16;

/** An NDJSON export writes a batch's lines at a time, into buffers of at least this many bytes (doubled until a batch fits). */
export const exportNdjsonWriteBytes = 1024 * 1024;

/**
 * A merge writes the merged segment in groups of about this many bytes: a group is the unit
 * recovery walks, and one of a few MiB keeps the walk short without holding much in memory.
 */
export const mergeGroupBytesTarget = 4 * 1024 * 1024;

/**
 * Key compaction turns the event loop every this many records while it decides which to keep:
 * each decision is a key-index lookup of several microseconds, mostly answered from memory
 * (microtasks alone never let timers or I/O in) and walking several dictionaries when the
 * winner is old, so a slice of 256 is a few milliseconds.
 */
export const compactionLookupSliceRecords = 256;

/**
 * A merge joins adjacent sealed segments while the merged one stays at most this size: large
 * enough that a feed of billions of records has a few thousand files, small enough that one
 * merge (which rewrites its segments) takes seconds, and that a merged segment's index files and
 * dictionaries stay a size their builds handle.
 */
export const mergedSegmentBytesMax = 512 * 1024 * 1024;

/**
 * Merging starts on its own when a feed has more sealed segments than this: a merge rewrites
 * data (tens of thousands of records a second on the event loop's thread today), while up to a
 * few dozen files cost little — a key lookup passes their Bloom filters in microseconds, an
 * open reads their summaries' heads. 64 default-size segments is 4 GiB of history.
 */
export const mergeSegmentsTrigger = 64;

/**
 * How long a merge's switch-over waits for reads holding the read gate before it is put off:
 * a read that holds an iteration open (a slow consumer) must not be broken, nor new reads kept
 * waiting behind it for long.
 */
export const mergeSwitchWaitMs = 2_000;

/**
 * An export file's writes run behind its conversion: up to this many bytes may wait to be
 * written while the next are made, so the disk and the CPU work at once rather than in turns.
 * A few NDJSON buffers or Arrow record batches' worth: enough to cover a write's latency.
 * Direct writes may pass it by one write (an Arrow group's payload buffer is larger than the
 * bound), so that the disk is never left with no write while the next bytes are made.
 */
export const exportWritesPendingBytesMax = 8 * 1024 * 1024;

/**
 * Export files converted, hashed, written and synced at once, each on an export worker of its
 * own, while the event loop's thread reads the next file's batches. A file's conversion costs
 * several times its read, and its fsync waits on the disk, so one worker left both the reading
 * thread and the disk idle half the time; two keep a two-core machine busy. Each file in flight
 * holds its records in memory (about `exportFileBytesTarget`), so more would cost memory for
 * cores few machines running an export beside a store have spare. Never more than the machine's
 * cores.
 */
export const exportFilesInFlightMax = 2;

/**
 * How long the buffers export files were copied into for the workers (a file's records each,
 * about `exportFileBytesTarget`) are kept after the last file is written. An export's files
 * follow each other far closer than this, so each reuses the last one's pages rather than
 * faulting in new ones; a process that exported once does not hold them for good.
 */
export const exportSpareBuffersKeepMs = 1000;

/**
 * Ranges at least this long are copied by the kernels' `copyRange` when an export gathers a
 * column: V8 copies a range from a shared buffer byte by byte unless both ends share their
 * offset modulo 8 (3.5 GB/s against `memcpy`'s 10 and more), while a native call costs about
 * what copying a few hundred bytes does.
 */
export const copyRangeKernelBytesMin = 4096;

/**
 * An export file's written bytes are flushed to disk (an fdatasync started in the background)
 * each time this many more were written, while the conversion goes on. Left to the page cache,
 * nothing reaches the disk until the file's final fsync, which then waits for the whole file
 * while no CPU work is left to overlap it; flushed as it goes, the final fsync waits for the
 * last piece only.
 */
export const exportFlushEveryBytes = 32 * 1024 * 1024;

/**
 * Export files are written with `O_DIRECT` (where the kernels and the file system allow it) in
 * pieces of at least this many bytes (a multiple of the direct write alignment): a converter's
 * smaller writes (an Arrow file's buffers come a few kilobytes at a time) are gathered to this
 * size, larger ones go as they come. Each direct write waits for the device, so pieces too small
 * would pay that wait per kilobyte; a megabyte keeps the device streaming.
 */
export const exportDirectWriteBytes = 1024 * 1024;

/**
 * What a direct write's memory, file offset and length must be multiples of (`O_DIRECT` asks
 * for the device's logical block size): a multiple of every common one, 512 and 4096 bytes.
 * The native kernel's `DIRECT_ALIGNMENT_BYTES` (native/src/direct.rs) is the same number.
 */
export const directWriteAlignmentBytes = 4096;

/**
 * The shortest time between two `onProgress` calls of one operation (verify, compact, trim,
 * export), except the first and the last: a display redraws a few times a second at most, so
 * calling more often would only cost the operation time.
 */
export const progressIntervalMs = 100;

/**
 * A file larger than this goes to an object store in parts of this size (S3's multipart upload;
 * the last part may be shorter), one smaller in a single PUT. S3 refuses parts under 5 MiB (but
 * the last) and uploads of more than 10,000 parts; 8 MiB keeps the largest segment far inside
 * both, and keeps the memory an upload holds (one part per request in flight) small.
 */
export const objectPartBytes = 8 * 1024 * 1024;

/**
 * A file up to this size goes to an object store in one PUT, streamed from the file (past
 * `objectPartBytes`) rather than held in memory; a larger one in a multipart upload. One request
 * for a whole 64 MiB segment keeps a sealed segment's upload to a handful of requests (its five
 * files and its descriptor), which is what a billed object store charges by; multipart is kept
 * for the merged segments beyond it, where retrying one part instead of the whole file matters.
 */
export const objectSinglePutBytesMax = 96 * 1024 * 1024;

/**
 * The bytes a file streamed to an object store (a single PUT past `objectPartBytes`) is read in
 * at a time. Each chunk costs a turn of the event loop, which a writer laying runs keeps busy for
 * milliseconds at a time: with Node's default 64 KiB, a 64 MiB segment took 1,024 turns and over
 * ten seconds to go up while the writer ingested (measured: 10.7 s against 0.24 s with 4 MiB
 * chunks, the loop busy 10 ms a turn). 4 MiB: few turns, and little memory per upload.
 */
export const objectStreamChunkBytes = 4 * 1024 * 1024;

/** The fewest bytes S3 accepts in a multipart upload's part, the last one excepted. */
export const objectPartBytesMin = 5 * 1024 * 1024;

/** The most parts S3 accepts in one multipart upload. */
export const objectUploadPartsMax = 10_000;

/**
 * Parts of one upload sent at once: a single stream to an object store rarely fills the link,
 * and four parts in flight hold at most 32 MiB of the file in memory.
 */
export const objectPartsInFlightMax = 4;

/**
 * Keys asked for per page when an object store is listed (ListObjectsV2's `MaxKeys`): S3's own
 * most, so a history of thousands of segments lists in a few requests.
 */
export const objectListPageKeys = 1000;

/**
 * Keys deleted per request when an object store deletes many (DeleteObjects): S3's own most, so
 * a trim of many segments costs a request per thousand files.
 */
export const objectDeleteBatchKeys = 1000;

/**
 * Tries of one request to an object store (the first and its retries, with the SDK's backoff
 * between them) before a network failure or a 5xx answer is reported `UNAVAILABLE`: three is
 * the SDK's default, enough to ride out a dropped connection or a throttled moment without
 * holding a read for long.
 */
export const objectRequestAttemptsMax = 3;

/**
 * The longest an object store request may wait for a connection, in milliseconds: a host that
 * does not answer in this long is down, and the read or write fails (after retries) rather
 * than hanging.
 */
export const objectConnectMsMax = 10_000;

/**
 * The longest an object store request's socket may stay silent, in milliseconds: a stalled
 * transfer is abandoned and retried instead of holding a read forever. Long enough for a
 * server to start answering a ranged GET of a cold object.
 */
export const objectIdleMsMax = 60_000;

/**
 * Tiered files are checked in blocks of this size: a descriptor carries each block's CRC-32, and
 * a scan of a segment from object storage fetches whole blocks and checks each. A MiB: large
 * enough that a scan costs few requests (a 4 KiB ranged GET costs hundreds of times a local
 * read) and streams at the server's rate with a couple of blocks fetched ahead, small enough that
 * the first record of a cold segment waits for one MiB, not four (measured on loopback: a 4 MiB
 * block took ~35 ms through the SDK); a 64 MiB segment's descriptor holds 64 CRCs.
 */
export const tieringBlockBytes = 1024 * 1024;

/**
 * Blocks fetched ahead of a reader going through an evicted segment in order: two, so the next
 * request is always under way while a block is decoded, and a scan runs at the server's rate.
 */
export const remoteReadAheadBlocks = 2;

/**
 * A point read of evicted history (a `get`, an index fetch's entries and payloads) fetches this
 * many bytes around what it needs instead of whole blocks: every byte it uses is checked by its
 * own CRC (a manifest entry's, a payload's), and a 64 KiB ranged GET answers in a few
 * milliseconds where a block takes tens.
 */
export const remotePieceBytes = 64 * 1024;

/**
 * The largest synchronous read served in pieces (`remotePieceBytes`); a larger one fetches whole
 * blocks, checked against the descriptor's CRCs. A point lookup's entry fetch reaches this far
 * back into its run, where the payload of a record new in that run lies (a 256 KiB ranged GET
 * costs little more than a 64 KiB one, and saves the lookup a second request in turn).
 */
export const remotePointReadBytesMax = 4 * remotePieceBytes;

/**
 * The first wait, in milliseconds, before a failed tiering pass is tried again; each failure in
 * a row doubles it. Short, so a dropped connection costs a moment of lag, not minutes.
 */
export const tieringRetryMsMin = 250;

/**
 * The longest wait, in milliseconds, between tries of a failing tiering pass: an object store
 * down for an hour is asked every half minute, not hammered, and uploads resume soon after it
 * is back.
 */
export const tieringRetryMsMax = 30_000;

/**
 * Visibility lags (a segment's seal to its descriptor) a feed keeps for `info().tiering`'s
 * percentiles: the latest thousand, a few hours of full segments on a busy feed, in 8 KiB.
 */
export const tieringLagSamplesMax = 1000;

/**
 * Segments a feed's tiering log tracks at once: its state is one record of a state log (at most
 * `stateLogBytesMax`), about 30 bytes a segment. 20,000 segments of 64 MiB are over a TiB of
 * history; a feed that reaches it is refused more uploads with a clear error rather than a log
 * record that cannot be written.
 */
export const tieredSegmentsMax = 20_000;

/**
 * Blocks and pieces of evicted history a feed keeps in memory, in bytes: 64 MiB, a whole segment,
 * so a scan's blocks and those fetched ahead, and many point lookups' pieces, stay at hand while
 * another reader works elsewhere, in a bounded slice of memory.
 */
export const remoteBlockCacheBytes = 64 * tieringBlockBytes;

/**
 * How often a follower looks for segments its writer made visible since: each look is three GETs
 * (the boundary, the next ordinal's descriptor, the boundary again), so a followed feed costs
 * about six requests a second when idle, and a newly tiered segment is read by followers within
 * this much after its descriptor is created.
 */
export const followerRefreshMs = 500;

/**
 * The least time between two head hints of one feed in etcd, in milliseconds: a writer's
 * hints are coalesced so that a feed costs etcd at most twenty transactions a second however
 * fast it commits, and a hint lags the head by about this much at most.
 */
export const headHintIntervalMs = 50;

/**
 * How often a follower of a cluster (one that hears head hints from etcd) looks for new
 * segments without one, in milliseconds: a hint can lag or be lost with a watch that broke, so
 * it still polls, ten times less often than a follower without hints (`followerRefreshMs`).
 */
export const followerHintedRefreshMs = 5_000;

/**
 * How many segments a follower takes from object storage in place of the copies of them its
 * writer sent (the same commits, which its view already reads from those copies' open files)
 * before it opens a new view anyway. A new view builds the in-memory indexes of the copy's tail
 * again, which at full speed cost a follower as much as taking the tail itself; the view it keeps
 * holds the indexes of the copies in memory, a few tens of MB a 64 MiB segment. 4: a new view
 * every fifth roll, and at most about 300 MB held for copies.
 */
export const followerSegmentsReplacedInPlaceMax = 4;

/**
 * How long a follower keeps a view of a feed open after a newer one replaced it, at least (and
 * until no read holds it): a read's iterator made on the old view and first stepped within this
 * reads it; one first stepped later fails with `CLOSED` and is made again on the new one.
 */
export const followerViewGraceMs = 30_000;

/**
 * How long a writer holds a follower's request for its tail open when there is nothing new (a
 * long poll): a commit is answered at once, and an idle follower costs a request this often.
 */
export const followerTailWaitMs = 1_000;

/**
 * Bytes of tail groups a writer sends in one answer at most (a group larger than this goes
 * whole): a follower starting on a full active segment copies it in a few steps, each bounded
 * in memory on both sides.
 */
export const followerTailBytesMax = 8 * 1024 * 1024;

/**
 * How long a follower waits before asking its writer for the tail again after a failure, or
 * while the writer's active segment is one object storage does not reach yet.
 */
export const followerTailRetryMs = 250;

/**
 * Blocks one synchronous read of evicted history may fetch before it is called a bug: a read
 * reaches within one segment (a run references only its own segment's payloads), so at most a
 * segment's blocks — fewer than the cache holds — and each miss brings one.
 */
export const atHandFetchesMax = 64;

/**
 * The longest one request to etcd may take, in milliseconds, before the coordination store is
 * called unreachable (`UNAVAILABLE`): far above a healthy cluster's few milliseconds, and well
 * below the shortest useful lease, so that a producer learns of the outage while its lease is
 * still live and can say why.
 */
export const etcdRequestMsMax = 5_000;

/**
 * The TTL of a node's key in etcd, in seconds (kept alive three times a TTL): a node that died
 * leaves the cluster's list within this long; one that merely paused for less stays in it.
 */
export const clusterNodeTtlSeconds = 10;

/**
 * Tries of a lease acquisition whose transaction lost a race (another node changed the feed's
 * writer or epoch key between our read and our write) before it gives up with `LEASE_HELD`:
 * each loss means someone else made progress, so a few are enough.
 */
export const etcdTxnAttemptsMax = 8;

/**
 * How long the watch of the writer keys waits before it reconnects after its stream broke (etcd
 * restarting, a network blip), in milliseconds. On reconnecting it reads every writer key again,
 * so a lease lost meanwhile is noticed then at the latest; its expiry stops writes anyway.
 */
export const etcdWatchRetryMs = 250;

/**
 * The first wait, in milliseconds, before a replicated feed stores a slot again after object
 * storage failed to answer; each further failure doubles it, up to `slotPutRetryMsMax`. Short:
 * every acknowledgement of the feed waits on that slot.
 */
export const slotPutRetryMsMin = 50;

/**
 * The longest wait between two tries of a slot, in milliseconds: once object storage is back, a
 * replicated feed acknowledges again within this long.
 */
export const slotPutRetryMsMax = 2_000;

/**
 * Slots a replicated feed asks for one by one past the newest its listing named, before it calls
 * the listing unusable: S3 lists what it stored (strongly consistent), so the probe finds the few
 * a writer stored between the listing and now.
 */
export const slotsProbedMax = 1_000;

/**
 * A replicated feed looks for slots to retire after storing this many: often enough that the
 * slots waiting in object storage stay about a segment's groups, rarely enough that the check
 * (a walk of the tiering state) costs nothing next to the PUTs.
 */
export const slotsRetireEvery = 32;

/**
 * Slot numbers at the top that a replicated feed never retires, nor a new writer's fence skips:
 * twice the groups a writer has in flight. A writer that lost its lease may still hold that many
 * slots reserved and not stored; a new writer fences every free number among them (see
 * `SlotReplication.fence`), and a number retired there would look like one never stored.
 */
export const slotsFencedAroundNewest = 2 * replicatedGroupsInFlightMax;

/**
 * Descriptors a walk of object storage's history (`RemoteHistory.refresh`) reads at once, at
 * most. A walk reads one ordinal after another, and a failover or a new follower walks every
 * ordinal a feed ever tiered (merges add more): one round trip each made that seconds at 10^7
 * records. A walk reads as many at once as it has found in a row so far (1, 1, 2, 4, …), so a
 * refresh that finds one new segment or none still costs what it did, and one that finds many
 * reads at most this many past the end.
 */
export const descriptorReadsAtOnceMax = 16;

/**
 * Slots a failover's restore reads at once: enough to hide object storage's round trip (the
 * slots since the last uploaded segment are a segment's groups, hundreds), few enough not to
 * crowd a server that the live feeds' writes share.
 */
export const slotsReadConcurrently = 16;

/**
 * The shortest TTL, in milliseconds, a takeover holds a feed's writer key in etcd with while it
 * lays the feed out and opens it (then the grant's own TTL): opening a long history blocks the
 * event loop for up to seconds at a time, and a renewal that comes too late would hand the feed
 * to another node in the middle of the takeover.
 */
export const takeoverLeaseTtlMsMin = 10_000;

/**
 * Slots a replicated feed's writer moves into one pack once that many lie below the newest it
 * leaves alone: a takeover then reads one object for them rather than each (see
 * `slot-packs.ts`). Low enough that a takeover's reads stay few (a pack per this many groups),
 * high enough that packing costs one PUT per that many slot PUTs.
 */
export const slotsPerPackMin = 64;

/** Most slots in one pack: a takeover reads a segment's groups in a few GETs. */
export const slotsPerPackMax = 4_096;

/**
 * Most bytes of slots in one pack: the writer keeps the slots it has not packed in memory until
 * then, so this bounds what a replicated feed holds for packing (groups are up to a quarter of a
 * segment, so a pack of large groups holds a few).
 */
export const slotPackBytesMax = 16 * 1024 * 1024;

// The relations between the bounds above hold, or no process starts (see `limits-check.ts`).
checkLimits({
  objectSinglePutBytesMax,
  tieringBlockBytes,
  tieringRetryMsMin,
  tieringRetryMsMax,
  tieredSegmentsMax,
  groupWindowCommitsMax,
  groupWorkerBytesMax,
  groupReasonBytesMax,
  remoteBlockCacheBytes,
  atHandFetchesMax,
  fetchSparseHitsMax,
  remoteReadAheadBlocks,
  remotePieceBytes,
  remotePointReadBytesMax,
  runsReadBytesFirst,
  runsReadBytesMax,
  stateLogBytesMax,
  safeIntegerMax,
  frameHeaderBytes,
  frameControlBit,
  frameLengthMask,
  segmentHeaderBytes,
  segmentBytesFirst,
  segmentBytesMin,
  segmentBytesDefault,
  segmentBytesMax,
  mergedSegmentBytesMax,
  keyBytesMax,
  typeBytesMax,
  tagBytesMax,
  fingerprintBytesMax,
  messageBytesMax,
  typesPerFeedMax,
  leaseTtlMsMin,
  leaseTtlMsDefault,
  leaseTtlMsMax,
  retentionAgeMsMax,
  payloadDedupEntriesMax,
  payloadCacheBytesMax,
  payloadCacheBlockBytes,
  indexCacheBytesMax,
  tagFilterBytesMax,
  keyCacheBytesMax,
  keyWinnersHotReads,
  commitPagesCachedMax,
  summaryPageCommits,
  publishIndexSliceRecords,
  publishIndexBacklogRecordsMax,
  keyBuildBacklogKeysMax,
  groupsInFlightMax,
  exportFilesInFlightMax,
  rebuildBatchRowsMax,
  columnBatchRowsMax,
  readSlabBytes,
  readSlabPieceBytesMax,
  coalescedReadGapBytes,
  coalescedReadBytesMax,
  readLinesFirstChunkBytes,
  readLinesChunkBytes,
  keyTableSlotsInitial,
  segmentKeyShards,
  segmentKeyShardSlotsInitial,
  directWriteAlignmentBytes,
  exportDirectWriteBytes,
  objectPartBytes,
  objectPartBytesMin,
  objectUploadPartsMax,
  objectPartsInFlightMax,
  objectListPageKeys,
  objectDeleteBatchKeys,
  objectRequestAttemptsMax,
});
