/**
 * A data directory is a StreamStack store or nothing (docs/formats.md, The data directory): a
 * marker names the store's format; a path that is a file, or a directory holding other things
 * and no marker, is refused with a typed error and left exactly as it was, through the engine and
 * the command line; a store of an unknown format is refused; a store made before markers opens
 * and gets one.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { storeFormatVersion } from '../../packages/engine/src/coordinator/opening/store-marker.js';
import { Store } from '../../packages/engine/src/index.js';
import { storeMarkerName } from '../../packages/engine/src/storage/feed-layout.js';
import { cli } from '../support/cli.js';
import { digestTree, openStore, temporaryDirectory } from '../support/store.js';

describe('the data directory', () => {
  it('refuses a directory of other files, for reads and writes, and changes nothing in it', async () => {
    const root = temporaryDirectory();
    fs.writeFileSync(path.join(root, 'passwd'), 'root:x:0:0::/root:/bin/bash\n');
    fs.mkdirSync(path.join(root, 'ssh'));
    const before = digestTree(root);
    for (const readOnly of [false, true]) {
      await expect(Store.open(root, { readOnly })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
        details: { path: path.resolve(root) },
      });
    }
    const result = cli(root, ['feed', 'create', 'x']);
    expect(result.status).toBe(1);
    expect(result.error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(String(result.error?.message)).toContain('not a StreamStack data directory');
    expect(digestTree(root)).toBe(before);
    expect(fs.readdirSync(root).sort()).toEqual(['passwd', 'ssh']);
  });

  it('refuses a path that is a file, and leaves it as it was', async () => {
    const root = temporaryDirectory();
    const file = path.join(root, 'data');
    fs.writeFileSync(file, 'not a store');
    await expect(Store.open(file)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(Store.open(file, { readOnly: true })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    const listed = cli(file, ['feed', 'list']);
    expect(listed.status).toBe(1);
    expect(listed.error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(fs.readFileSync(file, 'utf8')).toBe('not a store');
    expect(fs.readdirSync(root)).toEqual(['data']);
  });

  it('marks a new store with its format, and refuses a store of a format it does not know', async () => {
    const root = path.join(temporaryDirectory(), 'new');
    const store = await openStore(root);
    await store.createFeed('f');
    await store.close();
    expect(JSON.parse(fs.readFileSync(path.join(root, storeMarkerName), 'utf8'))).toEqual({
      format: storeFormatVersion,
    });

    fs.writeFileSync(path.join(root, storeMarkerName), JSON.stringify({ format: storeFormatVersion + 1 }));
    const before = digestTree(root);
    await expect(Store.open(root)).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      details: { format: storeFormatVersion + 1, supported: storeFormatVersion },
    });
    await expect(Store.open(root, { readOnly: true })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(digestTree(root)).toBe(before);
    fs.writeFileSync(path.join(root, storeMarkerName), 'garbage');
    await expect(Store.open(root)).rejects.toMatchObject({ code: 'CORRUPT' });
  });

  it('opens a store made before markers, and writes its marker on a read-write open only', async () => {
    const root = temporaryDirectory();
    const store = await openStore(root);
    await (await store.createFeed('f')).append([{ payload: 'kept' }]);
    await store.close();
    fs.rmSync(path.join(root, storeMarkerName));
    const readOnly = await Store.open(root, { readOnly: true });
    expect(await readOnly.feedNames()).toEqual(['f']);
    await readOnly.close();
    expect(fs.existsSync(path.join(root, storeMarkerName))).toBe(false);
    const writer = await openStore(root);
    expect(
      (await (await writer.feed('f')).readCommit(1)).map((record) => new TextDecoder().decode(record.payload)),
    ).toEqual(['kept']);
    await writer.close();
    expect(fs.existsSync(path.join(root, storeMarkerName))).toBe(true);
  });

  it('tags a new feed and its segments, and opens a feed made before tags as it was', async () => {
    const root = temporaryDirectory();
    const store = await openStore(root);
    const feed = await store.createFeed('f');
    for (let commit = 0; commit < 40; commit++)
      await feed.append([{ payload: `record ${commit} ${'x'.repeat(2000)}` }]);
    await store.close();
    const feedJson = path.join(root, 'feeds', 'f', 'feed.json');
    const metadata = JSON.parse(fs.readFileSync(feedJson, 'utf8')) as { tag: number };
    expect(metadata.tag).toBeGreaterThanOrEqual(1);
    const history = path.join(root, 'feeds', 'f', 'history');
    const segments = fs.readdirSync(history).filter((name) => name.endsWith('.hist'));
    expect(segments.length).toBeGreaterThan(1);
    // The tag is the header's u32 at offset 40, before its CRC.
    for (const name of segments) expect(fs.readFileSync(path.join(history, name)).readUInt32LE(40)).toBe(metadata.tag);

    // A feed made before tags: feed.json without one, and segments carrying 0.
    const { tag: _tag, ...untagged } = metadata as { tag: number } & Record<string, unknown>;
    fs.writeFileSync(feedJson, `${JSON.stringify(untagged)}\n`);
    const reopened = await openStore(root);
    const legacy = await reopened.feed('f');
    await legacy.append([{ payload: 'after' }]);
    expect((await legacy.info()).commits).toBe(41);
    await reopened.close();
    const check = await Store.open(root, { readOnly: true });
    expect((await check.verify('f'))[0].problems).toEqual([]);
    await check.close();
  });
});
