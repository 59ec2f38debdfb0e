/**
 * Prometheus metrics at `/metrics`: request latency, appends (records and payload bytes),
 * commits, live connections, and, at scrape time, each opened feed's group commits, its
 * subscriptions' lag and, for a tiered feed, its uploads. Each server has its own registry, so two servers in one process (as
 * in tests) never share or clash over metric names.
 *
 * A token sees only what it may read: series labelled with a feed only for the feeds its scope
 * covers, and process-wide series (request latency by route, Node's own metrics) only when it
 * covers every feed, since those sum what every token's requests did.
 */

import type { AppendRecord, Feed } from '@streamstack/engine';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

export class ServerMetrics {
  readonly registry = new Registry();

  readonly requestSeconds = new Histogram({
    name: 'streamstack_http_request_duration_seconds',
    help: 'HTTP request latency, by route and status.',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });

  readonly appendedRecords = new Counter({
    name: 'streamstack_appended_records_total',
    help: 'Records appended, by feed and kind (batch: to an open stream; one-shot: a commit of its own).',
    labelNames: ['feed', 'kind'] as const,
    registers: [this.registry],
  });

  readonly appendedBytes = new Counter({
    name: 'streamstack_appended_bytes_total',
    help: 'Payload bytes appended, by feed.',
    labelNames: ['feed'] as const,
    registers: [this.registry],
  });

  readonly commits = new Counter({
    name: 'streamstack_commits_total',
    help: 'Commits published through this server (one-shot appends and seals), by feed.',
    labelNames: ['feed'] as const,
    registers: [this.registry],
  });

  readonly liveReaders = new Gauge({
    name: 'streamstack_live_readers',
    help: 'Open live reads, by kind (sse, long-poll).',
    labelNames: ['kind'] as const,
    registers: [this.registry],
  });

  constructor(openFeeds: () => Promise<Feed[]>) {
    collectDefaultMetrics({ register: this.registry });
    // Gauges filled at scrape time from each opened feed: emptied first, so a closed feed's
    // series do not linger.
    const perFeed: PerFeedGauge = (name, help, labelNames, fill) => {
      const gauge = new Gauge({
        name,
        help,
        labelNames: ['feed', ...labelNames],
        registers: [this.registry],
        async collect() {
          this.reset();
          for (const feed of await openFeeds())
            await fill(feed, (labels, value) => gauge.set({ feed: feed.name, ...labels }, value));
        },
      });
    };
    addConsumerGauges(perFeed);
    perFeed(
      'streamstack_group_commits',
      'Group commits (one fdatasync each) and the requests they carried since the feed was opened.',
      ['count'],
      (feed, set) => {
        const stats = feed.groupCommitStats();
        set({ count: 'groups' }, stats.groups);
        set({ count: 'requests' }, stats.requests);
      },
    );
    // Tiering, for feeds of a store with object storage: what went up and what waits, as gauges
    // of the feed's counters since it was opened (a reopen starts them again, as a restart does).
    perFeed(
      'streamstack_tiering',
      'Tiering to object storage since the feed was opened: uploaded objects and bytes, requests, failed passes in a row, segments and bytes remote and pending, evicted segments, local history bytes, and reads of evicted history (block cache hits and misses, requests, bytes).',
      ['count'],
      async (feed, set) => {
        const info = (await feed.info()).tiering;
        if (!info) return;
        const counts = {
          uploaded_objects: info.uploadedObjects,
          uploaded_bytes: info.uploadedBytes,
          requests: info.requests,
          failures: info.failures,
          remote_segments: info.remoteSegments,
          remote_bytes: info.remoteBytes,
          pending_segments: info.pendingSegments,
          pending_bytes: info.pendingBytes,
          evicted_segments: info.evictedSegments,
          local_history_bytes: info.localHistoryBytes,
          cache_hits: info.remoteReads.hits,
          cache_misses: info.remoteReads.misses,
          read_requests: info.remoteReads.requests,
          read_bytes: info.remoteReads.bytesFetched,
        };
        for (const [count, value] of Object.entries(counts)) set({ count }, value);
      },
    );
    // A follower's syncs with object storage, and how old its copy is.
    perFeed(
      'streamstack_follower',
      'A follower since the feed was opened: syncs with object storage, those that found something new, their requests, failed syncs in a row, the milliseconds since the last one that succeeded, and with `follow` the commits and requests of the tail read from the writer.',
      ['count'],
      async (feed, set) => {
        const info = (await feed.info()).follower;
        if (!info) return;
        set({ count: 'syncs' }, info.syncs);
        set({ count: 'changes' }, info.changes);
        set({ count: 'requests' }, info.requests);
        set({ count: 'failures' }, info.failures);
        set({ count: 'age_ms' }, Math.max(0, Date.now() - info.syncedAt));
        if (info.tail) {
          set({ count: 'tail_commits' }, info.tail.commits);
          set({ count: 'tail_requests' }, info.tail.requests);
        }
      },
    );
  }

  /**
   * The labelled series each request and append adds to, by their labels joined: prom-client
   * hashes a label object on every call, which cost a one-record append more than its counting.
   * Counters and this histogram are never reset, so a series once made stays the one to use.
   */
  private readonly requestSeries = new Map<string, { observe(seconds: number): void }>();
  private readonly countSeries = new Map<string, { inc(value?: number): void }>();

  /** Counts one answered request in the latency histogram (the server's `onResponse`). */
  answered(method: string, route: string, status: number, seconds: number): void {
    const name = `${method} ${status} ${route}`;
    let series = this.requestSeries.get(name);
    if (!series) {
      series = this.requestSeconds.labels({ method, route, status: String(status) });
      this.requestSeries.set(name, series);
    }
    series.observe(seconds);
  }

  /** Counts an accepted append of `records` to `feed`. */
  appended(feed: string, kind: 'batch' | 'one-shot', records: readonly AppendRecord[]): void {
    let bytes = 0;
    for (const record of records)
      bytes += typeof record.payload === 'string' ? Buffer.byteLength(record.payload) : record.payload.length;
    this.counted(`records ${kind} ${feed}`, () => this.appendedRecords.labels({ feed, kind })).inc(records.length);
    this.counted(`bytes ${feed}`, () => this.appendedBytes.labels({ feed })).inc(bytes);
  }

  /** Counts a commit published through this server. */
  committed(feed: string): void {
    this.counted(`commits ${feed}`, () => this.commits.labels({ feed })).inc();
  }

  private counted(name: string, make: () => { inc(value?: number): void }): { inc(value?: number): void } {
    let series = this.countSeries.get(name);
    if (!series) {
      series = make();
      this.countSeries.set(name, series);
    }
    return series;
  }
}

/** Registers a gauge filled at scrape time from each opened feed (`ServerMetrics`' constructor). */
type PerFeedGauge = (
  name: string,
  help: string,
  labelNames: readonly string[],
  fill: (feed: Feed, set: (labels: Record<string, string>, value: number) => void) => Promise<void> | void,
) => void;

/** What consumers stand at: each subscription's lag, and each subscription group's work. */
function addConsumerGauges(perFeed: PerFeedGauge): void {
  // The same lag, counted in commits and in records: one gauge each, filled the same way.
  for (const unit of ['commits', 'records'] as const) {
    perFeed(
      `streamstack_subscription_lag_${unit}`,
      `How many ${unit} a subscription is behind the head.`,
      ['subscription'],
      async (feed, set) => {
        for (const subscription of await feed.subscriptions())
          set({ subscription: subscription.name }, subscription.lag[unit]);
      },
    );
  }
  perFeed(
    'streamstack_subscription_group',
    "Subscription groups: commits held by workers now, given back and waiting, settled past the cursor, and totals acked, parked and redelivered. (Each group's lag is its subscription's.)",
    ['group', 'count'],
    async (feed, set) => {
      // A store that does not write has no groups (READ_ONLY): nothing to report.
      const groups = await feed.subscriptionGroups().catch(() => []);
      for (const group of groups) {
        const counts = {
          held: group.held,
          released: group.released,
          settled_ahead: group.settledAhead,
          acked: group.acked,
          parked: group.parked,
          redelivered: group.redelivered,
        };
        for (const [count, value] of Object.entries(counts)) set({ group: group.name, count }, value);
      }
    },
  );
}

/** The `feed` label of one sample line of the Prometheus text format, unescaped; undefined without one. */
function feedLabelOf(line: string): string | undefined {
  const match = /[{,]feed="((?:[^"\\]|\\.)*)"/.exec(line);
  if (!match) return undefined;
  return match[1]!.replace(/\\(["\\n])/g, (_all, escaped: string) => (escaped === 'n' ? '\n' : escaped));
}

/**
 * The Prometheus text `text` with only the series a reader may see: a sample labelled with a
 * feed when `feedVisible` says so, a sample without one when `globalVisible`. A family left
 * without samples loses its `# HELP` and `# TYPE` lines too, so no feed's name leaks through them.
 */
export function filterMetricsText(
  text: string,
  feedVisible: (feed: string) => boolean,
  globalVisible: boolean,
): string {
  const out: string[] = [];
  let header: string[] = [];
  let samples: string[] = [];
  const flush = () => {
    if (samples.length > 0) out.push(...header, ...samples);
    header = [];
    samples = [];
  };
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      // A new family starts at its HELP line (or a TYPE line after samples).
      if (line.startsWith('# HELP') || samples.length > 0) flush();
      header.push(line);
      continue;
    }
    const feed = feedLabelOf(line);
    if (feed === undefined ? globalVisible : feedVisible(feed)) samples.push(line);
  }
  flush();
  return out.length === 0 ? '' : `${out.join('\n')}\n`;
}
