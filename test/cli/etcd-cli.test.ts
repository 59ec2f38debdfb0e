/**
 * The command line's `--etcd`, as a user of two machines sets it: the lease taken by one node is
 * refused to the other with the holder's node named, writes go under it, and reads never need
 * etcd (a machine-wide STREAMSTACK_ETCD pointing at an etcd that is down leaves them working).
 */
import { describe, expect, it } from 'vitest';
import { cli } from '../support/cli.js';
import { etcdBinary, etcdMissing } from '../support/etcd.mjs';
import { etcdForSuite } from '../support/etcd-suite.js';
import { temporaryDirectory } from '../support/store.js';
import { freePort } from '../support/versitygw.mjs';

const binary = etcdBinary();

describe.skipIf(binary === undefined)(
  binary === undefined ? `streamstack --etcd (skipped: ${etcdMissing})` : 'streamstack --etcd',
  () => {
    const etcdOf = etcdForSuite();

    it('a lease taken on one node is refused on another, naming the holder; its token writes', () => {
      const prefix = `/cli-${process.pid}/`;
      const [dataA, dataB] = [temporaryDirectory(), temporaryDirectory()];
      const nodeA = ['--etcd', etcdOf().endpoint, '--etcd-prefix', prefix, '--etcd-node', 'node-a'];
      const nodeB = {
        STREAMSTACK_ETCD: etcdOf().endpoint,
        STREAMSTACK_ETCD_PREFIX: prefix,
        STREAMSTACK_ETCD_NODE: 'node-b',
      };
      expect(cli(dataA, [...nodeA, 'feed', 'create', 'orders']).status).toBe(0);
      expect(cli(dataB, ['feed', 'create', 'orders'], '', nodeB).status).toBe(0);

      const granted = cli(dataA, [...nodeA, 'lease', 'acquire', 'orders', '--holder', 'ingest-1', '--ttl-ms', '30000']);
      expect(granted.status).toBe(0);
      const { token, epoch } = granted.lines[0] as { token: string; epoch: number };
      expect(epoch).toBe(1);

      // `cluster` reads etcd without joining: no node is up (each command left as it ended), the lease is held.
      const cluster = cli(dataB, ['cluster'], '', nodeB);
      expect(cluster.status).toBe(0);
      expect(cluster.lines[0]).toMatchObject({
        nodes: [],
        feeds: [{ feed: 'orders', holder: 'ingest-1', node: 'node-a', epoch: 1 }],
      });
      expect(JSON.stringify(cluster.lines)).not.toContain(token);

      const refused = cli(dataB, ['lease', 'acquire', 'orders', '--holder', 'ingest-2'], '', nodeB);
      expect(refused.status).toBe(1);
      expect(refused.error).toMatchObject({
        code: 'LEASE_HELD',
        node: 'node-a',
        holder: 'ingest-1',
        epoch: 1,
      });

      const opened = cli(dataA, [...nodeA, 'stream', 'open', 'orders', '--token', token]);
      expect(opened.status).toBe(0);
      const released = cli(dataA, [...nodeA, 'lease', 'release', 'orders', '--token', token]);
      expect(released.status).toBe(0);
      const next = cli(dataB, ['lease', 'acquire', 'orders', '--holder', 'ingest-2'], '', nodeB);
      expect(next.status).toBe(0);
      expect(next.lines[0]).toMatchObject({ epoch: 2 });
    });

    it('reads never ask etcd; writes fail UNAVAILABLE when it is down, touching nothing', async () => {
      const data = temporaryDirectory();
      expect(cli(data, ['feed', 'create', 'orders']).status).toBe(0);
      expect(cli(data, ['append', 'orders'], '{"payload":"one"}\n').status).toBe(0);
      const down = { STREAMSTACK_ETCD: `http://127.0.0.1:${await freePort()}` };
      const read = cli(data, ['read', 'orders'], '', down);
      expect(read.status).toBe(0);
      expect(read.lines).toHaveLength(1);
      const write = cli(data, ['append', 'orders'], '{"payload":"two"}\n', down);
      expect(write.status).toBe(1);
      expect(write.error).toMatchObject({ code: 'UNAVAILABLE' });
      expect(cli(data, ['read', 'orders']).lines).toHaveLength(1);
    });

    it('--etcd-prefix without --etcd is a usage error, and so is cluster', () => {
      const result = cli(temporaryDirectory(), ['--etcd-prefix', '/x/', 'feed', 'list']);
      expect(result.status).toBe(2);
      expect(result.stderr).toContain('--etcd');
      const cluster = cli(temporaryDirectory(), ['cluster']);
      expect(cluster.status).toBe(2);
      expect(cluster.stderr).toContain('--etcd');
    });
  },
);
