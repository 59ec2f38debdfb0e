// Part 5 of `pnpm bench server`: StreamStack's HTTP server side by side with UmaDB's gRPC server
// (bench/umadb-peer.mjs), on the same events, with Node clients on both sides (StreamStack's typed
// client, and @grpc/grpc-js), each server in a process of its own, in the same run.
//
// Cases: appends of 1 and 100 events per request from 1 and from 16 concurrent clients;
// conditional appends (DCB optimistic concurrency: no event of this client's entity tag after the
// position it last wrote) of 1 and 100; uniqueness checks (no event anywhere carries this new tag)
// of 1 and 100 per request, one condition item per event; reads by tag (10 events a tag); and a
// full read of everything written. Each side writes to one log (a feed; UmaDB's store), so
// conditions and reads see the same history on both. Runs alternate sides; each case's ratio is
// StreamStack / UmaDB events per second, median of rounds, target ≥ 2 (issue 41); and the server
// CPU per one-event append (both read from /proc), target StreamStack ≤ UmaDB.
//
// Sizes: STREAMSTACK_BENCH_UMADB_ROUNDS (2) of STREAMSTACK_BENCH_SERVER_SECONDS (3) per case and
// side; STREAMSTACK_BENCH_UMADB_EVENTS (1,000,000) written before the reads; STREAMSTACK_BENCH_UMADB=0
// skips the side-by-side, =PATH names a server binary.
import { envNumber, median, quantile, relativeMargin, timedConcurrent } from './harness.mjs';
import { locateUmadb, processCpuMicros, UmadbPeer } from './umadb-peer.mjs';
import { payloadBytes, temporaryDirectory, types } from './workload.mjs';

const rounds = envNumber('STREAMSTACK_BENCH_UMADB_ROUNDS', 2);
/**
 * Untimed seconds per case and side before its rounds: a Node server at a thousand requests a
 * second is still compiling its hot paths after one second (a cost a long-running server does
 * not pay), and UmaDB's first requests warm its caches.
 */
const warmupSeconds = 3;
const readEvents = envNumber('STREAMSTACK_BENCH_UMADB_EVENTS', 1_000_000);
/** Events per request while the read history is written. */
const fillBatch = 1_000;
/** Events that carry each `item:` tag of the read history: what a read by tag returns. */
const eventsPerItem = 10;
/** Concurrent clients of the loaded cases. */
const clientsMany = 16;
/** StreamStack / UmaDB events per second that each case aims for. */
const target = 2;

/**
 * `count` events from number `start` on: a type of eight, a customer, a region and `extraTags`,
 * and a JSON payload of `payloadBytes`, as text (StreamStack takes it as sent) and as bytes.
 */
function makeEvents(start, count, extraTags = () => []) {
  const events = new Array(count);
  for (let i = 0; i < count; i++) {
    const n = start + i;
    const head = `{"id":${n},"v":"`;
    const text = `${head + 'x'.repeat(payloadBytes - head.length - 2)}"}`;
    events[i] = {
      type: types[n % types.length],
      tags: [`customer:${n % 5000}`, `region:${n % 12}`, ...extraTags(n, i)],
      text,
      data: Buffer.from(text),
    };
  }
  return events;
}

/** StreamStack over HTTP: one feed, its typed client. */
function streamstackSide(server, feed) {
  return {
    name: 'StreamStack',
    pid: server.child.pid,
    async append(events, condition) {
      const records = events.map((event) => ({ type: event.type, tags: event.tags, payload: event.text }));
      const options = {};
      if (condition)
        options.condition = {
          failIfMatch: { items: condition.tags.map((tag) => ({ tags: [tag] })) },
          ...(condition.after === undefined ? {} : { after: condition.after }),
        };
      return (await feed.append(records, options)).lastPosition;
    },
    async read(tag) {
      let count = 0;
      for await (const _ of feed.read(tag === undefined ? {} : { filter: { tags: [tag] } })) count++;
      return count;
    },
  };
}

/** UmaDB over gRPC. */
function umadbSide(peer) {
  return {
    name: 'UmaDB',
    pid: peer.pid,
    append(events, condition) {
      if (!condition) return peer.append(events);
      return peer.append(events, {
        failIfEventsMatch: { items: condition.tags.map((tag) => ({ types: [], tags: [tag] })) },
        ...(condition.after === undefined ? {} : { after: condition.after }),
      });
    },
    read(tag) {
      return peer.read(tag === undefined ? undefined : { items: [{ types: [], tags: [tag] }] });
    },
  };
}

let eventNumber = 0;
let uniqueNumber = 0;

/**
 * The cases: each makes, for one side and its clients, the operation a client repeats; the
 * operation resolves to the events it wrote or read.
 */
const cases = [
  ...[1, 100].flatMap((batch) =>
    [1, clientsMany].map((clients) => ({
      name: `append ${batch} per request, ${clients} client${clients === 1 ? '' : 's'}`,
      clients,
      operation: (side) => async () => {
        await side.append(makeEvents((eventNumber += batch), batch));
        return batch;
      },
    })),
  ),
  ...[1, 100].map((batch) => ({
    name: `conditional append ${batch} per request, ${clientsMany} clients`,
    clients: clientsMany,
    operation: (side) => {
      // Each client is the only writer of its entity: the condition holds, and is checked each time.
      const last = new Map();
      return async (client) => {
        const tag = `${side.name}-entity:${client}`;
        const after = last.get(client);
        const position = await side.append(
          makeEvents((eventNumber += batch), batch, () => [tag]),
          after === undefined ? undefined : { tags: [tag], after },
        );
        last.set(client, position);
        return batch;
      };
    },
  })),
  ...[1, 100].map((batch) => ({
    name: `uniqueness check ${batch} per request, ${clientsMany} clients`,
    clients: clientsMany,
    operation: (side) => async () => {
      const fresh = Array.from({ length: batch }, () => `email:${(uniqueNumber += 1)}@example.com`);
      await side.append(
        makeEvents((eventNumber += batch), batch, (_, i) => [fresh[i]]),
        { tags: fresh },
      );
      return batch;
    },
  })),
];

async function timedRun(side, operation, clients, seconds) {
  let events = 0;
  const cpuBefore = processCpuMicros(side.pid);
  const run = await timedConcurrent(seconds, clients, async (client) => {
    const count = await operation(client);
    events += count;
  });
  const cpuAfter = processCpuMicros(side.pid);
  return {
    eventsPerSecond: events / (run.latencies.length / run.perSecond),
    requestsPerSecond: run.perSecond,
    serverMicros: (cpuAfter - cpuBefore) / run.latencies.length,
    latencies: run.latencies,
  };
}

/** Runs one case on both sides in alternating rounds and reports it. */
async function sideBySide(suite, slowest, sides, name, clients, operationOf, runSeconds) {
  const operations = sides.map((side) => operationOf(side));
  for (const [index, side] of sides.entries()) await timedRun(side, operations[index], clients, warmupSeconds);
  const runs = sides.map(() => []);
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? [0, 1] : [1, 0];
    for (const index of order) runs[index].push(await timedRun(sides[index], operations[index], clients, runSeconds));
  }
  const ratios = runs[0].map((run, round) => run.eventsPerSecond / runs[1][round].eventsPerSecond);
  process.stderr.write(
    `  vs UmaDB, ${name}: ${sides.map((side, index) => `${side.name} ${Math.round(median(runs[index].map((run) => run.eventsPerSecond)))} events/s`).join(', ')} (${median(ratios).toFixed(2)}×)\n`,
  );
  for (const [index, side] of sides.entries()) {
    const rates = runs[index].map((run) => run.eventsPerSecond);
    const latencies = runs[index].flatMap((run) => run.latencies).sort((a, b) => a - b);
    suite.cases.push({
      name: `${side.name}, ${name}`,
      opsPerSecond: median(runs[index].map((run) => run.requestsPerSecond)),
      itemsPerSecond: median(rates),
      relativeMarginPercent: relativeMargin(rates),
      samples: rates.length,
    });
    suite.ratio(`${side.name}, ${name}: latency p99`, quantile(latencies, 0.99), undefined, 'ms');
    slowest.push({ name: `${side.name}, ${name}`, ms: latencies[latencies.length - 1] });
  }
  suite.ratio(`StreamStack / UmaDB events/s, ${name}`, median(ratios), target);
  return runs;
}

/** Writes `readEvents` events tagged `item:N` (`eventsPerItem` each) on a side, in large requests. */
async function writeReadHistory(side) {
  const items = readEvents / eventsPerItem;
  for (let start = 0; start < readEvents; start += fillBatch) {
    const count = Math.min(fillBatch, readEvents - start);
    await side.append(makeEvents(start, count, (n) => [`item:${n % items}`]));
  }
}

/**
 * The side-by-side, on the StreamStack server the suite already runs (`server`, with `remote` its
 * client), each run `runSeconds` long as the suite's own; skipped with a message where UmaDB
 * cannot be had.
 */
export async function againstUmadb(suite, slowest, server, remote, runSeconds) {
  if (process.env.STREAMSTACK_BENCH_UMADB === '0') {
    process.stderr.write('  vs UmaDB: skipped (STREAMSTACK_BENCH_UMADB=0)\n');
    return;
  }
  const found = locateUmadb((text) => process.stderr.write(text));
  if (found.skipped) {
    process.stderr.write(`  vs UmaDB: skipped — ${found.skipped}\n`);
    suite.ratio(`UmaDB side-by-side skipped: ${found.skipped}`, 0, undefined, '');
    return;
  }
  const peer = await UmadbPeer.start(found, temporaryDirectory('umadb'));
  try {
    const feed = await remote.createFeed('vs-umadb');
    const sides = [streamstackSide(server, feed), umadbSide(peer)];
    let appendOne;
    for (const entry of cases) {
      const runs = await sideBySide(suite, slowest, sides, entry.name, entry.clients, entry.operation, runSeconds);
      if (entry.name === `append 1 per request, ${clientsMany} clients`) appendOne = runs;
    }
    const cpu = appendOne.map((runs) => median(runs.map((run) => run.serverMicros)));
    for (const [index, side] of sides.entries())
      suite.ratio(`${side.name} server CPU per one-event append (${clientsMany} clients)`, cpu[index], undefined, 'µs');
    suite.ratio('UmaDB / StreamStack server CPU per one-event append', cpu[1] / cpu[0], 1);

    process.stderr.write(`  vs UmaDB: writing ${readEvents} events on each side for the reads\n`);
    for (const side of sides) await writeReadHistory(side);
    const items = readEvents / eventsPerItem;
    let nextItem = 0;
    await sideBySide(
      suite,
      slowest,
      sides,
      `read by tag (${eventsPerItem} events), ${clientsMany} clients`,
      clientsMany,
      (side) => async () => {
        const read = await side.read(`item:${(nextItem = (nextItem + 7919) % items)}`);
        if (read !== eventsPerItem) throw new Error(`${side.name} read ${read} events of a tag, not ${eventsPerItem}`);
        return read;
      },
      runSeconds,
    );
    await sideBySide(suite, slowest, sides, 'full read, 1 client', 1, (side) => () => side.read(undefined), runSeconds);
  } finally {
    peer.close();
  }
}
