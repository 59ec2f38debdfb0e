/**
 * The front door of the API, fuzzed: arbitrary values where records, options and conditions go
 * give either an acknowledged commit or a typed error — never another exception — and after a
 * refusal the data directory is byte for byte what it was.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isStreamStackError } from '../../packages/engine/src/index.js';
import { digestTree, openStore, temporaryDirectory } from '../support/store.js';

/** Values of every JavaScript kind a careless caller might pass, nested a little. */
const anyValue = fc.oneof(
  { depthSize: 'small', withCrossShrink: true },
  fc.string({ unit: 'binary', maxLength: 20, size: 'max' }),
  fc.string({ maxLength: 20, size: 'max' }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constantFrom(undefined, null, Number.NaN, Number.POSITIVE_INFINITY, -1, 2 ** 53, '', '\ud800'),
  fc.uint8Array({ maxLength: 20, size: 'max' }),
  fc.array(fc.string({ maxLength: 8, size: 'max' }), { maxLength: 4, size: 'max' }),
);

/** Well-formed records: what an accepted append is made of. */
const goodRecord = fc.record(
  {
    payload: fc.oneof(fc.string({ maxLength: 40, size: 'max' }), fc.uint8Array({ maxLength: 40, size: 'max' })),
    key: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 8, size: 'max' }),
    version: fc.nat(),
    type: fc.constantFrom('a', 'b'),
    tags: fc.array(fc.constantFrom('x', 'y', 'z'), { maxLength: 3, size: 'max' }),
  },
  { requiredKeys: ['payload'] },
);

/** Records whose fields may be of any kind, with a stray field now and then. */
const wildRecord = fc.record(
  {
    payload: fc.oneof(
      fc.string({ maxLength: 40, size: 'max' }),
      fc.uint8Array({ maxLength: 40, size: 'max' }),
      anyValue,
    ),
    key: fc.oneof(fc.string({ minLength: 1, maxLength: 8, size: 'max' }), anyValue),
    version: fc.oneof(fc.nat(), anyValue),
    tombstone: fc.oneof(fc.boolean(), anyValue),
    type: fc.oneof(fc.constantFrom('a', 'b'), anyValue),
    tags: fc.oneof(fc.array(fc.constantFrom('x', 'y', 'z'), { maxLength: 3, size: 'max' }), anyValue),
    fingerprint: anyValue,
    timestamp: fc.oneof(fc.nat(), anyValue),
    tag: anyValue,
  },
  { requiredKeys: ['payload'] },
);

describe('the API front door, fuzzed', () => {
  it('appends or refuses with a typed error, and a refusal changes nothing on disk', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await store.createFeed('f');
    let accepted = 0;
    let refused = 0;
    // Batches of 0-5 records, 300 runs: enough to reach both outcomes many times.
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          { arbitrary: fc.array(goodRecord, { minLength: 1, maxLength: 5, size: 'max' }), weight: 2 },
          { arbitrary: fc.array(fc.oneof(goodRecord, wildRecord), { maxLength: 5, size: 'max' }), weight: 3 },
          { arbitrary: anyValue, weight: 1 },
        ),
        fc.oneof(
          { arbitrary: fc.constant(undefined), weight: 3 },
          { arbitrary: fc.constantFrom(null, 0, 'options', []), weight: 1 },
          {
            arbitrary: fc.record({ message: fc.oneof(fc.string({ maxLength: 20, size: 'max' }), anyValue) }),
            weight: 1,
          },
          { arbitrary: anyValue, weight: 1 },
        ),
        async (records, options) => {
          const before = digestTree(directory);
          try {
            await feed.append(records as never, options as never);
            accepted++;
          } catch (error) {
            expect(isStreamStackError(error), String(error)).toBe(true);
            expect(digestTree(directory)).toBe(before);
            refused++;
          }
        },
      ),
      { numRuns: 300 },
    );
    console.log(`API fuzz: ${accepted} appends accepted, ${refused} refused with a typed error`);
    expect(accepted).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    await store.close();
  });
});
