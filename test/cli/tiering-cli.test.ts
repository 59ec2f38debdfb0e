/**
 * The command line's object storage settings, as a user sets them: `--object-store s3://…` or
 * `STREAMSTACK_OBJECT_STORE`, the endpoint beside it, and credentials only from the AWS
 * environment. Write commands upload in the background, `tier` waits for the uploads, `feed info`
 * shows how far they got; the secret and the SDK's Node-version warning never reach the output.
 */
import { describe, expect, it } from 'vitest';
import { cli } from '../support/cli.js';
import { objectStoreSuite } from '../support/object-store.js';
import { temporaryDirectory } from '../support/store.js';

const objects = objectStoreSuite('cli-tiering');
const bucket = 'cli-tiering';
const serverOf = () => objects.server();
const environment = (prefix: string) => objects.environment(prefix);

const lines = (count: number) =>
  Array.from({ length: count }, (_, n) =>
    JSON.stringify({ payload: `record ${n} ${'y'.repeat(60)}`, key: `k${n % 97}`, tags: [`t${n % 5}`] }),
  ).join('\n');

describe.skipIf(objects.missing)(objects.title('streamstack with --object-store'), () => {
  objects.start();

  it('uploads sealed segments from the environment settings; tier waits for them and feed info shows them', () => {
    const data = temporaryDirectory();
    const env = environment('cli/');
    expect(cli(data, ['feed', 'create', 'events'], '', env).status).toBe(0);
    const appended = cli(data, ['append', 'events', '--commit-every', '200'], lines(4000), env);
    expect(appended.status).toBe(0);
    const tiered = cli(data, ['tier', 'events'], '', env);
    expect(tiered.status).toBe(0);
    expect(tiered.lines[0]).toMatchObject({ feed: 'events', pendingSegments: 0, lastError: null });
    expect(tiered.lines[0]!.remoteSegments).toBeGreaterThanOrEqual(2);
    const info = cli(data, ['feed', 'info', 'events'], '', env);
    expect((info.lines[0]!.tiering as { remoteSegments: number }).remoteSegments).toBe(tiered.lines[0]!.remoteSegments);
    for (const result of [appended, tiered, info]) {
      const output = JSON.stringify(result.lines) + result.stderr;
      expect(output).not.toContain(serverOf().credentials.secretAccessKey);
      expect(result.stderr).not.toMatch(/NodeVersionSupportWarning|AWS SDK/);
    }

    // The flag says the same as the variable; a later open with the same settings goes on.
    const flagged = cli(
      data,
      ['--object-store', `s3://${bucket}/cli`, '--object-store-endpoint', serverOf().endpoint, 'tier', 'events'],
      '',
      { ...env, STREAMSTACK_OBJECT_STORE: '' },
    );
    expect(flagged.status).toBe(0);
    expect(flagged.lines[0]).toMatchObject({ remoteSegments: tiered.lines[0]!.remoteSegments, pendingSegments: 0 });

    // verify checks the copies in object storage too, without taking the directory's lock.
    const verified = cli(data, ['verify', 'events', '--quiet'], '', env);
    expect(verified.status).toBe(0);
    expect(verified.lines[0]).toMatchObject({ ok: true, remoteSegments: tiered.lines[0]!.remoteSegments });
    expect(cli(data, ['feed', 'info', 'events'], '', env).lines[0]!.tiering).toMatchObject({
      remoteSegments: tiered.lines[0]!.remoteSegments,
    });
  });

  it('--local-history-bytes-max evicts sealed history; read and get answer from object storage as before', () => {
    const data = temporaryDirectory();
    const env = environment('budget/');
    expect(cli(data, ['feed', 'create', 'events'], '', env).status).toBe(0);
    expect(cli(data, ['append', 'events', '--commit-every', '200'], lines(4000), env).status).toBe(0);
    const before = cli(data, ['read', 'events'], '', env);
    const key = cli(data, ['get', 'events', 'k5'], '', env);
    expect(before.lines).toHaveLength(4000);

    const tiered = cli(data, ['--local-history-bytes-max', '0', 'tier', 'events'], '', env);
    expect(tiered.status).toBe(0);
    expect(tiered.lines[0]).toMatchObject({ localHistoryBytes: 0, localHistoryBytesMax: 0 });
    expect(tiered.lines[0]!.evictedSegments).toBe(tiered.lines[0]!.remoteSegments);
    // A reader beside it, with the same settings from the environment, reads the evicted history back.
    const budgeted = { ...env, STREAMSTACK_LOCAL_HISTORY_BYTES_MAX: '0' };
    expect(cli(data, ['read', 'events'], '', budgeted).lines).toEqual(before.lines);
    expect(cli(data, ['get', 'events', 'k5'], '', budgeted).lines).toEqual(key.lines);
    // Without object storage, a read of evicted history says where its records are.
    const blind = cli(data, ['read', 'events'], '', { ...env, STREAMSTACK_OBJECT_STORE: '' });
    expect(blind.status).toBe(1);
    expect(blind.error).toMatchObject({ code: 'UNAVAILABLE' });
    expect(blind.error?.message).toContain('objectStore');
    // The budget alone is a usage error: there is nowhere to evict to.
    expect(
      cli(data, ['--local-history-bytes-max', '0', 'read', 'events'], '', { STREAMSTACK_OBJECT_STORE: '' }).status,
    ).toBe(2);
  });

  it('refuses an address that is not s3://, and tier on a store without object storage', () => {
    const data = temporaryDirectory();
    const env = environment('refusals/');
    expect(cli(data, ['feed', 'create', 'events'], '', env).status).toBe(0);
    const bad = cli(data, ['tier', 'events'], '', { ...env, STREAMSTACK_OBJECT_STORE: 'https://example.com/bucket' });
    expect(bad.status).toBe(1);
    expect(bad.error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    const plain = cli(data, ['tier', 'events'], '', { ...env, STREAMSTACK_OBJECT_STORE: '' });
    expect(plain.status).toBe(1);
    expect(plain.error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(plain.error?.message).toContain('objectStore');
  });

  it('creates a replicated feed, whose info says so; refuses one without object storage', () => {
    const data = temporaryDirectory();
    const env = environment('replicated/');
    const created = cli(data, ['feed', 'create', 'payments', '--durability', 'replicated'], '', env);
    expect(created.status).toBe(0);
    expect(created.lines[0]).toMatchObject({
      feed: 'payments',
      durability: 'replicated',
      replication: { lastSlot: 0, stalled: null },
    });
    expect(cli(data, ['append', 'payments'], lines(50), env).status).toBe(0);
    const info = cli(data, ['feed', 'info', 'payments'], '', env);
    expect(info.lines[0]).toMatchObject({ durability: 'replicated', records: 50 });
    // Without object storage there is nowhere to keep the slots: refused, nothing created.
    const bare = temporaryDirectory();
    const refused = cli(bare, ['feed', 'create', 'payments', '--durability', 'replicated']);
    expect(refused.status).toBe(1);
    expect(refused.error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(cli(bare, ['feed', 'list']).lines).toEqual([]);
    expect(cli(bare, ['feed', 'create', 'x', '--durability', 'quorum']).status).toBe(2);
  });
});
