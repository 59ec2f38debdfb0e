// Suite `server`: the HTTP server against the embedded engine, measured in the same run.
//
// 1. Ingest: 64 concurrent producers append one-shot batches of 1 and of 100 tagged records to
//    one shared feed, over HTTP (the typed client, keep-alive connections, the server in a
//    process of its own) and embedded (64 async producers calling the engine in this process).
//    Each append is timed until it is acknowledged, that is durable. Runs alternate between the
//    two (embedded first, then HTTP first, …) so that noise from other work on the machine falls
//    on both; the ratio is the median of each round's HTTP / embedded.
// 2. Live delivery: one record at a time, the time from the append being sent to a live reader
//    receiving it, over SSE (the client's `follow`), over long-poll (raw `GET …/records?wait=`),
//    and embedded (`feed.follow`) for reference.
// 3. Full reads: a feed of 1M records of 200 random bytes (as UmaDB's comparison used), read
//    whole over HTTP (`GET …/records`, drained as raw bytes and its lines counted) and embedded
//    (`feed.readLines`, the very bytes the server sends; `feed.readColumns`, the engine's fastest
//    form; `feed.read`, records as objects), in alternating rounds; the target is HTTP over
//    embedded readLines, with the server's CPU per record.
// 4. Side by side with UmaDB's gRPC server, Node clients on both sides: appends, conditional
//    appends, uniqueness checks, reads by tag and a full read (bench/server-vs-umadb.mjs; skipped
//    with a message where UmaDB cannot be built).
// 5. The slowest operation of each case, and of the suite.
//
// Why one shared feed: a feed has one writer lease, and an ingest service's producers (its
// request handlers, its devices) append events to the feed of their kind, not to one feed each;
// one-shot appends need no lease, and concurrent ones share fsyncs through group commit, which is
// what the engine offers such a load (see `pnpm bench ingest`, 64 appenders). A feed per producer
// would be 64 writers with 64 fsyncs per round of appends, a different load.
//
// Why a separate server process: it is how the server is deployed (`streamstack serve`), and it
// keeps the client's work (encoding, its own event loop) off the server's event loop, as it is
// in reality. The two share the machine's cores either way, as they would on one small host.
//
// Parts: STREAMSTACK_BENCH_SERVER_PARTS (ingest,live,read,umadb) runs some of them only.
// Sizes: STREAMSTACK_BENCH_SERVER_PRODUCERS (64), _BATCHES (1,100), _SECONDS per run (3), _ROUNDS
// (4), _LIVE_SAMPLES (300) per live reader, _READ_RECORDS (1,000,000) and _READ_ROUNDS (3); STREAMSTACK_BENCH_SERVER_CPU_PROF=DIR writes a CPU
// profile of the server process into DIR.
import { fork } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { RemoteStore } from '@streamstack/client';
import { Store } from '@streamstack/engine';
import { envNumber, median, quantile, relativeMargin, Suite, timedConcurrent } from '../harness.mjs';
import { prng } from '../prng.mjs';
import { againstUmadb } from '../server-vs-umadb.mjs';
import { makeTaggedRecords, payloadBytes, temporaryDirectory } from '../workload.mjs';

const producers = envNumber('STREAMSTACK_BENCH_SERVER_PRODUCERS', 64);
const batchSizes = (process.env.STREAMSTACK_BENCH_SERVER_BATCHES ?? '1,100').split(',').map(Number);
/** The parts of the suite to run (all by default): ingest, live, read, umadb. */
const parts = new Set((process.env.STREAMSTACK_BENCH_SERVER_PARTS ?? 'ingest,live,read,umadb').split(','));
/** Seconds each timed ingest run takes. */
const runSeconds = envNumber('STREAMSTACK_BENCH_SERVER_SECONDS', 3);
/** Pairs of runs (embedded and HTTP) per batch size. */
const rounds = envNumber('STREAMSTACK_BENCH_SERVER_ROUNDS', 4);
/** Seconds of untimed load per case before its rounds: the JIT, the connections, the segment. */
const warmupSeconds = 1;
/** Appends each live reader receives while timed (after `liveWarmup` untimed ones). */
const liveSamples = envNumber('STREAMSTACK_BENCH_SERVER_LIVE_SAMPLES', 300);
const liveWarmup = 20;
/**
 * Idle time between live appends, so that each one finds its reader waiting (a long-poll has
 * asked again) and measures delivery rather than the previous round trip.
 */
const liveGapMs = 5;
/** Records of the full-read feed, written on both sides before the reads are timed. */
const readRecords = envNumber('STREAMSTACK_BENCH_SERVER_READ_RECORDS', 1_000_000);
/** Timed full reads of each kind. */
const readRounds = envNumber('STREAMSTACK_BENCH_SERVER_READ_ROUNDS', 3);
/** Records per append while the read feed is written (one-shot commits of this many). */
const readFillBatch = 10_000;
/**
 * HTTP full-read records/s against the same lines made embedded (`feed.readLines`): reads over
 * HTTP at the engine's speed, less the socket and the client, which share the two cores.
 */
const readTarget = 0.5;

/** A live record that has not arrived by then is lost: the suite fails rather than hangs. */
const liveTimeoutMs = 10_000;
/** HTTP records/s against embedded, by batch size (the targets; the cores are shared). */
const targets = { 1: 0.3, 100: 0.6 };

/** The server in its own process (bench/server-process.mjs), driven over the IPC channel. */
class ServerProcess {
  static async start() {
    const profileDirectory = process.env.STREAMSTACK_BENCH_SERVER_CPU_PROF;
    const child = fork(new URL('../server-process.mjs', import.meta.url), [temporaryDirectory('server')], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      execArgv: profileDirectory ? ['--cpu-prof', '--cpu-prof-dir', path.resolve(profileDirectory)] : [],
    });
    const server = new ServerProcess(child);
    const { url } = await server.next('ready');
    server.url = url;
    return server;
  }

  constructor(child) {
    this.child = child;
    this.waiting = [];
    child.on('message', (message) => {
      const index = this.waiting.findIndex((entry) => entry.type === message.type);
      if (index !== -1) this.waiting.splice(index, 1)[0].resolve(message);
    });
    child.on('exit', (code, signal) => {
      for (const entry of this.waiting) entry.reject(new Error(`the server process exited (${signal ?? code})`));
      this.waiting = [];
    });
  }

  next(type) {
    return new Promise((resolve, reject) => this.waiting.push({ type, resolve, reject }));
  }

  async ask(message) {
    const answer = this.next(message.type);
    this.child.send(message);
    return answer;
  }

  /** The server's CPU time (µs) and event-loop busy time (ms) so far. */
  usage() {
    return this.ask({ type: 'usage' });
  }

  async groupCommitStats(feed) {
    return (await this.ask({ type: 'groups', feed })).stats;
  }

  async close() {
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.send({ type: 'close' });
    await exited;
  }
}

/**
 * One timed ingest run of `producers` concurrent producers calling `append(records)`, with what
 * it cost: CPU per append in this process and, over HTTP, in the server's; and the group sizes.
 */
async function ingestRun(side, size, seconds) {
  let next = 0;
  const groupsBefore = await side.groupCommitStats();
  const serverBefore = side.server ? await side.server.usage() : undefined;
  const run = await timedConcurrent(seconds, producers, () =>
    side.append(makeTaggedRecords((next += size) + side.offset, size)),
  );
  side.offset += next;
  const serverAfter = side.server ? await side.server.usage() : undefined;
  const groupsAfter = await side.groupCommitStats();
  return {
    recordsPerSecond: run.perSecond * size,
    appendsPerSecond: run.perSecond,
    latencies: run.latencies,
    processMicros: run.processMicros,
    serverMicros: serverAfter ? (serverAfter.cpuMicros - serverBefore.cpuMicros) / run.latencies.length : undefined,
    serverLoopMicros: serverAfter
      ? ((serverAfter.activeMs - serverBefore.activeMs) * 1000) / run.latencies.length
      : undefined,
    commitsPerFsync: (groupsAfter.requests - groupsBefore.requests) / (groupsAfter.groups - groupsBefore.groups),
  };
}

/**
 * Delivery latencies (ms, sorted) of one record at a time: from the append being sent to the
 * reader `subscribe` starts receiving it. `subscribe(received)` calls `received(key)` for every
 * record it reads and returns a function that stops it.
 */
async function deliveryLatencies(append, subscribe) {
  const waiting = new Map();
  const stop = await subscribe((key) => {
    const resolve = waiting.get(key);
    if (resolve) {
      waiting.delete(key);
      resolve(performance.now());
    }
  });
  const latencies = [];
  try {
    for (let i = -liveWarmup; i < liveSamples; i++) {
      const key = `live-${i}`;
      const received = new Promise((resolve) => waiting.set(key, resolve));
      const begun = performance.now();
      await append([{ ...makeTaggedRecords(i + liveWarmup, 1)[0], key }]);
      // Unreferenced: a timer of a delivered record must not keep the process alive.
      const timeout = delay(liveTimeoutMs, undefined, { ref: false }).then(() =>
        Promise.reject(new Error(`record ${key} was not delivered within ${liveTimeoutMs} ms`)),
      );
      const at = await Promise.race([received, timeout]);
      if (i >= 0) latencies.push(at - begun);
      await delay(liveGapMs);
    }
  } finally {
    await stop();
  }
  return latencies.sort((a, b) => a - b);
}

/** A reader of `feed.follow` (embedded, or the client's SSE one) after `after`. */
function followReader(feed, after) {
  return async (received) => {
    const stop = new AbortController();
    const reading = (async () => {
      for await (const { records } of feed.follow({ after, signal: stop.signal }))
        for (const record of records) received(record.key);
    })().catch((error) => {
      if (!stop.signal.aborted) throw error;
    });
    return async () => {
      stop.abort();
      await reading;
    };
  };
}

/**
 * A long-poll reader over raw HTTP: `GET …/records?after=C&wait=S`, asked again after each
 * answer. node:http with keep-alive, as the client's own requests go, so that its figures and
 * the SSE ones differ by the route and not by the HTTP stack.
 */
function longPollReader(url, feedName, after) {
  return async (received) => {
    const agent = new http.Agent({ keepAlive: true });
    let stopped = false;
    let request;
    const poll = (cursor) =>
      new Promise((resolve, reject) => {
        request = http.get(
          `${url}/v1/feeds/${encodeURIComponent(feedName)}/records?after=${cursor}&wait=30`,
          { agent },
          (response) => {
            const chunks = [];
            response.on('data', (chunk) => chunks.push(chunk));
            response.once('end', () =>
              resolve({ status: response.statusCode, text: Buffer.concat(chunks).toString('utf8') }),
            );
            response.once('error', reject);
          },
        );
        request.once('error', reject);
      });
    const reading = (async () => {
      for (let cursor = after; !stopped; ) {
        const { status, text } = await poll(cursor);
        if (status !== 200) throw new Error(`long-poll answered ${status}: ${text}`);
        for (const line of text.split('\n')) {
          if (line === '') continue;
          const record = JSON.parse(line);
          received(record.key);
          cursor = Math.max(cursor, record.commit);
        }
      }
    })().catch((error) => {
      if (!stopped) throw error;
    });
    return async () => {
      stopped = true;
      request.destroy();
      await reading;
      agent.destroy();
    };
  };
}

/** `count` records of `payloadBytes` random bytes each (binary: the server writes them in base64), with a key. */
function randomRecords(random, start, count) {
  const records = new Array(count);
  for (let i = 0; i < count; i++) {
    const payload = new Uint8Array(payloadBytes);
    const view = new DataView(payload.buffer);
    for (let at = 0; at < payloadBytes; at += 4) view.setUint32(at, Math.floor(random() * 2 ** 32));
    records[i] = { payload, key: `k${(start + i) % 10_000}` };
  }
  return records;
}

/** One full read over HTTP: records/s, and the server's CPU per record (µs). */
async function httpFullRead(server, feedName) {
  const before = await server.usage();
  const started = performance.now();
  const lines = await new Promise((resolve, reject) => {
    http
      .get(`${server.url}/v1/feeds/${encodeURIComponent(feedName)}/records`, (response) => {
        if (response.statusCode !== 200) reject(new Error(`a full read answered ${response.statusCode}`));
        let count = 0;
        response.on('data', (chunk) => {
          for (let at = chunk.indexOf(10); at !== -1; at = chunk.indexOf(10, at + 1)) count++;
        });
        response.once('end', () => resolve(count));
        response.once('error', reject);
      })
      .once('error', reject);
  });
  const seconds = (performance.now() - started) / 1000;
  const after = await server.usage();
  if (lines !== readRecords) throw new Error(`a full read over HTTP gave ${lines} lines, not ${readRecords}`);
  return {
    recordsPerSecond: lines / seconds,
    serverMicros: (after.cpuMicros - before.cpuMicros) / lines,
    ms: seconds * 1000,
  };
}

/** One full embedded read, as columns or as records: records/s. */
async function embeddedFullRead(feed, form) {
  const started = performance.now();
  let count = 0;
  if (form === 'columns') for await (const batch of feed.readColumns()) count += batch.length;
  else if (form === 'lines') {
    // The bytes the server sends, made in this process: their lines counted as the HTTP reader counts them.
    for await (const chunk of feed.readLines())
      for (let at = chunk.indexOf(10); at !== -1; at = chunk.indexOf(10, at + 1)) count++;
  } else for await (const record of feed.read()) count += record.position > 0 ? 1 : 0;
  const seconds = (performance.now() - started) / 1000;
  if (count !== readRecords) throw new Error(`a full ${form} read gave ${count} records, not ${readRecords}`);
  return { recordsPerSecond: count / seconds, ms: seconds * 1000 };
}

/** Case 3: full reads over HTTP against embedded ones, on the same records on both sides. */
async function fullReads(suite, slowest, server, remote, store) {
  const embeddedFeed = await store.createFeed('full-read');
  const remoteFeed = await remote.createFeed('full-read');
  const random = prng(36);
  for (let start = 0; start < readRecords; start += readFillBatch) {
    const records = randomRecords(random, start, Math.min(readFillBatch, readRecords - start));
    await embeddedFeed.append(records);
    await remoteFeed.append(records);
  }
  // One untimed read of each kind: the JIT, the page cache, the server's indexes caught up.
  await httpFullRead(server, 'full-read');
  await embeddedFullRead(embeddedFeed, 'columns');
  const runs = { http: [], lines: [], columns: [], records: [] };
  for (let round = 0; round < readRounds; round++) {
    const order = round % 2 === 0 ? ['lines', 'columns', 'records', 'http'] : ['http', 'records', 'columns', 'lines'];
    for (const kind of order)
      runs[kind].push(
        kind === 'http' ? await httpFullRead(server, 'full-read') : await embeddedFullRead(embeddedFeed, kind),
      );
    process.stderr.write(
      `  full read of ${readRecords} records, round ${round + 1}: embedded lines ${Math.round(runs.lines[round].recordsPerSecond)}/s, columns ${Math.round(runs.columns[round].recordsPerSecond)}/s, ` +
        `records ${Math.round(runs.records[round].recordsPerSecond)}/s, HTTP ${Math.round(runs.http[round].recordsPerSecond)}/s ` +
        `(server ${runs.http[round].serverMicros.toFixed(2)} µs CPU per record)\n`,
    );
  }
  const labels = {
    http: 'HTTP GET …/records',
    lines: 'embedded readLines (the same bytes)',
    columns: 'embedded readColumns',
    records: 'embedded read (objects)',
  };
  for (const [kind, label] of Object.entries(labels)) {
    const rates = runs[kind].map((entry) => entry.recordsPerSecond);
    suite.cases.push({
      name: `full read, ${readRecords} records of ${payloadBytes} random bytes: ${label}`,
      opsPerSecond: median(rates),
      itemsPerSecond: median(rates),
      relativeMarginPercent: relativeMargin(rates),
      samples: rates.length,
    });
    slowest.push({ name: `full read (${label})`, ms: Math.max(...runs[kind].map((entry) => entry.ms)) });
  }
  suite.ratio(
    'full read: HTTP server CPU per record',
    median(runs.http.map((entry) => entry.serverMicros)),
    undefined,
    'µs',
  );
  suite.ratio(
    'full read: HTTP / embedded read (objects) records/s',
    median(runs.http.map((entry, round) => entry.recordsPerSecond / runs.records[round].recordsPerSecond)),
  );
  suite.ratio(
    'full read: HTTP / embedded readColumns records/s',
    median(runs.http.map((entry, round) => entry.recordsPerSecond / runs.columns[round].recordsPerSecond)),
  );
  suite.ratio(
    'full read: HTTP / embedded readLines records/s',
    median(runs.http.map((entry, round) => entry.recordsPerSecond / runs.lines[round].recordsPerSecond)),
    readTarget,
  );
}

/** Case 2: live delivery, on an idle feed of its own on each side. */
async function liveDelivery(suite, slowest, server, remote, store) {
  const embeddedLive = await store.createFeed('live');
  const remoteLive = await remote.createFeed('live');
  await embeddedLive.append(makeTaggedRecords(0, 1));
  await remoteLive.append(makeTaggedRecords(0, 1));
  const readers = [
    {
      label: 'SSE (client follow)',
      append: (records) => remoteLive.append(records),
      subscribe: async () => followReader(remoteLive, (await remoteLive.head()).commit),
    },
    {
      label: 'long-poll',
      append: (records) => remoteLive.append(records),
      subscribe: async () => longPollReader(server.url, 'live', (await remoteLive.head()).commit),
    },
    {
      label: 'embedded follow',
      append: (records) => embeddedLive.append(records),
      subscribe: async () => followReader(embeddedLive, (await embeddedLive.head()).commit),
    },
  ];
  for (const reader of readers) {
    const latencies = await deliveryLatencies(reader.append, await reader.subscribe());
    process.stderr.write(
      `  ${reader.label}: delivery p50 ${quantile(latencies, 0.5).toFixed(2)} ms, p99 ${quantile(latencies, 0.99).toFixed(2)} ms\n`,
    );
    suite.ratio(`${reader.label}: append → receipt p50`, quantile(latencies, 0.5), undefined, 'ms');
    suite.ratio(`${reader.label}: append → receipt p99`, quantile(latencies, 0.99), undefined, 'ms');
    suite.ratio(`${reader.label}: slowest delivery`, latencies[latencies.length - 1], undefined, 'ms');
    slowest.push({ name: `${reader.label} delivery`, ms: latencies[latencies.length - 1] });
  }
}

export async function run() {
  const suite = new Suite('server');
  const slowest = [];
  const server = await ServerProcess.start();
  const remote = await RemoteStore.open(server.url);
  const store = await Store.open(temporaryDirectory('embedded'));
  process.stderr.write(
    `  server process at ${server.url}; ${producers} producers, ${rounds} rounds of ${runSeconds} s per case\n`,
  );

  try {
    for (const size of parts.has('ingest') ? batchSizes : []) {
      const name = `ingest-${size}`;
      const embeddedFeed = await store.createFeed(name);
      const remoteFeed = await remote.createFeed(name);
      const sides = {
        embedded: {
          offset: 0,
          append: (records) => embeddedFeed.append(records),
          groupCommitStats: async () => embeddedFeed.groupCommitStats(),
        },
        http: {
          offset: 0,
          server,
          append: (records) => remoteFeed.append(records),
          groupCommitStats: () => server.groupCommitStats(name),
        },
      };
      // A new feed's first append creates its first segment; it and the warm-up stay untimed.
      for (const side of Object.values(sides)) {
        await side.append(makeTaggedRecords(0, size));
        await ingestRun(side, size, warmupSeconds);
      }
      const runs = { embedded: [], http: [] };
      const ratios = [];
      for (let round = 0; round < rounds; round++) {
        const order = round % 2 === 0 ? ['embedded', 'http'] : ['http', 'embedded'];
        for (const mode of order) runs[mode].push(await ingestRun(sides[mode], size, runSeconds));
        ratios.push(runs.http[round].recordsPerSecond / runs.embedded[round].recordsPerSecond);
        process.stderr.write(
          `  batch ${size}, round ${round + 1}: embedded ${Math.round(runs.embedded[round].recordsPerSecond)} records/s, ` +
            `HTTP ${Math.round(runs.http[round].recordsPerSecond)} records/s (${ratios[round].toFixed(2)}×)\n`,
        );
      }
      for (const mode of ['embedded', 'http']) {
        const label = mode === 'http' ? 'HTTP' : 'embedded';
        const rates = runs[mode].map((entry) => entry.recordsPerSecond);
        const latencies = runs[mode].flatMap((entry) => entry.latencies).sort((a, b) => a - b);
        suite.cases.push({
          name: `${label}, ${producers} producers, one-shot batch ${size}`,
          opsPerSecond: median(runs[mode].map((entry) => entry.appendsPerSecond)),
          itemsPerSecond: median(rates),
          relativeMarginPercent: relativeMargin(rates),
          samples: rates.length,
        });
        suite.ratio(`batch ${size}, ${label}: append latency p50`, quantile(latencies, 0.5), undefined, 'ms');
        suite.ratio(`batch ${size}, ${label}: append latency p99`, quantile(latencies, 0.99), undefined, 'ms');
        suite.ratio(`batch ${size}, ${label}: slowest append`, latencies[latencies.length - 1], undefined, 'ms');
        slowest.push({ name: `${label} append, batch ${size}`, ms: latencies[latencies.length - 1] });
        suite.ratio(
          `batch ${size}, ${label}: commits per fsync`,
          median(runs[mode].map((entry) => entry.commitsPerFsync)),
          undefined,
          'commits',
        );
      }
      suite.ratio(
        `batch ${size}: embedded CPU per append`,
        median(runs.embedded.map((entry) => entry.processMicros)),
        undefined,
        'µs',
      );
      suite.ratio(
        `batch ${size}: HTTP client CPU per append`,
        median(runs.http.map((entry) => entry.processMicros)),
        undefined,
        'µs',
      );
      suite.ratio(
        `batch ${size}: HTTP server CPU per append`,
        median(runs.http.map((entry) => entry.serverMicros)),
        undefined,
        'µs',
      );
      suite.ratio(
        `batch ${size}: HTTP server event-loop time per append`,
        median(runs.http.map((entry) => entry.serverLoopMicros)),
        undefined,
        'µs',
      );
      suite.ratio(`HTTP / embedded records/s at batch ${size}`, median(ratios), targets[size]);
    }

    if (parts.has('live')) await liveDelivery(suite, slowest, server, remote, store);

    if (parts.has('read')) await fullReads(suite, slowest, server, remote, store);
    if (parts.has('umadb')) await againstUmadb(suite, slowest, server, remote, runSeconds);
  } finally {
    await remote.close();
    await server.close();
    await store.close();
  }

  if (slowest.length > 0) {
    const worst = slowest.reduce((a, b) => (b.ms > a.ms ? b : a));
    suite.ratio(`slowest operation of the suite (${worst.name})`, worst.ms, undefined, 'ms');
  }
  return suite.finish();
}
