/**
 * Append conditions (the DCB model): "fail if a record matching this query was published after
 * position p". With appends one at a time, the outcome must be exactly what a scan of the history
 * says — never a false negative, never a false positive — and a refusal names the first matching
 * position. Under concurrency, requests in one group commit may be refused with SAME_BATCH
 * (retryable), but a read–decide–append loop must still never overbook.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type AppendRecord,
  type Feed,
  isStreamStackError,
  limits,
  type QueryItem,
  type Store,
  type StoredRecord,
} from '../../packages/engine/src/index.js';
import { branchTally } from '../support/branches.js';
import { itemMatches } from '../support/query-oracle.js';
import { ManualClock, openStore, sequentialIds, temporaryDirectory, text } from '../support/store.js';

type KernelChoice = 'native' | 'ts';
const dayMs = 24 * 60 * 60 * 1000;

// ---- The oracle ---------------------------------------------------------------------------------

interface Published {
  readonly position: number;
  readonly type?: string;
  readonly tags: readonly string[];
}

/** The first published record after `after` that the query (an OR of items; none: all) matches. */
function firstMatch(published: readonly Published[], items: readonly QueryItem[], after: number): number | undefined {
  return published.find(
    (record) => record.position > after && (items.length === 0 || items.some((item) => itemMatches(item, record))),
  )?.position;
}

async function outcome(
  promise: Promise<unknown>,
): Promise<{ ok: true } | { ok: false; code: string; details: Readonly<Record<string, unknown>> }> {
  try {
    await promise;
    return { ok: true };
  } catch (error) {
    if (isStreamStackError(error)) return { ok: false, code: error.code, details: error.details };
    throw error;
  }
}

// ---- Generators -----------------------------------------------------------------------------------

const types = ['booked', 'cancelled', 'note'] as const;
const tags = [
  'course:1',
  'course:2',
  'course:3',
  'student:1',
  'student:2',
  'student:3',
  'student:4',
  'vip',
  'é',
] as const;

interface RecordSpec {
  readonly type?: string;
  readonly tags: readonly string[];
  readonly pad: number;
}

const recordArb: fc.Arbitrary<RecordSpec> = fc
  .record({
    type: fc.option(fc.constantFrom(...types), { nil: undefined, freq: 4 }),
    tags: fc.uniqueArray(fc.constantFrom(...tags), { maxLength: 3, size: 'max' }),
    // Big enough that the 64 KiB history segments roll every few dozen records.
    pad: fc.oneof(
      { weight: 3, arbitrary: fc.nat(100) },
      { weight: 2, arbitrary: fc.integer({ min: 1000, max: 3000 }) },
    ),
  })
  .map(({ type, ...rest }) => (type === undefined ? rest : { type, ...rest }));

/** 0–2 types and 0–3 tags, drawn from the written ones and a few never written. */
const itemArb: fc.Arbitrary<QueryItem> = fc
  .record({
    types: fc.option(fc.array(fc.constantFrom(...types, 'never'), { maxLength: 2, size: 'max' }), { nil: undefined }),
    tags: fc.option(fc.array(fc.constantFrom(...tags, 'never'), { maxLength: 3, size: 'max' }), { nil: undefined }),
  })
  .map(({ types: t, tags: g }) => ({
    ...(t === undefined ? {} : { types: t }),
    ...(g === undefined ? {} : { tags: g }),
  }));

interface ConditionSpec {
  readonly items: readonly QueryItem[];
  /** Pass a one-item query as the bare item. */
  readonly bare: boolean;
  /** `after` as: a fraction of the last position, or that position minus a little, or past it. */
  readonly after:
    | { readonly kind: 'fraction'; readonly value: number }
    | { readonly kind: 'behind'; readonly value: number }
    | { readonly kind: 'omitted' };
}

const conditionArb: fc.Arbitrary<ConditionSpec> = fc.record({
  items: fc.oneof(
    { weight: 1, arbitrary: fc.constant([] as QueryItem[]) },
    { weight: 12, arbitrary: fc.array(itemArb, { minLength: 1, maxLength: 3, size: 'max' }) },
  ),
  bare: fc.boolean(),
  after: fc.oneof(
    // Millionths, not fc.double: doubles lean hard towards tiny values, which would put almost
    // every fractional `after` at 0.
    {
      weight: 4,
      arbitrary: fc
        .integer({ min: 0, max: 1_000_000 })
        .map((n) => ({ kind: 'fraction' as const, value: n / 1_000_000 })),
    },
    { weight: 4, arbitrary: fc.integer({ min: -2, max: 12 }).map((value) => ({ kind: 'behind' as const, value })) },
    { weight: 1, arbitrary: fc.constant({ kind: 'omitted' as const }) },
  ),
});

type Step =
  | { readonly kind: 'append'; readonly records: readonly RecordSpec[]; readonly condition?: ConditionSpec }
  | {
      readonly kind: 'seal';
      readonly batches: readonly (readonly RecordSpec[])[];
      readonly condition: ConditionSpec;
      /** After a refused seal: append one more batch, reopen the store, or neither, then seal. */
      readonly then: 'seal' | 'append' | 'reopen';
    }
  | { readonly kind: 'reopen' };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      records: fc.array(recordArb, { minLength: 1, maxLength: 8, size: 'max' }),
    }),
  },
  {
    weight: 10,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      records: fc.array(recordArb, { minLength: 1, maxLength: 4, size: 'max' }),
      condition: conditionArb,
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('seal' as const),
      batches: fc.array(fc.array(recordArb, { minLength: 1, maxLength: 4, size: 'max' }), {
        minLength: 1,
        maxLength: 2,
        size: 'max',
      }),
      condition: conditionArb,
      // biome-ignore lint/suspicious/noThenProperty: a plain record of the property's steps, never awaited.
      then: fc.constantFrom('seal' as const, 'append' as const, 'reopen' as const),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'reopen' as const }) },
);

// ---- The harness ------------------------------------------------------------------------------

interface Harness {
  store: Store;
  feed: Feed;
  readonly token: string;
  readonly directory: string;
  readonly kernels: KernelChoice;
  readonly clock: ManualClock;
  readonly ids: () => string;
  readonly published: Published[];
  payloads: number;
}

const lastPosition = (harness: Harness): number => harness.published.length;

/** A record to append; `counter` numbers the payloads so they are distinct. */
function toAppend(counter: { payloads: number }, spec: RecordSpec): AppendRecord {
  return {
    payload: `p${counter.payloads++}|${'.'.repeat(spec.pad)}`,
    ...(spec.type === undefined ? {} : { type: spec.type }),
    ...(spec.tags.length === 0 ? {} : { tags: spec.tags }),
  };
}

function publish(
  harness: Harness,
  commit: { firstPosition: number; lastPosition: number },
  specs: readonly RecordSpec[],
): void {
  expect(commit.firstPosition).toBe(lastPosition(harness) + 1);
  expect(commit.lastPosition).toBe(lastPosition(harness) + specs.length);
  for (const spec of specs)
    harness.published.push({
      position: harness.published.length + 1,
      ...(spec.type === undefined ? {} : { type: spec.type }),
      tags: spec.tags,
    });
}

async function reopen(harness: Harness): Promise<void> {
  await harness.store.close();
  harness.store = await openStore(harness.directory, {
    kernels: harness.kernels,
    clock: harness.clock.read,
    newId: harness.ids,
  });
  harness.feed = await harness.store.feed('f');
}

/** The condition as the API takes it, and the `after` the oracle uses (0 when omitted); `last`: the last position. */
function resolveCondition(
  last: number,
  spec: ConditionSpec,
): { condition: { failIfMatch: unknown; after?: number }; after: number } {
  const after =
    spec.after.kind === 'omitted'
      ? 0
      : spec.after.kind === 'fraction'
        ? Math.floor(spec.after.value * last)
        : Math.max(0, last - spec.after.value);
  const failIfMatch = spec.bare && spec.items.length === 1 ? spec.items[0] : { items: spec.items };
  return { condition: spec.after.kind === 'omitted' ? { failIfMatch } : { failIfMatch, after }, after };
}

/** Checks a conditional write's outcome against the oracle. */
function expectOutcome(
  harness: Harness,
  result: Awaited<ReturnType<typeof outcome>>,
  spec: ConditionSpec,
  after: number,
  what: string,
): boolean {
  const expected = firstMatch(harness.published, spec.items, after);
  const label = `${what} with ${JSON.stringify({ items: spec.items, after })} over ${lastPosition(harness)} records`;
  if (expected === undefined) {
    expect(result, `${label}: nothing matches, so it must succeed`).toEqual({ ok: true });
    return true;
  }
  expect(result, `${label}: position ${expected} matches`).toEqual({
    ok: false,
    code: 'CONDITION_FAILED',
    details: { position: expected, after },
  });
  return false;
}

async function runStep(harness: Harness, step: Step): Promise<{ refused: boolean }> {
  const { token } = harness;
  if (step.kind === 'reopen') {
    await reopen(harness);
    return { refused: false };
  }
  if (step.kind === 'append') {
    const records = step.records.map((spec) => toAppend(harness, spec));
    if (!step.condition) {
      publish(harness, await harness.feed.append(records, { token }), step.records);
      return { refused: false };
    }
    const { condition, after } = resolveCondition(lastPosition(harness), step.condition);
    const before = await harness.feed.info();
    let commit: Awaited<ReturnType<Feed['append']>> | undefined;
    const result = await outcome(
      harness.feed.append(records, { token, condition }).then((written) => (commit = written)),
    );
    if (expectOutcome(harness, result, step.condition, after, 'a conditional append')) {
      publish(harness, commit!, step.records);
      return { refused: false };
    }
    expect(await harness.feed.info(), 'a refused append changes nothing').toEqual(before);
    return { refused: true };
  }
  // A stream sealed under a condition: its own (unpublished) records never count.
  let stream = await harness.feed.openStream({ token });
  const specs = step.batches.flat();
  for (const batch of step.batches)
    await stream.append(
      batch.map((spec) => toAppend(harness, spec)),
      { token },
    );
  const { condition, after } = resolveCondition(lastPosition(harness), step.condition);
  const before = await harness.feed.info();
  let commit: Awaited<ReturnType<typeof stream.seal>> | undefined;
  const result = await outcome(stream.seal({ token, condition }).then((sealed) => (commit = sealed)));
  if (expectOutcome(harness, result, step.condition, after, 'a conditional seal')) {
    publish(harness, commit!, specs);
    return { refused: false };
  }
  // Refused: nothing published, the stream still open, and it can be sealed later.
  expect(await harness.feed.info(), 'a refused seal publishes nothing').toEqual(before);
  expect(await stream.info()).toEqual({ id: stream.id, state: 'open', records: specs.length });
  expect((await harness.feed.activeStream())?.id).toBe(stream.id);
  if (step.then === 'append') {
    const extra = { tags: ['course:1'], type: 'booked', pad: 0 };
    await stream.append([toAppend(harness, extra)], { token });
    specs.push(extra);
  } else if (step.then === 'reopen') {
    await reopen(harness);
    stream = await harness.feed.stream(stream.id);
    expect(await stream.info()).toEqual({ id: stream.id, state: 'open', records: specs.length });
  }
  // The same condition, moved up to the head, now holds.
  const retried = await stream.seal({ token, condition: { ...condition, after: lastPosition(harness) } });
  publish(harness, retried, specs);
  expect((await stream.info()).state).toBe('sealed');
  return { refused: true };
}

describe('append conditions against a scan of the history', () => {
  it('refuse exactly when a matching record lies after `after`, naming the first (appends and seals, one at a time)', async () => {
    const tally = { refused: 0, accepted: 0, steps: 0, sealsRefused: 0 };
    const branches = branchTally('conditions, one at a time', [
      'append accepted',
      'append refused',
      'unconditional append',
      'seal accepted',
      'seal refused, then sealed',
      'seal refused, then appended to',
      'seal refused, then reopened',
      'reopen',
      'after omitted',
      'after at a fraction past the start',
      'after a few records behind the head',
      'after at or past the head',
      'no items (matches everything)',
      'an item on a type or tag never written',
      'ts kernels',
      'native kernels',
    ]);
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom<KernelChoice>('native', 'ts'),
        // 150–400 records first (with the 64 KiB segments, several sealed index segments), then
        // 20–60 steps. Without size 'max', fast-check would stop at 310 records and 50 steps.
        fc.array(recordArb, { minLength: 150, maxLength: 400, size: 'max' }),
        fc.array(stepArb, { minLength: 20, maxLength: 60, size: 'max' }),
        async (kernels, initial, steps) => {
          const directory = temporaryDirectory();
          const clock = new ManualClock();
          const ids = sequentialIds();
          const store = await openStore(directory, { kernels, clock: clock.read, newId: ids });
          const feed = await store.createFeed('f');
          const { token } = await feed.acquireLease({ holder: 'conditions-test', ttlMs: dayMs });
          const harness: Harness = { store, feed, token, directory, kernels, clock, ids, published: [], payloads: 0 };
          try {
            for (let at = 0; at < initial.length; at += 10) {
              const chunk = initial.slice(at, at + 10);
              publish(
                harness,
                await harness.feed.append(
                  chunk.map((spec) => toAppend(harness, spec)),
                  { token },
                ),
                chunk,
              );
            }
            branches.hit(kernels === 'ts' ? 'ts kernels' : 'native kernels');
            for (const step of steps) {
              const last = lastPosition(harness);
              const { refused } = await runStep(harness, step);
              tally.steps++;
              if (step.kind !== 'reopen') tally[refused ? 'refused' : 'accepted']++;
              if (step.kind === 'seal' && refused) tally.sealsRefused++;
              if (step.kind === 'reopen') branches.hit('reopen');
              else if (step.kind === 'append')
                branches.hit(
                  step.condition === undefined
                    ? 'unconditional append'
                    : refused
                      ? 'append refused'
                      : 'append accepted',
                );
              else
                branches.hit(
                  !refused
                    ? 'seal accepted'
                    : step.then === 'seal'
                      ? 'seal refused, then sealed'
                      : step.then === 'append'
                        ? 'seal refused, then appended to'
                        : 'seal refused, then reopened',
                );
              const condition = step.kind === 'reopen' ? undefined : step.condition;
              if (condition === undefined) continue;
              const { after } = resolveCondition(last, condition);
              if (condition.after.kind === 'omitted') branches.hit('after omitted');
              else if (after >= last) branches.hit('after at or past the head');
              else if (condition.after.kind === 'behind') branches.hit('after a few records behind the head');
              else if (after > 0) branches.hit('after at a fraction past the start');
              branches.hit('no items (matches everything)', condition.items.length === 0);
              const neverWritten = (item: QueryItem) => [...(item.types ?? []), ...(item.tags ?? [])].includes('never');
              branches.hit('an item on a type or tag never written', condition.items.some(neverWritten));
            }
            // The history is what the oracle says, record for record.
            const stored: Published[] = [];
            for await (const record of harness.feed.read())
              stored.push({
                position: record.position,
                ...(record.type === undefined ? {} : { type: record.type }),
                tags: [...record.tags],
              });
            expect(stored).toEqual(harness.published.map((record) => ({ ...record, tags: [...record.tags] })));
          } finally {
            await harness.store.close();
          }
        },
      ),
      { numRuns: 60, endOnFailure: true },
    );
    branches.expectAllReached();
    // Both outcomes happen often, or the property says little.
    expect(tally.refused).toBeGreaterThan(tally.steps / 10);
    expect(tally.accepted).toBeGreaterThan(tally.steps / 10);
    expect(tally.sealsRefused).toBeGreaterThan(10);
  });

  it('under concurrency: an accepted append’s condition held up to its own position, and a refusal names the first match', async () => {
    const tally = { accepted: 0, refused: 0, sameBatch: 0 };
    const requestArb = fc.record({
      records: fc.array(recordArb, { minLength: 1, maxLength: 3, size: 'max' }),
      condition: fc.option(conditionArb, { nil: undefined, freq: 5 }),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom<KernelChoice>('native', 'ts'),
        // 10–30 bursts of 2–8 concurrent requests each.
        fc.array(fc.array(requestArb, { minLength: 2, maxLength: 8, size: 'max' }), {
          minLength: 10,
          maxLength: 30,
          size: 'max',
        }),
        async (kernels, bursts) => {
          const store = await openStore(temporaryDirectory(), { kernels });
          const feed = await store.createFeed('f');
          const counter = { payloads: 0 };
          const checks: {
            spec: ConditionSpec;
            after: number;
            result: Awaited<ReturnType<typeof outcome>>;
            firstPosition?: number;
          }[] = [];
          try {
            for (const burst of bursts) {
              // Every request of a burst is submitted at once: they share group commits.
              const last = (await feed.info()).records;
              const pending = burst.map(async (request) => {
                const records = request.records.map((spec) => toAppend(counter, spec));
                if (!request.condition) return void (await feed.append(records));
                const { condition, after } = resolveCondition(last, request.condition);
                let firstPosition: number | undefined;
                const result = await outcome(
                  feed.append(records, { condition }).then((commit) => (firstPosition = commit.firstPosition)),
                );
                checks.push({
                  spec: request.condition,
                  after,
                  result,
                  ...(firstPosition === undefined ? {} : { firstPosition }),
                });
              });
              await Promise.all(pending);
            }
            const history: Published[] = [];
            for await (const record of feed.read())
              history.push({
                position: record.position,
                ...(record.type === undefined ? {} : { type: record.type }),
                tags: record.tags,
              });
            for (const { spec, after, result, firstPosition } of checks) {
              const label = JSON.stringify({ items: spec.items, after, result, firstPosition });
              if (result.ok) {
                tally.accepted++;
                // Nothing matching lies between `after` and the append itself.
                const before = history.filter((record) => record.position < firstPosition!);
                expect(firstMatch(before, spec.items, after), label).toBeUndefined();
              } else if (result.code === 'SAME_BATCH') {
                tally.sameBatch++;
                expect(result.details, label).toEqual({ retryable: true });
              } else {
                tally.refused++;
                expect(result.code, label).toBe('CONDITION_FAILED');
                // The durable arm saw a prefix of the final history, so its first match is the first match.
                expect(result.details, label).toEqual({ position: firstMatch(history, spec.items, after), after });
              }
            }
          } finally {
            await store.close();
          }
        },
      ),
      { numRuns: 30, endOnFailure: true },
    );
    console.log(`concurrent conditional appends: ${JSON.stringify(tally)}`);
    expect(tally.accepted).toBeGreaterThan(50);
    expect(tally.refused).toBeGreaterThan(50);
    expect(tally.sameBatch).toBeGreaterThan(10);
  });

  it('validates the condition and reports `after` in the refusal', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    await feed.append([
      { payload: 'a', type: 'booked', tags: ['course:1'] },
      { payload: 'b', type: 'booked', tags: ['course:2'] },
    ]);
    for (const condition of [
      { after: 0 },
      { failIfMatch: {}, after: -1 },
      { failIfMatch: {}, after: 1.5 },
      { failIfMatch: {}, after: '1' },
      { failIfMatch: { items: 'x' } },
      { failIfMatch: { types: 'booked' } },
      { failIfMatch: { tags: [''] } },
      { failIfMatch: { items: Array.from({ length: limits.queryItemsMax + 1 }, () => ({ tags: ['x'] })) } },
    ]) {
      await expect(
        feed.append([{ payload: 'c' }], { condition: condition as never }),
        JSON.stringify(condition).slice(0, 80),
      ).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
      });
    }
    expect((await feed.info()).records).toBe(2);
    await expect(
      feed.append([{ payload: 'c' }], { condition: { failIfMatch: { tags: ['course:2'] }, after: 1 } }),
    ).rejects.toMatchObject({
      code: 'CONDITION_FAILED',
      details: { position: 2, after: 1 },
    });
    // Matches everything: an empty query, an empty item list, an item with neither field.
    for (const failIfMatch of [{}, { items: [] }, { items: [{ tags: ['never'] }, {}] }, { types: [], tags: [] }]) {
      await expect(
        feed.append([{ payload: 'c' }], { condition: { failIfMatch, after: 1 } }),
        JSON.stringify(failIfMatch),
      ).rejects.toMatchObject({
        code: 'CONDITION_FAILED',
        details: { position: 2 },
      });
      // …but nothing lies after the head.
      await expect(
        feed.append([{ payload: `c-${JSON.stringify(failIfMatch)}` }], {
          condition: { failIfMatch, after: (await feed.info()).records },
        }),
      ).resolves.toMatchObject({
        records: 1,
      });
    }
    await store.close();
  });

  it('settles requests not yet published by their staged records: SAME_BATCH only where one matches', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    const booking = (course: number, student: number): AppendRecord => ({
      payload: `${course}/${student}`,
      type: 'booked',
      tags: [`course:${course}`, `student:${student}`],
    });
    const onCourse = (course: number) => ({
      failIfMatch: { items: [{ types: ['booked'], tags: [`course:${course}`] }] },
      after: 0,
    });
    // The first request goes alone; the rest queue behind its write and form the next group,
    // prepared while the first is still in flight.
    const [, first, sameCourse, otherCourse, typeOnly, otherType, tagsApart, untagged] = await Promise.all([
      outcome(feed.append([{ payload: 'warm-up' }])),
      outcome(feed.append([booking(1, 1)], { condition: onCourse(1) })),
      outcome(feed.append([booking(1, 2)], { condition: onCourse(1) })),
      outcome(feed.append([booking(2, 3)], { condition: onCourse(2) })),
      outcome(feed.append([booking(3, 4)], { condition: { failIfMatch: { types: ['booked'] }, after: 0 } })),
      outcome(
        feed.append([{ payload: 'cancel', type: 'cancelled' }], {
          condition: { failIfMatch: { types: ['cancelled'] }, after: 0 },
        }),
      ),
      // Both tags are staged, but on different records: no staged record carries them both.
      outcome(
        feed.append([booking(5, 5)], { condition: { failIfMatch: { tags: ['course:1', 'student:3'] }, after: 0 } }),
      ),
      outcome(feed.append([{ payload: 'note' }], { condition: { failIfMatch: { tags: ['course:9'] }, after: 0 } })),
    ]);
    expect(first).toEqual({ ok: true });
    expect(sameCourse).toEqual({ ok: false, code: 'SAME_BATCH', details: { retryable: true } });
    expect(otherCourse).toEqual({ ok: true });
    // Staged bookings match a query for the type.
    expect(typeOnly).toEqual({ ok: false, code: 'SAME_BATCH', details: { retryable: true } });
    expect(otherType).toEqual({ ok: true });
    expect(tagsApart).toEqual({ ok: true });
    expect(untagged).toEqual({ ok: true });
    // Retried alone, the durable arm decides, and names the record the group published.
    const positions: Record<string, number> = {};
    for await (const record of feed.read()) positions[text(record.payload)] = record.position;
    await expect(feed.append([booking(1, 2)], { condition: onCourse(1) })).rejects.toMatchObject({
      code: 'CONDITION_FAILED',
      details: { position: positions['1/1'] },
    });
    await expect(
      feed.append([booking(1, 2)], { condition: { ...onCourse(1), after: positions['1/1'] } }),
    ).resolves.toMatchObject({ records: 1 });
    await store.close();
  });

  it('answers a retry after SAME_BATCH without another: a match in a group in flight is waited for, then the durable arm decides', async () => {
    // A client that retries SAME_BATCH at once, with no I/O of its own between tries, must not
    // spin: were a match in a group still in flight refused again, each retry would be refused in
    // microtasks alone, and the fsync that would publish the match could never be handled.
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    const booking = (student: number): AppendRecord => ({
      payload: `1/${student}`,
      type: 'booked',
      tags: ['course:1', `student:${student}`],
    });
    const condition = { failIfMatch: { items: [{ types: ['booked'], tags: ['course:1'] }] }, after: 0 };
    const attemptsMax = 1000;
    let attempts = 0;
    const outcomes: string[] = [];
    const retryAtOnce = async (): Promise<
      { ok: true } | { ok: false; code: string; details: Readonly<Record<string, unknown>> }
    > => {
      for (;;) {
        attempts++;
        const result = await outcome(feed.append([booking(2)], { condition }));
        outcomes.push(result.ok ? 'ok' : result.code);
        if (result.ok || result.code !== 'SAME_BATCH' || attempts >= attemptsMax) return result;
      }
    };
    // The warm-up goes alone; the booking and the retrying client form the next group, which is
    // written behind it, so the client's retry is prepared while the booking is in flight.
    const [, booked, retried] = await Promise.all([
      outcome(feed.append([{ payload: 'warm-up' }])),
      outcome(feed.append([booking(1)], { condition })),
      retryAtOnce(),
    ]);
    expect(booked).toEqual({ ok: true });
    expect(outcomes).toEqual(['SAME_BATCH', 'CONDITION_FAILED']);
    const positions: Record<string, number> = {};
    for await (const record of feed.read()) positions[text(record.payload)] = record.position;
    expect(retried).toEqual({ ok: false, code: 'CONDITION_FAILED', details: { position: positions['1/1'], after: 0 } });
    expect(positions['1/2']).toBeUndefined();
    await store.close();
  });

  it('still finds a tag the high-water map has forgotten', async () => {
    // More distinct tags than the map keeps, so the oldest are evicted and the floor rises.
    const store = await openStore(temporaryDirectory(), { segmentBytes: 16 * 1024 * 1024 });
    const feed = await store.createFeed('f');
    const total = limits.tagHighWaterEntriesMax + 2 * limits.tagsPerRecordMax;
    const perRecord = limits.tagsPerRecordMax;
    let written = 0;
    let positionOf0 = 0;
    for (let record = 0; written < total; record++) {
      const batch: AppendRecord[] = [];
      for (let n = 0; n < 100 && written < total; n++) {
        batch.push({
          payload: `r${record}-${n}`,
          type: 'bulk',
          tags: Array.from({ length: perRecord }, () => `t${written++}`),
        });
      }
      const commit = await feed.append(batch);
      if (positionOf0 === 0) positionOf0 = commit.firstPosition;
    }
    const last = (await feed.info()).records;
    // `t0` was raised first, so it is long evicted; a condition on it must still see it.
    await expect(
      feed.append([{ payload: 'x' }], { condition: { failIfMatch: { tags: ['t0'] }, after: 0 } }),
    ).rejects.toMatchObject({
      code: 'CONDITION_FAILED',
      details: { position: positionOf0 },
    });
    await expect(
      feed.append([{ payload: 'x' }], {
        condition: { failIfMatch: { tags: ['t0', `t${perRecord - 1}`] }, after: positionOf0 - 1 },
      }),
    ).rejects.toMatchObject({
      code: 'CONDITION_FAILED',
      details: { position: positionOf0 },
    });
    await expect(
      feed.append([{ payload: 'y' }], { condition: { failIfMatch: { tags: ['t0'] }, after: positionOf0 } }),
    ).resolves.toMatchObject({ records: 1 });
    // A tag never written, below the floor: the index says no.
    await expect(
      feed.append([{ payload: 'z' }], { condition: { failIfMatch: { tags: ['never-written'] }, after: 0 } }),
    ).resolves.toMatchObject({ records: 1 });
    // The newest tag is remembered exactly.
    const newest = `t${written - 1}`;
    await expect(
      feed.append([{ payload: 'w' }], { condition: { failIfMatch: { tags: [newest] }, after: last - 1 } }),
    ).rejects.toMatchObject({
      code: 'CONDITION_FAILED',
      details: { position: last },
    });
    await expect(
      feed.append([{ payload: 'v' }], { condition: { failIfMatch: { tags: [newest] }, after: last } }),
    ).resolves.toMatchObject({ records: 1 });
    await store.close();
  });
});

// ---- Concurrency: the course-capacity example -----------------------------------------------

/** Far above what 40 students on 8 courses need (each refusal is another's booking), far below a spin. */
const enrolAttemptsMax = 500;

interface Retries {
  sameBatch: number;
  conditionFailed: number;
  /** Positions CONDITION_FAILED named, with the course the refused booking was for. */
  named: { position: number; course: number; head: number }[];
}

/**
 * One student's read–decide–append loop over their preferred courses: read the course's bookings
 * (noting the head first, so the read sees at least everything up to it), and if there is room,
 * book it on the condition that no booking of the course was published since.
 */
async function enrol(
  feed: Feed,
  student: number,
  preferences: readonly number[],
  capacity: number,
  retries: Retries,
): Promise<number | undefined> {
  // Bounded so that a store that keeps refusing fails the test rather than hangs it: a refusal
  // answered in microtasks alone starves the timers a test timeout needs.
  let attempts = 0;
  for (const course of preferences) {
    for (;;) {
      if (++attempts > enrolAttemptsMax)
        throw new Error(`student ${student}: still refused after ${enrolAttemptsMax} attempts`);
      const head = (await feed.info()).records;
      let booked = 0;
      for await (const record of feed.read({ filter: { types: ['booked'], tags: [`course:${course}`] } })) {
        expect(record.type).toBe('booked');
        booked++;
      }
      if (booked >= capacity) break;
      try {
        await feed.append(
          [
            {
              payload: JSON.stringify({ student, course }),
              type: 'booked',
              tags: [`course:${course}`, `student:${student}`],
            },
          ],
          { condition: { failIfMatch: { items: [{ types: ['booked'], tags: [`course:${course}`] }] }, after: head } },
        );
        return course;
      } catch (error) {
        if (isStreamStackError(error, 'SAME_BATCH')) {
          expect(error.details.retryable).toBe(true);
          retries.sameBatch++;
        } else if (isStreamStackError(error, 'CONDITION_FAILED')) {
          retries.conditionFailed++;
          retries.named.push({ position: error.details.position as number, course, head });
        } else {
          throw error;
        }
      }
    }
  }
  return undefined;
}

describe.each(['native', 'ts'] as const)('the course-capacity example (%s kernels)', (kernels) => {
  it.each([12345, 777, 2024])(
    'never overbooks a course under concurrent read–decide–append, and books each successful student once (seed %i)',
    async (preferenceSeed) => {
      const students = 40;
      const courses = 8;
      const capacity = 3;
      const store = await openStore(temporaryDirectory(), { kernels });
      const feed = await store.createFeed('courses');
      // A history spanning several segments first, tagged like the bookings but of other types.
      for (let commit = 0; commit < 30; commit++) {
        await feed.append(
          Array.from({ length: 10 }, (_, n) => ({
            payload: `view-${commit}-${n}|${'.'.repeat(500)}`,
            type: n % 2 === 0 ? 'viewed' : 'cancelled',
            tags: [`course:${1 + ((commit + n) % courses)}`, `student:${n}`],
          })),
        );
      }
      // Preferences: every student wants some course; the popular ones are in more lists.
      let seed = preferenceSeed;
      const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
      const preferences = Array.from({ length: students }, () => {
        const count = 1 + Math.floor(random() * 3);
        const list: number[] = [];
        while (list.length < count) {
          const course = 1 + Math.floor(random() ** 2 * courses);
          if (!list.includes(course)) list.push(course);
        }
        return list;
      });
      const retries: Retries = { sameBatch: 0, conditionFailed: 0, named: [] };
      // Noise while the students book: same course tags, other types (they must not count).
      let noise = 0;
      const noiseWriter = (async () => {
        for (let n = 0; n < 60; n++) {
          await feed.append([
            { payload: `noise-${n}|${'.'.repeat(800)}`, type: 'viewed', tags: [`course:${1 + (n % courses)}`] },
          ]);
          noise++;
        }
      })();
      const results = await Promise.all(
        preferences.map((list, student) => enrol(feed, student, list, capacity, retries)),
      );
      await noiseWriter;
      expect(noise).toBe(60);

      const bookings: StoredRecord[] = [];
      for await (const record of feed.read({ filter: { types: ['booked'] } })) bookings.push(record);
      const perCourse = new Map<number, number[]>();
      for (const record of bookings) {
        const { student, course } = JSON.parse(text(record.payload)) as { student: number; course: number };
        expect(record.tags).toEqual([`course:${course}`, `student:${student}`]);
        perCourse.set(course, [...(perCourse.get(course) ?? []), student]);
      }
      for (const [course, booked] of perCourse)
        expect(booked.length, `course ${course}: ${booked.join(', ')}`).toBeLessThanOrEqual(capacity);
      // Every student who was told "booked" is booked exactly once, on that course; no one else is.
      const bookedStudents = bookings.map(
        (record) => (JSON.parse(text(record.payload)) as { student: number }).student,
      );
      for (let student = 0; student < students; student++) {
        const course = results[student];
        const mine = bookedStudents.filter((booked) => booked === student);
        if (course === undefined) {
          expect(mine, `student ${student} was refused everywhere`).toEqual([]);
          // Refused only where the course really is full.
          for (const wanted of preferences[student])
            expect(perCourse.get(wanted)?.length ?? 0, `student ${student}, course ${wanted}`).toBe(capacity);
        } else {
          expect(mine, `student ${student}`).toEqual([student]);
          expect(perCourse.get(course)).toContain(student);
        }
      }
      // No refusal was a false positive: each named a booking of that course published after the head read.
      const byPosition = new Map(bookings.map((record) => [record.position, record]));
      for (const { position, course, head } of retries.named) {
        expect(position).toBeGreaterThan(head);
        expect(byPosition.get(position)?.tags, `position ${position}`).toContain(`course:${course}`);
      }
      const successes = results.filter((course) => course !== undefined).length;
      expect(bookings.length).toBe(successes);
      console.log(
        `course capacity (${kernels}, seed ${preferenceSeed}): ${successes} of ${students} students booked into ${perCourse.size} courses; ` +
          `retries: ${retries.sameBatch} SAME_BATCH, ${retries.conditionFailed} CONDITION_FAILED`,
      );
      await store.close();
    },
  );
});
