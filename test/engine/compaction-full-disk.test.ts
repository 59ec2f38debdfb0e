/**
 * Key compaction and merging on a full disk: the rewrite of a segment needs room for the new
 * file beside the old ones, and when the disk has none the compaction fails with `IO` (`ENOSPC`)
 * and changes nothing a reader can see — no temporary file left, every read as before, the feed
 * still compactable once there is room again, and a clean `verify` after a reopen. A tmpfs mount
 * (root may mount one, and CI runs as root) is the full disk.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Feed } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

const mounted: string[] = [];
afterEach(() => {
  for (const mount of mounted.splice(0)) spawnSync('umount', ['-l', mount]);
});

function tmpfs(bytes: number): string {
  const mount = temporaryDirectory('streamstack-full-');
  const result = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes}`, 'tmpfs', mount]);
  expect(result.status, `mount tmpfs: ${result.stderr}`).toBe(0);
  mounted.push(mount);
  return mount;
}

/** Fills the file system holding `directory` until a write fails, leaving `spare` bytes free. */
function fill(directory: string, spare: number): string {
  const filler = path.join(directory, 'filler');
  const fd = fs.openSync(filler, 'w');
  const piece = Buffer.alloc(64 * 1024, 1);
  try {
    for (;;) fs.writeSync(fd, piece);
  } catch (error) {
    expect((error as NodeJS.ErrnoException).code).toBe('ENOSPC');
  } finally {
    fs.closeSync(fd);
  }
  fs.truncateSync(filler, Math.max(0, fs.statSync(filler).size - spare));
  return filler;
}

async function reads(feed: Feed, after: number) {
  return {
    raw: (await collect(feed.read({ after }))).map((record) => [record.position, record.key, record.version]),
    latest: (await collect(feed.read({ mode: 'latest' }))).map((record) => [record.position, record.key]),
  };
}

describe('key compaction on a full disk', () => {
  it('fails with IO ENOSPC, changes nothing, and succeeds once there is room', async () => {
    const mount = tmpfs(48 * 1024 * 1024);
    const data = path.join(mount, 'data');
    const store = await openStore(data, { kernels: tsKernels });
    const feed = await store.createFeed('f');
    for (let commit = 1; commit <= 400; commit++) {
      await feed.append([{ payload: `${commit}:${'x'.repeat(3000)}`, key: `k${commit % 9}`, version: commit }]);
    }
    await feed.writer.idle();
    const horizon = 300;
    const before = await reads(feed, horizon);
    const history = path.join(data, 'feeds', 'f', 'history');
    const files = fs.readdirSync(history).sort();
    const filler = fill(mount, 16 * 1024);

    const failed = await feed.compactKeys({ horizon }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failed).toMatchObject({ code: 'IO', details: { errno: 'ENOSPC' } });
    expect(fs.readdirSync(history).sort()).toEqual(files);
    expect((await feed.info()).horizon).toBe(horizon);
    expect(await reads(feed, horizon)).toEqual(before);
    const merged = await feed.compact().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(merged).toMatchObject({ code: 'IO', details: { errno: 'ENOSPC' } });
    expect(fs.readdirSync(history).sort()).toEqual(files);

    fs.rmSync(filler);
    const result = await feed.compactKeys({ horizon });
    expect(result.segmentsCompacted).toBeGreaterThan(0);
    expect(await reads(feed, horizon)).toEqual(before);
    await store.close();
    const again = await openStore(data, { kernels: tsKernels });
    const reopened = await again.feed('f');
    expect(await reads(reopened, horizon)).toEqual(before);
    expect((await again.verify('f'))[0].problems).toEqual([]);
    await again.close();
  });
});
