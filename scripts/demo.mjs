// `pnpm demo`: the polling example from the pitch, end to end. An ingest job polls an orders API
// every hour for a day; each run opens a stream on the feed `polls`, appends the pages as they
// arrive and seals the stream into a commit. Then the day is read back: the commit history, one
// hour on its own, the whole day in RAW, dedup and latest modes, and a subscription that catches
// up and then receives the next poll live.
//
// The store's clock is injected, so the 24 polls get hourly times although the demo runs in a
// second or two. Usage: node scripts/demo.mjs [--data <directory>]
// (default: ./data/demo-<timestamp>; the directory is kept so it can be inspected afterwards).
import fs from 'node:fs';
import path from 'node:path';
import { prng } from '../bench/prng.mjs';
import { isStreamStackError, Store } from '../packages/engine/dist/index.js';

const day = Date.UTC(2026, 10, 30); // 2026-11-30T00:00Z
const hour = 3600_000;
const polls = 24;
const pageRecords = 20;
/** Each poll asks for events since a little before the previous poll: this many come again. */
const overlapRecords = 6;
const statuses = ['placed', 'paid', 'packed', 'shipped', 'delivered'];

// ---------------------------------------------------------------------------------------------
// Arguments and the data directory.

/** A mistake in how the demo was run: reported in one line, without a stack. */
class UsageError extends Error {}

function dataDirectoryArgument(argv) {
  // Only the first argument decides: the demo takes one option at most.
  const [first, second] = argv;
  if (first === '--data') {
    if (!second) throw new UsageError('--data needs a directory');
    return second;
  }
  if (first?.startsWith('--data=')) return first.slice('--data='.length);
  if (first === '--help' || first === '-h') {
    console.log('usage: node scripts/demo.mjs [--data <directory>]');
    process.exit(0);
  }
  if (first !== undefined) {
    throw new UsageError(`unknown argument ${first}; usage: node scripts/demo.mjs [--data <directory>]`);
  }
  const stamp = new Date()
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  return path.join('data', `demo-${stamp}`);
}

// ---------------------------------------------------------------------------------------------
// The simulated source: an orders API. Orders are placed, move through their statuses (each
// change a new version of the order's key), and now and then one is cancelled (a tombstone).

class OrdersApi {
  random = prng(20261130);
  orders = new Map();
  nextOrder = 1;
  previous = [];
  /** Counts of what the source sent, to check the reads against. */
  sent = { events: 0, repeats: 0, cancelled: 0 };

  pick(count) {
    return Math.floor(this.random() * count);
  }

  event(order, at) {
    const key = `order-${String(order.id).padStart(4, '0')}`;
    const payload = JSON.stringify({
      order: order.id,
      rev: order.rev,
      status: order.status,
      amount: order.amount,
      at: `${new Date(at).toISOString().slice(0, 16)}Z`,
    });
    if (order.status === 'cancelled')
      return { key, version: order.rev, tombstone: true, type: 'order.cancelled', payload };
    return { key, version: order.rev, type: order.rev === 1 ? 'order.placed' : 'order.updated', payload };
  }

  /** The events of the hour before `pollTime`, plus the tail of the previous poll's, in pages. */
  poll(pollTime) {
    const events = [];
    const at = () => pollTime - hour + this.pick(hour);
    const placed = 20 + this.pick(15);
    for (let i = 0; i < placed; i++) {
      const order = { id: this.nextOrder++, rev: 1, status: 'placed', amount: 10 + this.pick(490) };
      this.orders.set(order.id, order);
      events.push({ at: at(), order: { ...order } });
    }
    const open = [...this.orders.values()].filter(
      (order) => order.status !== 'cancelled' && order.status !== 'delivered',
    );
    const updates = Math.min(open.length, 10 + this.pick(10));
    for (let i = 0; i < updates; i++) {
      const order = open[this.pick(open.length)];
      if (order.status === 'delivered') continue;
      order.rev++;
      order.status = statuses[statuses.indexOf(order.status) + 1];
      events.push({ at: at(), order: { ...order } });
    }
    // Now and then a customer cancels an order that has not shipped.
    if (this.pick(3) === 0) {
      const cancellable = open.filter((order) => order.status === 'placed' || order.status === 'paid');
      if (cancellable.length > 0) {
        const order = cancellable[this.pick(cancellable.length)];
        order.rev++;
        order.status = 'cancelled';
        this.sent.cancelled++;
        events.push({ at: at(), order: { ...order } });
      }
    }
    events.sort((a, b) => a.at - b.at);
    const fresh = events.map(({ at: time, order }) => this.event(order, time));
    // The query window starts a little before the previous poll, so its last events come again,
    // byte for byte: the same payload, which dedup reads drop.
    const repeated = this.previous.slice(-overlapRecords);
    this.previous = fresh;
    this.sent.events += repeated.length + fresh.length;
    this.sent.repeats += repeated.length;
    const records = [...repeated, ...fresh];
    const pages = [];
    for (let i = 0; i < records.length; i += pageRecords) pages.push(records.slice(i, i + pageRecords));
    return pages;
  }
}

// ---------------------------------------------------------------------------------------------
// Output helpers.

const decoder = new TextDecoder();
// Piped into `head` and the like: stop quietly when the reader goes away.
process.stdout.on('error', (error) => {
  if (error.code === 'EPIPE') process.exit(0);
  throw error;
});
const out = (line = '') => process.stdout.write(`${line}\n`);
const heading = (title) => out(`\n== ${title}`);
const count = (n) => n.toLocaleString('en-US');
const iso = (ms) => new Date(ms).toISOString();
const minute = (ms) => `${iso(ms).slice(0, 16)}Z`;
/** HH:MM:SS, with the date in front when it is not the demo's day. */
const clockTime = (ms) =>
  ms >= day && ms < day + 24 * hour ? iso(ms).slice(11, 19) : `${iso(ms).slice(0, 10)} ${iso(ms).slice(11, 19)}`;
const shortId = (id) => id.slice(0, 8);

function recordLine(record, note = '') {
  const payload = decoder.decode(record.payload);
  return `  #${String(record.position).padStart(4)}  ${record.key}  v${record.version}  ${record.type.padEnd(15)}  ${payload}${note}`;
}

function commitLine(commit) {
  return [
    String(commit.commit).padStart(3),
    shortId(commit.stream),
    String(commit.records).padStart(7),
    `${commit.firstPosition}–${commit.lastPosition}`.padEnd(11),
    clockTime(commit.openedAt).padEnd(8),
    clockTime(commit.sealedAt).padEnd(8),
    commit.message ?? '',
  ].join('  ');
}

async function countRead(feed, options) {
  let records = 0;
  for await (const batch of feed.readBatches(options)) records += batch.length;
  return records;
}

function expect(what, actual, expected) {
  if (actual !== expected) throw new Error(`${what}: got ${actual}, expected ${expected}`);
}

// ---------------------------------------------------------------------------------------------

async function ingestRun(feed, source, pollTime, clock) {
  clock.now = pollTime + 1_000; // the job starts a second after the hour
  const { token } = await feed.acquireLease({ holder: 'hourly-poller', ttlMs: 10 * 60_000 });
  const stream = await feed.openStream({ token });
  for (const page of source.poll(pollTime)) {
    clock.now += 1_500 + Math.floor(source.random() * 2_500); // the source takes a moment per page
    await stream.append(page, { token });
  }
  clock.now += 300;
  const commit = await stream.seal({ token, message: `poll ${minute(pollTime)}` });
  await feed.releaseLease({ token });
  return commit;
}

async function main() {
  const directory = path.resolve(dataDirectoryArgument(process.argv.slice(2)));
  if (fs.existsSync(directory) && fs.readdirSync(directory).length > 0) {
    throw new UsageError(`${directory} is not empty; pass a fresh directory with --data, or leave it out`);
  }
  fs.mkdirSync(directory, { recursive: true });
  const clock = { now: day };
  const store = await Store.open(directory, { clock: () => clock.now });
  try {
    await demo(store, clock);
  } finally {
    await store.close();
  }
  out(`\ndata directory kept at ${directory} (delete it when done)`);
}

async function demo(store, clock) {
  out('StreamStack demo: a day of hourly polls on one feed');
  out(`data directory: ${store.path}`);

  const feed = await store.createFeed('polls');
  const source = new OrdersApi();
  const started = performance.now();
  for (let h = 0; h < polls; h++) await ingestRun(feed, source, day + h * hour, clock);
  const ingestMs = performance.now() - started;
  out(
    `ingested ${polls} hourly polls of an orders API: ${count((await feed.info()).records)} records in ${Math.round(ingestMs)} ms (real time)`,
  );

  // 1. The history: one commit per poll.
  heading(`Commit history: feed.commits() (times UTC on ${iso(day).slice(0, 10)})`);
  out('  #  stream    records  positions    opened    sealed    message');
  const history = [];
  for await (const commit of feed.commits()) history.push(commit);
  for (const commit of history) out(commitLine(commit));

  // 2. One hour on its own.
  const seven = history.find((commit) => commit.message === `poll ${minute(day + 7 * hour)}`);
  const hourRecords = await feed.readCommit(seven.commit);
  heading(`One hour on its own: feed.readCommit(${seven.commit}), the ${minute(day + 7 * hour).slice(11)} poll`);
  out(`  stream ${seven.stream}, opened ${clockTime(seven.openedAt)}, sealed ${clockTime(seven.sealedAt)}`);
  // Which positions are repeats: the ones a dedup read of the whole history leaves out.
  const firsts = new Set();
  for await (const batch of feed.readBatches({ mode: 'dedup' }))
    for (const record of batch) firsts.add(record.position);
  const shown = overlapRecords + 3;
  for (const record of hourRecords.slice(0, shown))
    out(recordLine(record, firsts.has(record.position) ? '' : '  ← repeat'));
  out(
    `  … ${count(hourRecords.length - shown)} more: ${count(hourRecords.length)} records in this commit (positions ${seven.firstPosition}–${seven.lastPosition}); ` +
      `the first ${overlapRecords} repeat the end of the ${minute(day + 6 * hour).slice(11)} poll, byte for byte`,
  );
  expect('records of the hour', hourRecords.length, seven.records);

  // 3. The whole day, three ways.
  heading('The whole day: feed.read({ after: 0, mode })');
  const raw = await countRead(feed, { mode: 'raw' });
  const dedup = await countRead(feed, { mode: 'dedup' });
  const latest = await countRead(feed, { mode: 'latest' });
  const keys = new Set();
  for await (const record of feed.read()) keys.add(record.key);
  out(`  raw     ${count(raw).padStart(6)} records  every record of the 24 commits, in position order`);
  out(
    `  dedup   ${count(dedup).padStart(6)} records  first occurrence of each payload: ${count(raw - dedup)} repeats from overlapping polls dropped`,
  );
  out(
    `  latest  ${count(latest).padStart(6)} records  one per order at its highest version: ${count(keys.size)} orders, ${count(keys.size - latest)} cancelled (tombstoned) left out`,
  );
  expect('raw records', raw, source.sent.events);
  expect('repeats dropped by dedup', raw - dedup, source.sent.repeats);
  expect('orders in latest', latest, keys.size - source.sent.cancelled);
  const afternoon = history[11];
  out(
    `  a window, after: ${afternoon.commit} (the ${minute(day + 12 * hour).slice(11)}–${minute(day + 23 * hour).slice(11)} polls): ` +
      `raw ${count(await countRead(feed, { after: afternoon.commit }))}, ` +
      `dedup ${count(await countRead(feed, { after: afternoon.commit, mode: 'dedup' }))} ` +
      `(${count(await countRead(feed, { after: afternoon.commit, mode: 'dedup', dedupScope: 'window' }))} with dedupScope 'window', which keeps repeats of earlier commits), ` +
      `latest ${count(await countRead(feed, { after: afternoon.commit, mode: 'latest' }))}`,
  );

  // One order, followed through the views: every event of it in RAW, its winner in latest.
  const busiest = [...(await collectByKey(feed)).entries()].sort(
    (a, b) => b[1].length - a[1].length || a[0].localeCompare(b[0]),
  )[0];
  const [key, events] = busiest;
  out(`\n  ${key} in RAW: ${events.length} records`);
  for (const record of events) {
    const { status } = JSON.parse(decoder.decode(record.payload));
    const note = firsts.has(record.position) ? '' : `${' '.repeat(9 - status.length)} ← repeat (dropped by dedup)`;
    out(
      `    commit ${String(record.commit).padStart(2)}  #${String(record.position).padStart(4)}  v${record.version} ${status}${note}`,
    );
  }
  const current = await feed.get(key);
  out(
    `  feed.get('${key}') → v${current.version} ${JSON.parse(decoder.decode(current.payload)).status}` +
      ` (as of commit 12: v${(await feed.get(key, { asOf: 12 }))?.version ?? '-'})`,
  );
  const cancelled = await lastOfType(feed, 'order.cancelled');
  if (cancelled)
    out(
      `  feed.get('${cancelled.key}') → ${String(await feed.get(cancelled.key))} (cancelled in commit ${cancelled.commit})`,
    );

  // 4. A subscription: catch up with poll + advance, then go live.
  clock.now = day + 23 * hour + 40 * 60_000;
  heading(`Subscription 'warehouse', created at ${clockTime(clock.now)}: catch up, then live`);
  const subscription = await feed.createSubscription('warehouse');
  const lagLine = async () => {
    const { lag } = await subscription.info();
    return `lag ${lag.commits} commits, ${count(lag.records)} records`;
  };
  out(`  created at cursor ${(await subscription.info()).cursor}: ${await lagLine()}`);
  for (;;) {
    const { commits, cursor } = await subscription.poll({ max: 400 });
    if (commits.length === 0) break;
    const records = commits.reduce((sum, { records: list }) => sum + list.length, 0);
    await subscription.advance(cursor);
    out(
      `  poll({ max: 400 }) → commits ${commits[0].commit.commit}–${cursor} (${records} records); advance(${cursor}) → ${await lagLine()}`,
    );
  }

  const controller = new AbortController();
  let arrived;
  let runStarted;
  const consumer = (async () => {
    for await (const { commit, records } of subscription.live({ signal: controller.signal })) {
      arrived = performance.now();
      out(
        `  live ← commit ${commit.commit} (${commit.message}): ${records.length} records, ` +
          `${(arrived - runStarted).toFixed(1)} ms (real time) after its ingest run started`,
      );
      await subscription.advance(commit.commit);
      out(`  advance(${commit.commit}) → ${await lagLine()}; aborting the live read`);
      controller.abort();
    }
  })().catch((error) => {
    if (error?.name !== 'AbortError') throw error;
  });
  out(`  live({ signal }) started at cursor ${(await subscription.info()).cursor}, waiting for the next poll…`);
  await new Promise((resolve) => setTimeout(resolve, 50));
  const safety = setTimeout(() => controller.abort(), 5_000);

  out(`  the ingest job runs the next poll, ${minute(day + 24 * hour)}…`);
  runStarted = performance.now();
  const next = await ingestRun(feed, source, day + 24 * hour, clock);
  out(`  the ingest job sealed commit ${next.commit} (${next.message}) at ${clockTime(next.sealedAt)}`);
  await consumer;
  clearTimeout(safety);
  if (arrived === undefined) throw new Error('the 25th commit did not arrive on the live subscription');
  const { cursor } = await subscription.info();
  expect('subscription cursor', cursor, next.commit);
  out(`  live read ended (aborted); cursor ${cursor}, head ${(await feed.head()).commit}`);
}

async function collectByKey(feed) {
  const byKey = new Map();
  for await (const record of feed.read()) {
    const list = byKey.get(record.key);
    if (list) list.push(record);
    else byKey.set(record.key, [record]);
  }
  return byKey;
}

async function lastOfType(feed, type) {
  let last;
  for await (const record of feed.read({ filter: { types: [type] } })) last = record;
  return last;
}

main().catch((error) => {
  if (error instanceof UsageError) {
    console.error(`demo: ${error.message}`);
    process.exit(2);
  }
  console.error(`demo failed: ${isStreamStackError(error) ? `${error.code}: ` : ''}${error?.stack ?? error}`);
  process.exit(1);
});
