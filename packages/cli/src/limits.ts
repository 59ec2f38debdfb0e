/**
 * The command line's own bounds, each with its unit last and why it is what it is (the engine's
 * are in `@streamstack/engine`'s `limits`).
 */
import { limits } from '@streamstack/engine';

/**
 * Records per batch that `append` hands the engine: a tenth of the engine's batch limit, so a
 * batch of small records is a few MB in memory and an acknowledgement comes every few tenths of
 * a second, while a group write still carries enough records to cost little per record.
 */
export const appendBatchRecordsMax = limits.batchRecordsMax / 10;

/**
 * Bytes of input lines per batch: large records fill a batch by size before they fill it by
 * count, so memory stays bounded (about twice this, parsed) however large the records are.
 */
export const appendBatchBytesMax = 16 * 1024 * 1024;

/**
 * The time to live of the lease `append` takes for an implicit stream (when no `--token` is
 * given), renewed every third of it while input arrives. Short, so that a killed append holds
 * the feed for seconds, not the engine's default half minute.
 */
export const implicitLeaseTtlMs = 10_000;

/**
 * Redraws per second of a progress bar at most: enough for the numbers to look alive, few enough
 * that drawing costs the command nothing it would notice.
 */
export const progressFps = 5;
