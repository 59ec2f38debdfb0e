import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { RemoteStore } from '../../packages/client/src/index.js';
import { readExportManifest, verifyExport } from '../../packages/engine/src/index.js';
import { call, ndjson, startServer } from '../support/server.js';
import { temporaryDirectory } from '../support/store.js';

describe('export over HTTP', () => {
  it('writes under the export directory only, continues after a previous upTo, and answers the manifest', async () => {
    const exports = temporaryDirectory();
    const { url } = await startServer({ exportDirectory: exports });
    const store = await RemoteStore.open(url);
    const feed = await store.createFeed('f');
    await feed.append([{ payload: 'a', key: 'k' }, { payload: 'b' }]);
    const first = await feed.export({ format: 'ndjson', to: 'daily/1' });
    expect(first).toMatchObject({ feed: 'f', format: 'ndjson', mode: 'raw', after: 0, upTo: 1, records: 2 });
    expect(await readExportManifest(path.join(exports, 'daily/1'))).toEqual(first);
    await verifyExport(path.join(exports, 'daily/1'));
    await feed.append([{ payload: 'c' }]);
    expect(await feed.export({ format: 'parquet', to: 'daily/2', after: first.upTo })).toMatchObject({
      after: 1,
      upTo: 2,
      records: 1,
    });
    for (const to of ['../escape', '/abs', 'a/../../b', '.', 'a//b', '']) {
      await expect(feed.export({ format: 'ndjson', to }), to).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect(fs.readdirSync(path.dirname(exports)).filter((name) => name === 'escape')).toEqual([]);
    await expect(feed.export({ format: 'csv' as never, to: 'x' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('refuses to export without an export directory', async () => {
    const { url } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'a' }) });
    const refused = await call(url, 'POST', '/v1/feeds/f/export', { body: { format: 'ndjson', to: 'x' } });
    expect([refused.status, refused.json.error.code]).toEqual([400, 'INVALID_ARGUMENT']);
  });

  it('refuses a name that passes through a symbolic link, writing nothing outside the export directory', async () => {
    const exports = temporaryDirectory();
    const outside = temporaryDirectory();
    fs.symlinkSync(outside, path.join(exports, 'link'));
    const { url } = await startServer({ exportDirectory: exports });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'a' }) });
    for (const to of ['link', 'link/x', 'link/x/y']) {
      const refused = await call(url, 'POST', '/v1/feeds/f/export', { body: { format: 'ndjson', to } });
      expect([refused.status, refused.json.error.code, refused.json.error.reason], to).toEqual([
        400,
        'INVALID_ARGUMENT',
        'symlink',
      ]);
    }
    expect(fs.readdirSync(outside)).toEqual([]);
    // A real directory beside the link still works.
    expect((await call(url, 'POST', '/v1/feeds/f/export', { body: { format: 'ndjson', to: 'real/x' } })).status).toBe(
      200,
    );
  });

  it('refuses a name too long for the file system with 400, not 500', async () => {
    const exports = temporaryDirectory();
    const { url } = await startServer({ exportDirectory: exports });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'a' }) });
    for (const to of [
      'a'.repeat(300),
      `x/${'b'.repeat(256)}`,
      Array.from({ length: 8 }, () => 'c'.repeat(200)).join('/'),
    ]) {
      const refused = await call(url, 'POST', '/v1/feeds/f/export', { body: { format: 'ndjson', to } });
      expect([refused.status, refused.json.error.code], to.slice(0, 20)).toEqual([400, 'INVALID_ARGUMENT']);
    }
    expect(fs.readdirSync(exports)).toEqual([]);
  });
});
