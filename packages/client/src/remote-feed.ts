/**
 * A feed on a StreamStack server, with the embedded `Feed`'s names, arguments, results and
 * errors. Every call that asks the server returns a promise, and so does the embedded one
 * (`info`, `head`, `stream`, `activeStream`, `subscription`, `subscriptions`, `diskUse`), so code
 * moves between the two unchanged.
 *
 * @example
 * const store = await RemoteStore.open('http://127.0.0.1:4437');
 * const feed = await store.feed('orders');
 * await feed.append([{ payload: '{"id":1}', key: 'order-1' }]);
 * for await (const { commit, records } of feed.follow({ after: 0, signal })) console.log(commit.commit, records.length);
 */
import {
  type AppendCondition,
  type AppendRecord,
  type Commit,
  type CommitRecords,
  type ExportManifest,
  type ExportOptions,
  type FeedDiskUse,
  type FeedInfo,
  type KeyCompactionRequest,
  type KeyCompactionResult,
  type LeaseGrant,
  type MergeResult,
  type ReadOptions,
  type RetentionInfo,
  type RetentionPolicy,
  type StoredRecord,
  StreamStackError,
  type SubscriptionGroupInfo,
  type SubscriptionGroupOptions,
  type SubscriptionInfo,
  storedRecordFromLine,
  type TrimResult,
} from '@streamstack/protocol';
import { serverEvents } from './event-stream.js';
import { conditionQuery, feedPath, readQuery, recordLines } from './paths.js';
import { RemoteStream } from './remote-stream.js';
import { RemoteSubscription } from './remote-subscription.js';
import { RemoteSubscriptionGroup } from './remote-subscription-group.js';
import { type Answer, errorFromBody, type Transport } from './transport.js';

/** How long `follow` waits before it reconnects a dropped event stream. */
const reconnectMs = 250;

/** How many failed reconnects in a row `follow` makes before it gives up (about 10 s). */
const reconnectAttemptsMax = 40;

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
function abortableDelay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export class RemoteFeed {
  /** @internal */
  constructor(
    readonly name: string,
    /** @internal */
    readonly transport: Transport,
  ) {}

  private get path(): string {
    return feedPath(this.name);
  }

  acquireLease(options: { holder: string; ttlMs?: number }): Promise<LeaseGrant> {
    return this.transport.json('POST', `${this.path}/lease`, { json: options });
  }

  renewLease(options: { token: string; ttlMs?: number }): Promise<LeaseGrant> {
    return this.transport.json('PUT', `${this.path}/lease`, {
      json: options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs },
      headers: { 'ss-fencing-token': options.token },
    });
  }

  async releaseLease(options: { token: string }): Promise<void> {
    await this.transport.json('DELETE', `${this.path}/lease`, { headers: { 'ss-fencing-token': options.token } });
  }

  async openStream(options: { token: string; message?: string }): Promise<RemoteStream> {
    const { stream } = await this.transport.json<{ stream: string }>('POST', `${this.path}/streams`, {
      json: options.message === undefined ? {} : { message: options.message },
      headers: { 'ss-fencing-token': options.token },
    });
    return new RemoteStream(this, stream);
  }

  /** The stream `id`, open, sealed or aborted; `STREAM_NOT_FOUND` if the feed does not know it. */
  async stream(id: string): Promise<RemoteStream> {
    if (typeof id !== 'string' || id.length === 0)
      throw new StreamStackError('INVALID_ARGUMENT', 'a stream id is a non-empty string');
    const stream = new RemoteStream(this, id);
    await stream.info();
    return stream;
  }

  /** The open stream, if there is one. */
  async activeStream(): Promise<RemoteStream | undefined> {
    const { activeStream } = await this.info();
    return activeStream === null ? undefined : new RemoteStream(this, activeStream);
  }

  /** One-shot append: the records become one commit of their own, if `condition` holds. */
  append(
    records: readonly AppendRecord[],
    options: { token?: string; message?: string; condition?: AppendCondition } = {},
  ): Promise<Commit> {
    let lines: Record<string, unknown>[];
    try {
      lines = recordLines(records);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.transport.json('POST', `${this.path}/records`, {
      lines,
      query: { message: options.message, ...conditionQuery(options.condition) },
      headers: { 'ss-fencing-token': options.token },
    });
  }

  /** The commit history after `after`, oldest first, at most `limit` commits. */
  async *commits(options: { after?: number; limit?: number; signal?: AbortSignal } = {}): AsyncGenerator<Commit> {
    for await (const line of this.transport.lines(`${this.path}/commits`, {
      query: { after: options.after, limit: options.limit },
      ...(options.signal ? { signal: options.signal } : {}),
    })) {
      yield line as unknown as Commit;
    }
  }

  /** Records after `after` over a snapshot taken by the server now, in RAW, dedup or latest mode. */
  async *read(options: ReadOptions = {}): AsyncGenerator<StoredRecord> {
    for await (const line of this.transport.lines(`${this.path}/records`, {
      query: readQuery(options),
      ...(options.signal ? { signal: options.signal } : {}),
    })) {
      yield storedRecordFromLine(line);
    }
  }

  /**
   * `read` as NDJSON bytes, in chunks of whole lines: the server's record lines as they arrive,
   * the same bytes the embedded `readLines` gives, with nothing decoded on the way.
   *
   * @example
   * for await (const chunk of feed.readLines({ mode: 'latest' })) process.stdout.write(chunk);
   */
  async *readLines(options: ReadOptions = {}): AsyncGenerator<Uint8Array> {
    yield* this.transport.lineChunks(`${this.path}/records`, {
      query: readQuery(options),
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }

  /** The batch form of `read`: one commit's records per batch. */
  async *readBatches(options: ReadOptions = {}): AsyncGenerator<StoredRecord[]> {
    let batch: StoredRecord[] = [];
    for await (const record of this.read(options)) {
      if (batch.length > 0 && batch[0]!.commit !== record.commit) {
        yield batch;
        batch = [];
      }
      batch.push(record);
    }
    if (batch.length > 0) yield batch;
  }

  /** The records of commit `commit`, in position order. */
  async readCommit(commit: number): Promise<StoredRecord[]> {
    const records: StoredRecord[] = [];
    for await (const line of this.transport.lines(`${this.path}/commits/${encodeURIComponent(String(commit))}/records`))
      records.push(storedRecordFromLine(line));
    return records;
  }

  /** The current value of `key` as of `asOf` (default: the head), or undefined. */
  async get(key: string, options: { asOf?: number } = {}): Promise<StoredRecord | undefined> {
    if (typeof key !== 'string' || key.length === 0)
      throw new StreamStackError('INVALID_ARGUMENT', 'a key is a non-empty string');
    try {
      return storedRecordFromLine(
        await this.transport.json('GET', `${this.path}/keys/${encodeURIComponent(key)}`, {
          query: { asOf: options.asOf },
        }),
      );
    } catch (error) {
      if (error instanceof StreamStackError && error.code === 'KEY_NOT_FOUND') return undefined;
      throw error;
    }
  }

  /**
   * Every commit after `after`, then each new one as it is published, until `signal` aborts:
   * one SSE connection, resumed with `Last-Event-ID` after the last commit received when it
   * drops or the server restarts, so nothing is skipped or delivered twice across a reconnect.
   * A server that stays unreachable for `reconnectAttemptsMax` tries fails it with `UNAVAILABLE`.
   */
  async *follow(options: { after?: number; signal?: AbortSignal } = {}): AsyncGenerator<CommitRecords> {
    const { signal } = options;
    let cursor = options.after;
    let failures = 0;
    for (let attempt = 0; ; attempt++) {
      // A reconnect waits a moment (the `retry:` the server asks for), so a flapping
      // connection does not become a busy loop.
      if (attempt > 0) await abortableDelay(reconnectMs, signal);
      signal?.throwIfAborted();
      let response: Answer;
      try {
        response = await this.transport.send('GET', `${this.path}/records`, {
          query: { after: cursor },
          headers: { accept: 'text/event-stream', 'last-event-id': cursor === undefined ? undefined : String(cursor) },
          ...(signal ? { signal } : {}),
        });
      } catch (error) {
        // Unreachable or draining (a restart, most likely): try again, up to a bound.
        if (error instanceof StreamStackError && error.code === 'UNAVAILABLE' && ++failures < reconnectAttemptsMax)
          continue;
        throw error;
      }
      failures = 0;
      try {
        for await (const event of serverEvents(response.body ?? [])) {
          if (event.event === 'error') throw errorFromBody(JSON.parse(event.data), 200);
          if (event.event !== 'commit') continue;
          const { commit, records } = JSON.parse(event.data) as { commit: Commit; records: Record<string, unknown>[] };
          signal?.throwIfAborted();
          yield { commit, records: records.map(storedRecordFromLine) };
          cursor = commit.commit;
        }
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        if (error instanceof StreamStackError) throw error;
        // The connection dropped mid-stream: reconnect after the last commit received.
      }
      // Ended or dropped (the server drains on shutdown): reconnect after the last commit.
    }
  }

  /** Forks this feed at commit `at` (default: the head) into a new feed `name` that shares its sealed history. */
  async fork(name: string, options: { at?: number } = {}): Promise<RemoteFeed> {
    await this.transport.json('POST', `${this.path}/fork`, { json: { name, ...options } });
    return new RemoteFeed(name, this.transport);
  }

  async createSubscription(name: string, options: { after?: number } = {}): Promise<RemoteSubscription> {
    await this.transport.json('POST', `${this.path}/subscriptions`, { json: { name, ...options } });
    return new RemoteSubscription(this, name);
  }

  /** The subscription `name`; `SUBSCRIPTION_NOT_FOUND` if there is none. */
  async subscription(name: string): Promise<RemoteSubscription> {
    const subscription = new RemoteSubscription(this, name);
    await subscription.info();
    return subscription;
  }

  /**
   * The subscription group `name`, created with `options` when there is none, else given the
   * options passed (see the embedded `feed.subscriptionGroup`).
   */
  async subscriptionGroup(name: string, options: SubscriptionGroupOptions = {}): Promise<RemoteSubscriptionGroup> {
    await this.transport.json('PUT', `${this.path}/groups/${encodeURIComponent(name)}`, { json: options });
    return new RemoteSubscriptionGroup(this, name);
  }

  /** The subscription group `name`; `SUBSCRIPTION_NOT_FOUND` if there is none. */
  async existingSubscriptionGroup(name: string): Promise<RemoteSubscriptionGroup> {
    const group = new RemoteSubscriptionGroup(this, name);
    await group.info();
    return group;
  }

  /** Every subscription group with its options, counts and lag, by name. */
  async subscriptionGroups(): Promise<SubscriptionGroupInfo[]> {
    const list: SubscriptionGroupInfo[] = [];
    for await (const line of this.transport.lines(`${this.path}/groups`))
      list.push(line as unknown as SubscriptionGroupInfo);
    return list;
  }

  /** Every subscription with its cursor and lag, by name. */
  async subscriptions(): Promise<SubscriptionInfo[]> {
    const list: SubscriptionInfo[] = [];
    for await (const line of this.transport.lines(`${this.path}/subscriptions`))
      list.push(line as unknown as SubscriptionInfo);
    return list;
  }

  /**
   * Exports a range to files on the server: `to` names a directory under the server's export
   * directory (`serve --exports DIR`), not a local path. `signal` and `onProgress` stay local
   * (the request is not cancelled, and no progress is reported). Answers the manifest.
   */
  export(options: ExportOptions): Promise<ExportManifest> {
    const { format, to, after, upTo, mode } = options;
    return this.transport.json('POST', `${this.path}/export`, { json: { format, to, after, upTo, mode } });
  }

  /** Merging compaction on the server (see the embedded `Feed.compact`). */
  compact(): Promise<MergeResult> {
    return this.transport.json('POST', `${this.path}/compact`, { json: {} });
  }

  /** Key compaction on the server up to `horizon` (see the embedded `Feed.compactKeys`; `signal` stays local). */
  compactKeys(options: KeyCompactionRequest): Promise<KeyCompactionResult> {
    const { horizon, force, keyless } = options;
    return this.transport.json('POST', `${this.path}/compact-keys`, { json: { horizon, force, keyless } });
  }

  trim(options: { before?: number; force?: boolean } = {}): Promise<TrimResult> {
    return this.transport.json('POST', `${this.path}/trim`, { json: options });
  }

  setRetention(policy: RetentionPolicy): Promise<RetentionInfo> {
    return this.transport.json('PUT', `${this.path}/retention`, { json: policy });
  }

  retention(): Promise<RetentionInfo> {
    return this.transport.json('GET', `${this.path}/retention`);
  }

  /** What the feed takes on the server's disk: history segments, files and allocated bytes. */
  diskUse(): Promise<FeedDiskUse> {
    return this.transport.json('GET', `${this.path}/disk`);
  }

  /** The latest commit, or undefined. */
  async head(): Promise<Commit | undefined> {
    return (await this.info()).head ?? undefined;
  }

  /** The feed's counts, head, lease, low mark, retention and horizon. */
  info(): Promise<FeedInfo> {
    return this.transport.json('GET', this.path);
  }
}
