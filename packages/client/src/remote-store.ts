/**
 * A StreamStack server as a store: `feed`, `createFeed`, `feedInfo` and `verify` as the embedded
 * `Store` has them, over HTTP. Code moves between embedded and remote by changing how the store
 * is opened.
 *
 * @example
 * import { RemoteStore } from '@streamstack/client';
 * const store = await RemoteStore.open('http://127.0.0.1:4437', { token: process.env.STREAMSTACK_TOKEN });
 * const feed = await store.createFeed('events');
 * await feed.append([{ payload: 'hello', type: 'greeting', tags: ['user:1'] }]);
 */
import {
  type ClusterInfo,
  type FeedInfo,
  type FeedVerification,
  type LeaseGrant,
  type RetentionPolicy,
  StreamStackError,
  type TakeoverResult,
} from '@streamstack/protocol';
import { feedPath } from './paths.js';
import { RemoteFeed } from './remote-feed.js';
import { Transport, type TransportOptions } from './transport.js';

export type RemoteStoreOptions = TransportOptions;

export class RemoteStore {
  private closed = false;

  private constructor(private readonly transport: Transport) {}

  /** A store at `url` (the server's base URL); checks that the server answers. */
  static async open(url: string, options: RemoteStoreOptions = {}): Promise<RemoteStore> {
    const transport = new Transport(url.replace(/\/+$/, ''), options);
    await transport.json('GET', '/health');
    return new RemoteStore(transport);
  }

  /** A remote store is never read-only from here; the server's tokens decide what is allowed. */
  get readOnly(): boolean {
    return false;
  }

  private assertOpen(): void {
    if (this.closed) throw new StreamStackError('CLOSED', 'the store is closed');
  }

  async createFeed(
    name: string,
    options: { retention?: RetentionPolicy; durability?: 'local' | 'replicated' } = {},
  ): Promise<RemoteFeed> {
    this.assertOpen();
    await this.transport.json('POST', '/v1/feeds', { json: { name, ...options } });
    return new RemoteFeed(name, this.transport);
  }

  /** Forks feed `source` at commit `at` (default: its head) into a new feed `name` (see the embedded `store.forkFeed`). */
  async forkFeed(source: string, name: string, options: { at?: number } = {}): Promise<RemoteFeed> {
    this.assertOpen();
    await this.transport.json('POST', `${feedPath(source)}/fork`, { json: { name, ...options } });
    return new RemoteFeed(name, this.transport);
  }

  /** The feed `name`; `FEED_NOT_FOUND` if there is none. */
  async feed(name: string): Promise<RemoteFeed> {
    this.assertOpen();
    await this.transport.json('GET', feedPath(name));
    return new RemoteFeed(name, this.transport);
  }

  /** The names of every feed the token may read, sorted. */
  async feedNames(): Promise<string[]> {
    this.assertOpen();
    const names: string[] = [];
    for await (const line of this.transport.lines('/v1/feeds')) names.push(line.name as string);
    return names;
  }

  async feedInfo(name: string): Promise<FeedInfo> {
    this.assertOpen();
    return this.transport.json('GET', feedPath(name));
  }

  /** The cluster the server is a node of (`store.cluster()` over HTTP): its nodes, and who writes each leased feed. */
  async cluster(): Promise<ClusterInfo> {
    this.assertOpen();
    return this.transport.json('GET', '/v1/cluster');
  }

  /**
   * The writer lease of feed `name` (`store.acquireLease` over HTTP): a node of a cluster takes
   * a replicated feed it has no writable copy of over first.
   */
  async acquireLease(name: string, options: { holder: string; ttlMs?: number }): Promise<LeaseGrant> {
    this.assertOpen();
    return this.transport.json('POST', `${feedPath(name)}/lease`, { json: options });
  }

  /** Makes the server the writer of replicated feed `name` (`store.takeOver` over HTTP). */
  async takeOver(name: string, options: { holder: string; ttlMs?: number }): Promise<TakeoverResult> {
    this.assertOpen();
    return this.transport.json('POST', `${feedPath(name)}/takeover`, { json: options });
  }

  async verify(name?: string): Promise<FeedVerification[]> {
    this.assertOpen();
    if (name !== undefined) return [await this.transport.json<FeedVerification>('GET', `${feedPath(name)}/verify`)];
    const results: FeedVerification[] = [];
    for await (const line of this.transport.lines('/v1/verify')) results.push(line as unknown as FeedVerification);
    return results;
  }

  /** Marks the store closed: later calls fail with `CLOSED`, idle connections close. The server and its data stay up. */
  async close(): Promise<void> {
    this.closed = true;
    this.transport.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
