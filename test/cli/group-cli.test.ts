/**
 * `streamstack group`: a subscription group driven from the command line, each step its own
 * process as a script's would be — claims persist between invocations, a nack on the last
 * delivery parks the commit in the dead-letter feed, key order holds, and errors are typed lines.
 */
import { describe, expect, it } from 'vitest';
import { cli } from '../support/cli.js';
import { temporaryDirectory } from '../support/store.js';

describe('streamstack group', () => {
  it('creates a group, claims, acks and nacks across invocations, and parks spent work', () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'jobs']);
    cli(data, ['append', 'jobs'], '{"payload":"first","key":"x"}\n');
    cli(data, ['append', 'jobs'], '{"payload":"second","key":"x"}\n');
    cli(data, ['append', 'jobs'], '{"payload":"other","key":"y"}\n');
    const created = cli(data, ['group', 'create', 'jobs', 'g', '--order', 'key', '--max-deliveries', '1']);
    expect(created.lines).toEqual([
      expect.objectContaining({ feed: 'jobs', group: 'g', orderedBy: 'key', maxDeliveries: 1, cursor: 0 }),
    ]);

    const claimed = cli(data, ['group', 'claim', 'jobs', 'g', '--worker', 'w1', '--max', '5']);
    // Commit 2 shares key x with commit 1, which is not settled: it waits.
    expect(claimed.lines.map((line) => [line.commit, line.delivery])).toEqual([
      [1, 1],
      [3, 1],
    ]);
    expect((claimed.lines[0]!.records as { payload: string }[])[0]!.payload).toBe('first');
    const wrongWorker = cli(data, ['group', 'ack', 'jobs', 'g', '1', '--worker', 'w2']);
    expect([wrongWorker.status, wrongWorker.error?.code, wrongWorker.error?.holder]).toEqual([
      1,
      'CLAIM_NOT_HELD',
      'w1',
    ]);
    expect(cli(data, ['group', 'nack', 'jobs', 'g', '1', '--worker', 'w1', '--reason', 'bad input']).lines).toEqual([
      { feed: 'jobs', group: 'g', commit: 1, outcome: 'parked', deliveries: 1 },
    ]);
    expect(cli(data, ['group', 'ack', 'jobs', 'g', '3', '--worker', 'w1']).lines).toEqual([
      { feed: 'jobs', group: 'g', commit: 3, acked: true },
    ]);
    expect(cli(data, ['group', 'claim', 'jobs', 'g', '--worker', 'w2']).lines.map((line) => line.commit)).toEqual([2]);
    cli(data, ['group', 'ack', 'jobs', 'g', '2', '--worker', 'w2']);

    expect(cli(data, ['group', 'list', 'jobs']).lines).toEqual([
      expect.objectContaining({ group: 'g', cursor: 3, acked: 2, parked: 1, held: 0 }),
    ]);
    const parked = cli(data, ['read', 'jobs.g.parked']).lines;
    expect(parked).toEqual([expect.objectContaining({ payload: 'first', key: 'x', tags: ['parked:jobs/g/1'] })]);
    const bad = cli(data, ['group', 'create', 'jobs', 'g2', '--max-deliveries', '0']);
    expect([bad.status, bad.error?.code]).toEqual([1, 'INVALID_ARGUMENT']);
    expect(cli(data, ['group', 'delete', 'jobs', 'g']).lines).toEqual([{ feed: 'jobs', group: 'g', deleted: true }]);
    expect(cli(data, ['group', 'info', 'jobs', 'g']).error?.code).toBe('SUBSCRIPTION_NOT_FOUND');
  });
});
