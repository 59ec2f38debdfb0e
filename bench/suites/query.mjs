// Suite `query`: tag and type queries and conditional appends over one feed of 10^6 records
// (10^5 distinct tags, about 10 records each spread over the whole history; 8 types; 200-byte
// payloads, each unique so payload dedup stores every one), written untimed as one-shot appends
// of 10k records, which leaves several sealed history segments (64 MiB each) and their index
// files, plus the tail segment with its in-memory index.
//
// Measured in one run:
// - single-tag query latency, forced through the index (`plan: 'index'`) and through a scan of
//   the log (`plan: 'scan'`), on random tags, and their ratio;
// - tag-query throughput: records per second returned while querying many different tags one
//   after another through the default planner (batch form and object form);
// - type-query throughput: one type (1/8 of the feed) through the default planner, and forced
//   through the index for comparison;
// - conditional against unconditional one-shot appends of 1 and 100 records, each batch durable
//   before the next, interleaved round by round so fsync drift weighs on all alike; conditions
//   that pass: one existing tag not written after `after` (a position a few appends behind the
//   head), settled by the high-water map, and two tags that never share a record, after 0,
//   checked in the index;
// - condition checks per second: appends whose condition fails (CONDITION_FAILED is caught); a
//   failed request writes nothing, so this is the check and the request's way through the
//   group committer;
// - uniqueness checks (a fresh tag per record, after 0: a hundred items at batch 100) against
//   unconditional appends, on the feed reopened so no tag is known to the high-water map.
//
// Scans of 10^6 records take seconds, so scan-plan and type-query cases are timed by hand, a
// few runs each; every query checks its record count (and the tag or type of what it returns),
// so a fast wrong answer fails the suite.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Store } from '@streamstack/engine';
import { Suite } from '../harness.mjs';
import { prng } from '../prng.mjs';
import { payloadBytes, temporaryDirectory, typeCount, types } from '../workload.mjs';

/** Records in the feed; the issue's figure is 10^6. */
const recordCount = Number(process.env.STREAMSTACK_BENCH_QUERY_RECORDS ?? 1_000_000);
/** Distinct tags: one per record, each on recordCount / tagCount records. */
const tagCount = Number(process.env.STREAMSTACK_BENCH_QUERY_TAGS ?? Math.max(1, recordCount / 10));
/** Records per one-shot append while building the feed. */
const buildBatch = 10_000;
/** Scan-plan single-tag queries timed (each reads the whole history). */
const scanRuns = 3;
/** Type-query runs timed per plan. */
const typeRuns = 3;
/** Tags per operation in the tag-throughput cases. */
const tagsPerOperation = 100;
/** Seconds of interleaved rounds per batch size in the conditional / unconditional comparison. */
const appendSeconds = Number(process.env.STREAMSTACK_BENCH_QUERY_APPEND_SECONDS ?? 10);
/** Appends of each kind per round. */
const appendsPerRound = 5;
const appendBatchSizes = [1, 100];

/**
 * The tag of record n (0-based): tag ids are a permutation of n mod tagCount, so each tag's
 * records lie tagCount positions apart, from the start of the history to its end.
 */
const tagMultiplier = 7919; // prime, so coprime with the powers of ten tagCount takes
const tagIdOf = (n) => ((n % tagCount) * tagMultiplier) % tagCount;
const tagName = (id) => `t${id}`;
const padding = 'x'.repeat(payloadBytes);
/** A unique payload of exactly `payloadBytes` ASCII bytes (the padding string is shared). */
function payloadOf(n) {
  const head = `{"id":${n},"v":"`;
  return `${head + padding.slice(0, payloadBytes - head.length - 2)}"}`;
}

function makeBatch(start, count) {
  const records = new Array(count);
  for (let i = 0; i < count; i++) {
    const n = start + i;
    records[i] = { payload: payloadOf(n), type: types[n % typeCount], tags: [tagName(tagIdOf(n))] };
  }
  return records;
}

async function build() {
  const directory = temporaryDirectory('query');
  const store = await Store.open(directory);
  const feed = await store.createFeed('query');
  const started = performance.now();
  for (let start = 0; start < recordCount; start += buildBatch) {
    await feed.append(makeBatch(start, Math.min(buildBatch, recordCount - start)));
  }
  const seconds = (performance.now() - started) / 1000;
  const info = await feed.info();
  if (info.records !== recordCount) throw new Error(`the feed holds ${info.records} records, not ${recordCount}`);
  // The index's segments (an internal, read only for the log line: several sealed + the tail).
  const segments = feed.writer?.index?.all?.() ?? [];
  process.stderr.write(
    `  built ${recordCount} records (${tagCount} tags, ${typeCount} types) in ${info.commits} one-shot appends, ` +
      `${seconds.toFixed(1)} s (${Math.round(recordCount / seconds)} records/s); ` +
      `${segments.length - 1} sealed index segments + tail (${segments.map((segment) => segment.count).join(', ')} records)\n`,
  );
  return { store, feed, segments: segments.length, directory };
}

function check(what, count, expected) {
  if (count !== expected) throw new Error(`${what} returned ${count} records, expected ${expected}`);
}

/** Runs a tag query to the end; returns the records it found, checking each carries the tag. */
async function tagQuery(feed, tag, plan) {
  let count = 0;
  for await (const batch of feed.readBatches({ after: 0, filter: { tags: [tag] }, ...(plan ? { plan } : {}) })) {
    for (let i = 0; i < batch.length; i++) {
      if (!batch[i].tags.includes(tag)) throw new Error(`a query for ${tag} returned a record tagged ${batch[i].tags}`);
    }
    count += batch.length;
  }
  return count;
}

/** Adds a case measured by hand (no benchmark.js), in the harness's shape plus extra fields. */
function pushCase(suite, entry) {
  suite.cases.push({ relativeMarginPercent: 0, samples: 1, ...entry });
  const extra = Object.entries(entry)
    .filter(([field]) => !['name', 'relativeMarginPercent', 'samples'].includes(field))
    .map(
      ([field, value]) =>
        `${field} ${typeof value === 'number' && !Number.isInteger(value) ? value.toFixed(2) : value}`,
    );
  process.stderr.write(`  ${entry.name}: ${extra.join('  ')}\n`);
}

/** Mean and relative margin of error (95%, normal approximation) of a list of samples. */
function summary(samples) {
  const mean = samples.reduce((sum, value) => sum + value, 0) / samples.length;
  if (samples.length < 2) return { mean, rme: 0 };
  const variance = samples.reduce((sum, value) => sum + (value - mean) ** 2, 0) / (samples.length - 1);
  return { mean, rme: ((1.96 * Math.sqrt(variance / samples.length)) / mean) * 100 };
}

function percentile(sorted, fraction) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))];
}

export async function run() {
  const suite = new Suite('query');
  const { store, feed, segments, directory } = await build();
  const random = prng(0x9e7);
  const randomTagId = () => Math.floor(random() * tagCount);
  const rates = {};

  // Expected counts per tag, precomputed for the tags the cases use (the permutation's inverse).
  const residueOf = new Uint32Array(tagCount);
  for (let r = 0; r < tagCount; r++) residueOf[(r * tagMultiplier) % tagCount] = r;
  const expectedOfTag = (id) => Math.floor((recordCount - 1 - residueOf[id]) / tagCount) + 1;

  // Warm-up (untimed): a few hundred index queries, so the first timed ones are not the JIT's.
  for (let i = 0; i < 300; i++) {
    const id = randomTagId();
    check(`warm-up query for ${tagName(id)}`, await tagQuery(feed, tagName(id), 'auto'), expectedOfTag(id));
  }

  // 1. Single-tag latency by the index: each query timed on its own.
  const indexQueries = 5000;
  const indexLatencies = new Float64Array(indexQueries);
  let indexRecords = 0;
  for (let i = 0; i < indexQueries; i++) {
    const id = randomTagId();
    const startedAt = performance.now();
    const count = await tagQuery(feed, tagName(id), 'index');
    indexLatencies[i] = performance.now() - startedAt;
    check(`index query for ${tagName(id)}`, count, expectedOfTag(id));
    indexRecords += count;
  }
  indexLatencies.sort();
  const indexMeanMs = indexLatencies.reduce((sum, value) => sum + value, 0) / indexQueries;
  pushCase(suite, {
    name: `single-tag query, plan index (${indexQueries} random tags)`,
    opsPerSecond: 1000 / indexMeanMs,
    itemsPerSecond: (indexRecords / indexQueries) * (1000 / indexMeanMs),
    relativeMarginPercent: summary(Array.from(indexLatencies)).rme,
    samples: indexQueries,
    meanMs: indexMeanMs,
    medianMs: percentile(indexLatencies, 0.5),
    p99Ms: percentile(indexLatencies, 0.99),
  });

  // 2. Single-tag latency by a scan of the log: a few runs, timed by hand.
  const scanLatencies = [];
  for (let i = 0; i < scanRuns; i++) {
    const id = randomTagId();
    const startedAt = performance.now();
    const count = await tagQuery(feed, tagName(id), 'scan');
    scanLatencies.push(performance.now() - startedAt);
    check(`scan query for ${tagName(id)}`, count, expectedOfTag(id));
  }
  const scan = summary(scanLatencies);
  pushCase(suite, {
    name: 'single-tag query, plan scan (items = records scanned)',
    opsPerSecond: 1000 / scan.mean,
    itemsPerSecond: recordCount / (scan.mean / 1000),
    relativeMarginPercent: scan.rme,
    samples: scanRuns,
    meanMs: scan.mean,
  });
  rates.indexMeanMs = indexMeanMs;
  rates.scanMeanMs = scan.mean;

  // 3. Tag-query throughput through the default planner: many different tags, one after another.
  rates.tagBatch = (
    await suite.measure(
      `tag queries, default plan, batch form (${tagsPerOperation} tags/op)`,
      async () => {
        let count = 0;
        let expected = 0;
        for (let i = 0; i < tagsPerOperation; i++) {
          const id = randomTagId();
          count += await tagQuery(feed, tagName(id));
          expected += expectedOfTag(id);
        }
        check('tag queries', count, expected);
      },
      { async: true, items: tagsPerOperation * (recordCount / tagCount), seconds: 3 },
    )
  ).itemsPerSecond;

  rates.tagObject = (
    await suite.measure(
      `tag queries, default plan, object form (${tagsPerOperation} tags/op)`,
      async () => {
        let count = 0;
        let expected = 0;
        for (let i = 0; i < tagsPerOperation; i++) {
          const id = randomTagId();
          const tag = tagName(id);
          for await (const record of feed.read({ after: 0, filter: { tags: [tag] } })) {
            if (record.tags[0] !== tag) throw new Error(`a query for ${tag} returned a record tagged ${record.tags}`);
            count++;
          }
          expected += expectedOfTag(id);
        }
        check('tag queries', count, expected);
      },
      { async: true, items: tagsPerOperation * (recordCount / tagCount), seconds: 3 },
    )
  ).itemsPerSecond;

  // 3b. The machine's limit for those queries: each hit's bytes (a manifest entry and its
  // payload lie apart, so about payloadBytes + 64) fetched with one positional read, at the place
  // in the history files where a record of that position lies, and nothing else.
  const historyFiles = fs
    .readdirSync(directory, { recursive: true })
    .map((name) => path.join(directory, String(name)))
    .filter((file) => file.endsWith('.hist'))
    .sort();
  const fds = historyFiles.map((file) => fs.openSync(file, 'r'));
  const sizes = historyFiles.map((file) => fs.statSync(file).size);
  const historyBytes = sizes.reduce((sum, size) => sum + size, 0);
  const hitBuffer = Buffer.allocUnsafe(payloadBytes + 64);
  const readHitAt = (position) => {
    let offset = Math.floor((position / recordCount) * (historyBytes - hitBuffer.length));
    let file = 0;
    while (offset >= sizes[file] - hitBuffer.length && file < sizes.length - 1) offset -= sizes[file++];
    return fs.readSync(
      fds[file],
      hitBuffer,
      0,
      hitBuffer.length,
      Math.max(0, Math.min(offset, sizes[file] - hitBuffer.length)),
    );
  };
  rates.hitBaseline = (
    await suite.measure(
      `baseline: one positional read per hit (${tagsPerOperation} tags/op)`,
      async () => {
        let count = 0;
        let expected = 0;
        for (let i = 0; i < tagsPerOperation; i++) {
          const id = randomTagId();
          // The tag's records lie tagCount positions apart, from its residue on.
          for (let n = residueOf[id]; n < recordCount; n += tagCount) if (readHitAt(n) > 0) count++;
          expected += expectedOfTag(id);
        }
        check('baseline hits', count, expected);
      },
      { async: true, items: tagsPerOperation * (recordCount / tagCount), seconds: 3 },
    )
  ).itemsPerSecond;
  for (const fd of fds) fs.closeSync(fd);

  // 4. Type-query throughput: every record of one type (1/8 of the feed).
  const typeExpected = Math.floor((recordCount - 1 - 3) / typeCount) + 1;
  const typeQuery = async (plan) => {
    const startedAt = performance.now();
    let count = 0;
    for await (const batch of feed.readBatches({ after: 0, filter: { types: ['type-3'] }, plan })) {
      for (let j = 0; j < batch.length; j++)
        if (batch[j].type !== 'type-3') throw new Error(`a type-3 query returned ${batch[j].type}`);
      count += batch.length;
    }
    check(`type query (plan ${plan})`, count, typeExpected);
    return (performance.now() - startedAt) / 1000;
  };
  // Untimed first: the first type query loads the index segments' type columns, and whichever
  // plan ran first would pay for it. Then the plans alternate, run by run.
  await typeQuery('index');
  const typeSeconds = { auto: [], index: [] };
  for (let i = 0; i < typeRuns; i++)
    for (const plan of ['auto', 'index']) typeSeconds[plan].push(await typeQuery(plan));
  for (const plan of ['auto', 'index']) {
    const seconds = typeSeconds[plan];
    const rate = summary(seconds.map((value) => typeExpected / value));
    rates[`type-${plan}`] = rate.mean;
    pushCase(suite, {
      name: `type query type-3, ${plan === 'auto' ? 'default plan' : 'plan index'} (${typeExpected} records)`,
      opsPerSecond: rate.mean / typeExpected,
      itemsPerSecond: rate.mean,
      relativeMarginPercent: rate.rme,
      samples: typeRuns,
      meanSeconds: seconds.reduce((sum, value) => sum + value, 0) / seconds.length,
    });
  }

  // 5. Conditional against unconditional one-shot appends, interleaved round by round. The
  // appended records carry existing tags (from the upper half of the tag ids) and types, as a
  // decision model's events would. Two conditions, both passing:
  // - `high-water`: one tag (from the lower half, so never written by these appends) after the
  //   position the decision was read at, a few appends behind the head (at the head itself the
  //   check returns before looking at anything); the high-water map settles it with no I/O;
  // - `index-checked`: two tags that never share a record, after 0 (the whole history); the map
  //   cannot rule them out, so the index intersects their posting lists in every segment.
  // Every append is timed on its own. The ratios are medians over rounds of the per-round ratio
  // (kinds of one round run back to back), so one stall (a history segment filling up: the next
  // one is preallocated and the full one's index sealed, inside some append) does not decide
  // them; the cases give plain means, and the slowest append is reported on its own.
  // `appended` is the head position: each append is durable before the next is made.
  let appended = recordCount;
  const half = Math.floor(tagCount / 2);
  const appendBatch = (size) => {
    const records = new Array(size);
    for (let i = 0; i < size; i++) {
      const n = appended + i;
      records[i] = {
        payload: payloadOf(n),
        type: types[n % typeCount],
        tags: [tagName(half + (tagIdOf(n) % (tagCount - half)))],
      };
    }
    appended += size;
    return records;
  };
  const lowerTag = () => tagName(Math.floor(random() * half));
  const kinds = {
    plain: { label: 'unconditional', options: () => ({}) },
    highWater: {
      label: 'conditional, 1 tag, settled by high-water map',
      options: (size) => ({
        condition: { failIfMatch: { items: [{ tags: [lowerTag()] }] }, after: appended - appendsPerRound * size },
      }),
    },
    indexed: {
      label: 'conditional, 2 tags, checked in the index',
      options: () => {
        const first = lowerTag();
        let second = lowerTag();
        while (second === first) second = lowerTag();
        return { condition: { failIfMatch: { items: [{ tags: [first, second] }] }, after: 0 } };
      },
    },
  };
  const kindNames = Object.keys(kinds);
  const slowest = {};
  for (const size of appendBatchSizes) {
    const latencies = {};
    const roundSeconds = {};
    for (const kind of kindNames) {
      latencies[kind] = [];
      roundSeconds[kind] = [];
    }
    slowest[size] = { ms: 0, kind: '' };
    const deadline = performance.now() + appendSeconds * 1000;
    let rounds = 0;
    while (performance.now() < deadline || rounds < 6) {
      // Rotate which kind goes first, so none always follows the same neighbour.
      const order = kindNames.slice(rounds % kindNames.length).concat(kindNames.slice(0, rounds % kindNames.length));
      for (const kind of order) {
        let round = 0;
        for (let i = 0; i < appendsPerRound; i++) {
          const options = kinds[kind].options(size);
          const records = appendBatch(size);
          const startedAt = performance.now();
          await feed.append(records, options);
          const ms = performance.now() - startedAt;
          latencies[kind].push(ms);
          round += ms;
          if (ms > slowest[size].ms) slowest[size] = { ms, kind };
        }
        roundSeconds[kind].push(round / 1000);
      }
      rounds++;
    }
    for (const kind of kindNames) {
      const sorted = Float64Array.from(latencies[kind]).sort();
      const totalMs = sorted.reduce((sum, value) => sum + value, 0);
      const perRound = roundSeconds[kind].map((seconds) => (appendsPerRound * size) / seconds);
      pushCase(suite, {
        name: `one-shot append, ${kinds[kind].label}, batch ${size}`,
        opsPerSecond: (sorted.length * 1000) / totalMs,
        itemsPerSecond: (sorted.length * size * 1000) / totalMs,
        relativeMarginPercent: summary(perRound).rme,
        samples: sorted.length,
        meanMs: totalMs / sorted.length,
        medianMs: percentile(sorted, 0.5),
        p99Ms: percentile(sorted, 0.99),
        maxMs: sorted[sorted.length - 1],
      });
      if (kind !== 'plain') {
        const ratios = roundSeconds.plain
          .map((seconds, round) => seconds / roundSeconds[kind][round])
          .sort((a, b) => a - b);
        rates[`${kind}-${size}`] = ratios[Math.floor(ratios.length / 2)];
      }
    }
  }

  // 6. Condition checks per second: appends whose condition fails. `after` is random; each tag
  // has a record within every tagCount positions, so one always lies after it.
  let failures = 0;
  await suite.measure(
    'condition check that fails (CONDITION_FAILED), tag via index',
    async () => {
      const after = Math.floor(random() * (recordCount - tagCount));
      try {
        await feed.append([{ payload: '{"never":"written"}', type: 'type-0', tags: ['never'] }], {
          condition: { failIfMatch: { items: [{ tags: [tagName(randomTagId())] }] }, after },
        });
      } catch (error) {
        if (error.code !== 'CONDITION_FAILED') throw error;
        if (!(error.details.position > after))
          throw new Error(`CONDITION_FAILED named position ${error.details.position}, after ${after}`);
        failures++;
        return;
      }
      throw new Error('a condition that should fail passed');
    },
    { async: true, items: 1, seconds: 2 },
  );
  // The same, on a type. The map cannot rule the type out (every type is written everywhere), so
  // the planner decides: for a type item its estimate is the whole range, so it takes a scan of
  // the log, which reads the first commit after `after` whole to find one match.
  await suite.measure(
    'condition check that fails (CONDITION_FAILED), type via index',
    async () => {
      const after = Math.floor(random() * (recordCount - 100));
      try {
        await feed.append([{ payload: '{"never":"written"}', type: 'type-0', tags: ['never'] }], {
          condition: { failIfMatch: { items: [{ types: [types[Math.floor(random() * typeCount)]] }] }, after },
        });
      } catch (error) {
        if (error.code !== 'CONDITION_FAILED') throw error;
        return;
      }
      throw new Error('a condition that should fail passed');
    },
    { async: true, items: 1, seconds: 2 },
  );
  if ((await feed.info()).records !== appended) throw new Error('a failed conditional append wrote records');

  await store.close();

  // 7. Uniqueness checks on a feed opened afresh: each record carries a tag no record has yet,
  // and the condition fails if any record carries it, after position 0 (one item per record: a
  // hundred at batch 100). Reopened, the high-water map knows no tag, so every check goes to the
  // index: each sealed segment's tag filter rules the tags out without loading its index.
  // Interleaved with unconditional appends of the same records, round by round, as above.
  const reopened = await Store.open(directory);
  const uniqueFeed = await reopened.feed('query');
  let fresh = 0;
  const freshBatch = (size) => {
    const records = new Array(size);
    for (let i = 0; i < size; i++) {
      records[i] = {
        payload: payloadOf(appended + i),
        type: types[(appended + i) % typeCount],
        tags: [`fresh-${fresh++}`],
      };
    }
    appended += size;
    return records;
  };
  for (const size of appendBatchSizes) {
    const seconds = { plain: [], unique: [] };
    const deadline = performance.now() + appendSeconds * 1000;
    for (let round = 0; performance.now() < deadline || round < 6; round++) {
      const order = round % 2 === 0 ? ['plain', 'unique'] : ['unique', 'plain'];
      for (const kind of order) {
        let taken = 0;
        for (let i = 0; i < appendsPerRound; i++) {
          const records = freshBatch(size);
          const options =
            kind === 'unique'
              ? { condition: { failIfMatch: { items: records.map((record) => ({ tags: record.tags })) }, after: 0 } }
              : {};
          const startedAt = performance.now();
          await uniqueFeed.append(records, options);
          const ms = performance.now() - startedAt;
          taken += ms;
          if (ms > slowest[size].ms) slowest[size] = { ms, kind: `uniqueness, ${kind}` };
        }
        seconds[kind].push(taken / 1000);
      }
    }
    const ratios = seconds.plain.map((plain, round) => plain / seconds.unique[round]).sort((a, b) => a - b);
    rates[`unique-${size}`] = ratios[Math.floor(ratios.length / 2)];
    const total = seconds.unique.reduce((sum, value) => sum + value, 0);
    pushCase(suite, {
      name: `one-shot append, uniqueness check (${size === 1 ? 'a fresh tag' : `${size} fresh tags`} after 0, feed reopened), batch ${size}`,
      opsPerSecond: (seconds.unique.length * appendsPerRound) / total,
      itemsPerSecond: (seconds.unique.length * appendsPerRound * size) / total,
      relativeMarginPercent: summary(seconds.unique.map((value) => (appendsPerRound * size) / value)).rme,
      samples: seconds.unique.length * appendsPerRound,
    });
  }
  if ((await uniqueFeed.info()).records !== appended) throw new Error('the uniqueness appends lost records');
  await reopened.close();

  const checks = suite.cases.find((entry) =>
    entry.name.startsWith('condition check that fails (CONDITION_FAILED), tag'),
  );
  suite.ratio('single-tag: scan latency / index latency (mean)', rates.scanMeanMs / rates.indexMeanMs, 100);
  suite.ratio('single-tag index latency, mean', rates.indexMeanMs * 1000, undefined, 'µs');
  suite.ratio('single-tag scan latency, mean', rates.scanMeanMs, undefined, 'ms');
  suite.ratio('tag queries, default plan, batch form', rates.tagBatch, 500_000, 'records/s');
  suite.ratio('tag queries, default plan, object form', rates.tagObject, undefined, 'records/s');
  suite.ratio(
    'tag queries, batch form / baseline (one positional read per hit)',
    rates.tagBatch / rates.hitBaseline,
    0.6,
  );
  suite.ratio('type query, default plan', rates['type-auto'], undefined, 'records/s');
  // The default within 10% of the faster path: index / default at most 1.1.
  suite.ratio('type query, default plan / plan index', rates['type-auto'] / rates['type-index'], 1 / 1.1);
  for (const size of appendBatchSizes) {
    suite.ratio(
      `conditional (high-water) / unconditional append, batch ${size} (median of rounds)`,
      rates[`highWater-${size}`],
      0.9,
    );
    suite.ratio(
      `conditional (index-checked) / unconditional append, batch ${size} (median of rounds)`,
      rates[`indexed-${size}`],
      0.9,
    );
  }
  for (const size of appendBatchSizes) {
    suite.ratio(
      `uniqueness check (fresh tags after 0, feed reopened) / unconditional append, batch ${size} (median of rounds)`,
      rates[`unique-${size}`],
      0.9,
    );
  }
  for (const size of appendBatchSizes) {
    suite.ratio(`slowest one-shot append at batch ${size} (${slowest[size].kind})`, slowest[size].ms, undefined, 'ms');
  }
  suite.ratio('condition checks (failing, tag)', checks.opsPerSecond, undefined, 'checks/s');
  process.stderr.write(
    `  (feed: ${segments} index segments; ${failures} failed checks counted; load average at the end ${os
      .loadavg()
      .map((value) => value.toFixed(1))
      .join(' ')})\n`,
  );

  return suite.finish();
}
