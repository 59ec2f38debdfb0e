// The coordinator's view of a commit is the storage layer's commit record; the API layer names
// it through here so that it depends only on the layer directly below.

export { ColumnBatch } from '../query/column-batch.js';
export type { ExportOptions, ExportProgress } from '../query/export.js';
export type { ExportedFile, ExportFormat, ExportManifest } from '../query/export-manifest.js';
export { readExportManifest, verifyExport } from '../query/export-manifest.js';
export type { Plan, Query, QueryItem } from '../query/planner.js';
export type { ReadMode, ReadOptions, RecordFilter } from '../query/read.js';
export type { StoredRecord } from '../query/snapshot.js';
export type { CommitRecord } from '../storage/commit-run.js';
export type { TornTail } from '../storage/runs.js';
export type { AppendCondition } from './conditions.js';
