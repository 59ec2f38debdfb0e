/**
 * The names the API layer takes from the layers below the coordinator, gathered here so that it
 * imports only from the coordinator: export types and helpers, column batches, queries, read
 * options, stored records and commit records.
 */
// The coordinator's view of a commit is the storage layer's commit record; the API layer names
// it through here so that it depends only on the layer directly below.

export type { ExportOptions, ExportProgress } from '../../query/export/export.js';
export type { ExportedFile, ExportFormat, ExportManifest } from '../../query/export/export-manifest.js';
export { readExportManifest, verifyExport } from '../../query/export/export-manifest.js';
export { ColumnBatch } from '../../query/reading/column-batch.js';
export type { Plan, Query, QueryItem } from '../../query/reading/planner.js';
export type { ReadMode, ReadOptions, RecordFilter } from '../../query/reading/read.js';
export type { StoredRecord } from '../../query/reading/snapshot.js';
export type { CommitRecord } from '../../storage/commit-record.js';
export type { TornTail } from '../../storage/runs.js';
export type { AppendCondition } from './conditions.js';
