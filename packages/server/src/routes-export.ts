/**
 * Export over HTTP: a feed's range written as NDJSON, Arrow IPC or Parquet files with a manifest,
 * into a directory under the server's export directory (`--exports DIR`). A remote caller names
 * the directory relative to it, and never a path of its own choosing, so an export cannot write
 * anywhere else on the server's disk. Without an export directory the route refuses.
 */
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { StreamStackError, type ExportFormat, type ReadMode } from '@streamstack/engine';
import type { ServerContext } from './context.js';
import { describe } from './route-schemas.js';
import { bodyObject } from './routes-feeds.js';

/** One to eight path segments of letters, digits, `.`, `_` and `-`, none of them `.` or `..`. */
const exportName = /^(?!.*(?:^|\/)\.\.?(?:\/|$))[A-Za-z0-9._-]+(?:\/[A-Za-z0-9._-]+){0,7}$/;

/** The directory under `root` that `to` names, or `INVALID_ARGUMENT`. */
export function exportDirectoryOf(root: string, to: unknown): string {
  if (typeof to !== 'string' || !exportName.test(to)) {
    throw new StreamStackError('INVALID_ARGUMENT', 'to names a directory under the export directory: segments of letters, digits, ".", "_" and "-", no "." or ".."', {
      details: { field: 'to' },
    });
  }
  return path.join(root, to);
}

export function addExportRoutes(app: FastifyInstance, ctx: ServerContext, exportRoot: string | undefined): void {
  app.post<{ Params: { feed: string } }>(
    '/v1/feeds/:feed/export',
    { config: { operation: 'admin' }, schema: describe('history', 'export a range to files under the export directory: {"format", "to", "after"?, "upTo"?, "mode"?}; answers the manifest') },
    async (request) => {
      if (exportRoot === undefined) throw new StreamStackError('INVALID_ARGUMENT', 'this server has no export directory (streamstack serve --exports DIR)');
      const { format, to, after, upTo, mode } = bodyObject(request.body);
      const directory = exportDirectoryOf(exportRoot, to);
      const feed = await ctx.feed(request.params.feed);
      const manifest = await feed.export({
        format: format as ExportFormat,
        to: directory,
        ...(after === undefined ? {} : { after: after as number }),
        ...(upTo === undefined ? {} : { upTo: upTo as number }),
        ...(mode === undefined ? {} : { mode: mode as ReadMode }),
      });
      return manifest;
    },
  );
}
