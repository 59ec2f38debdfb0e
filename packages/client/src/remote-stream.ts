/** A stream of a remote feed, with the embedded `Stream`'s methods. */
import {
  type AppendCondition,
  type AppendRecord,
  type Commit,
  recordFromLine,
  type StreamInfo,
  type StreamRecord,
} from '@streamstack/protocol';
import { conditionQuery, feedPath, recordLines } from './paths.js';
import type { RemoteFeed } from './remote-feed.js';

export class RemoteStream {
  /** @internal */
  constructor(
    readonly feed: RemoteFeed,
    readonly id: string,
  ) {}

  private get path(): string {
    return `${feedPath(this.feed.name)}/streams/${encodeURIComponent(this.id)}`;
  }

  /** Appends one batch; with `expectedSeq`, `SEQ_MISMATCH` unless it starts at that seq. */
  async append(
    records: readonly AppendRecord[],
    options: { token: string; expectedSeq?: number },
  ): Promise<{ stream: string; firstSeq: number; lastSeq: number }> {
    return this.feed.transport.json('POST', `${this.path}/records`, {
      lines: recordLines(records),
      headers: {
        'ss-fencing-token': options.token,
        'ss-expected-seq': options.expectedSeq === undefined ? undefined : String(options.expectedSeq),
      },
    });
  }

  /** Seals the stream into one commit, if `condition` holds. */
  seal(options: { token: string; message?: string; condition?: AppendCondition }): Promise<Commit> {
    return this.feed.transport.json('POST', `${this.path}/seal`, {
      query: { message: options.message, ...conditionQuery(options.condition) },
      headers: { 'ss-fencing-token': options.token },
    });
  }

  async abort(options: { token: string }): Promise<void> {
    await this.feed.transport.json('POST', `${this.path}/abort`, { headers: { 'ss-fencing-token': options.token } });
  }

  /** The stream's records from `fromSeq` on: published ones once sealed, the WAL's while open. */
  async read(options: { fromSeq?: number } = {}): Promise<StreamRecord[]> {
    const records: StreamRecord[] = [];
    for await (const line of this.feed.transport.lines(`${this.path}/records`, { query: { fromSeq: options.fromSeq } }))
      records.push(recordFromLine(line));
    return records;
  }

  /** The stream's state: open (with its acknowledged record count), sealed (with its commit) or aborted. */
  info(): Promise<StreamInfo> {
    return this.feed.transport.json('GET', this.path);
  }
}
