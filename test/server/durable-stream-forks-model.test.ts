/**
 * A model of Durable Streams forks on the compatibility route: random creations, appends, forks
 * (at any offset a stream returned, with or without a sub-offset), deletions and reads over a
 * pool of five names, each answer checked against a model that knows what every stream holds,
 * which streams are soft-deleted (deleted while forks of them live) and which are gone. A
 * deletion that removes a stream's last fork must remove the soft-deleted source too, up the
 * chain.
 *
 * Sizes: 60 runs of 20 to 40 operations each, forks and deletions weighted most (fast-check's default would stop at about 10).
 * The run counts the branches it is for and fails if one was never reached: a soft delete, a
 * cascade, a sub-offset fork, a fork of a fork, a name made again after its stream went for
 * good.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { durableStreamCall as ds, startServer } from '../support/server.js';

const names = ['a', 'b', 'c', 'd'] as const;
type Name = (typeof names)[number];

type Operation =
  | { readonly kind: 'create'; readonly name: Name; readonly body: string }
  | { readonly kind: 'append'; readonly name: Name; readonly body: string }
  | { readonly kind: 'fork'; readonly name: Name; readonly source: Name; readonly at: number; readonly sub: number }
  | { readonly kind: 'delete'; readonly name: Name }
  | { readonly kind: 'read'; readonly name: Name };

const body = fc.stringMatching(/^[a-z]{1,4}$/);
const name = fc.constantFrom(...names);
// Forks and deletions weigh most: a cascade needs a fork, a deletion of its source, then of the fork.
const operation: fc.Arbitrary<Operation> = fc.oneof(
  { arbitrary: fc.record({ kind: fc.constant('create' as const), name, body }), weight: 2 },
  { arbitrary: fc.record({ kind: fc.constant('append' as const), name, body }), weight: 2 },
  {
    arbitrary: fc.record({
      kind: fc.constant('fork' as const),
      name,
      source: name,
      at: fc.nat({ max: 6 }),
      sub: fc.oneof(fc.constant(0), fc.nat({ max: 4 })),
    }),
    weight: 4,
  },
  { arbitrary: fc.record({ kind: fc.constant('delete' as const), name }), weight: 3 },
  { arbitrary: fc.record({ kind: fc.constant('read' as const), name }), weight: 1 },
);

/** What the model knows of one stream. */
interface Modelled {
  /** The bytes it holds. */
  text: string;
  /** Its data offsets (as the server returned them) and the length of its data at each. */
  offsets: { offset: string; length: number }[];
  /** The stream it was forked from (its name), if it is a fork. */
  parent: Name | undefined;
  softDeleted: boolean;
}

describe('forks on the compatibility route, against a model', () => {
  it('answer every creation, append, fork, deletion and read as the model says, soft deletes and cascades included', async () => {
    const { url, store } = await startServer();
    const reached = { softDeletes: 0, cascades: 0, subOffsetForks: 0, forksOfForks: 0, madeAgain: 0 };
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(operation, { minLength: 20, maxLength: 40 }), async (operations) => {
        run++;
        const path = (stream: Name) => `r${run}-${stream}`;
        const model = new Map<Name, Modelled>();
        const goneOnce = new Set<Name>();
        const forksOf = (stream: Name) => [...model.entries()].filter(([, state]) => state.parent === stream);
        for (const op of operations) {
          const state = model.get(op.name);
          if (op.kind === 'create') {
            const answer = await ds(url, 'PUT', path(op.name), {
              headers: { 'content-type': 'text/plain' },
              body: op.body,
            });
            if (state) {
              // A plain stream of the same type is found as asked (a PUT's body is not compared).
              const found = !state.softDeleted && state.parent === undefined;
              expect(answer.status, 'a PUT of a taken name').toBe(found ? 200 : 409);
              continue;
            }
            expect(answer.status).toBe(201);
            if (goneOnce.has(op.name)) reached.madeAgain++;
            const offset = answer.headers.get('stream-next-offset')!;
            model.set(op.name, {
              text: op.body,
              offsets: [{ offset, length: op.body.length }],
              parent: undefined,
              softDeleted: false,
            });
          } else if (op.kind === 'append') {
            const answer = await ds(url, 'POST', path(op.name), {
              headers: { 'content-type': 'text/plain' },
              body: op.body,
            });
            if (!state) expect(answer.status).toBe(404);
            else if (state.softDeleted) expect(answer.status).toBe(410);
            else {
              expect(answer.status).toBe(204);
              state.text += op.body;
              state.offsets.push({ offset: answer.headers.get('stream-next-offset')!, length: state.text.length });
            }
          } else if (op.kind === 'fork') {
            const source = model.get(op.source);
            // The point: one of the source's data offsets (or its start), and a sub-offset into what follows.
            const points = [{ offset: '0000000000000000_0000000000000000', length: 0 }, ...(source?.offsets ?? [])];
            const point = points[op.at % points.length]!;
            const next = source?.offsets.find((entry) => entry.length > point.length);
            const room = next ? next.length - point.length : 0;
            const sub = room === 0 ? 0 : op.sub % (room + 1);
            const answer = await ds(url, 'PUT', path(op.name), {
              headers: {
                'stream-forked-from': `/ds/v1/stream/${path(op.source)}`,
                'stream-fork-offset': point.offset,
                ...(sub > 0 ? { 'stream-fork-sub-offset': String(sub) } : {}),
              },
            });
            // A missing source is 404 first: a taken name is compared with what the source gives.
            if (!source) expect(answer.status).toBe(404);
            else if (state) expect([200, 409], 'a fork PUT of a taken name').toContain(answer.status);
            else if (source.softDeleted) expect(answer.status).toBe(409);
            else {
              expect(answer.status).toBe(201);
              if (sub > 0) reached.subOffsetForks++;
              if (source.parent !== undefined) reached.forksOfForks++;
              const text = source.text.slice(0, point.length + sub);
              const offsets = source.offsets.filter((entry) => entry.length <= point.length);
              if (sub > 0) offsets.push({ offset: answer.headers.get('stream-next-offset')!, length: text.length });
              model.set(op.name, { text, offsets, parent: op.source, softDeleted: false });
            }
          } else if (op.kind === 'delete') {
            const answer = await ds(url, 'DELETE', path(op.name));
            if (!state) {
              expect(answer.status).toBe(404);
              continue;
            }
            if (state.softDeleted) {
              expect(answer.status).toBe(410);
              continue;
            }
            expect(answer.status).toBe(204);
            if (forksOf(op.name).length > 0) {
              state.softDeleted = true;
              reached.softDeletes++;
              continue;
            }
            model.delete(op.name);
            goneOnce.add(op.name);
            // The chain of soft-deleted sources left with no fork goes with it.
            for (let up = state.parent; up !== undefined; ) {
              const parent = model.get(up);
              if (!parent?.softDeleted || forksOf(up).length > 0) break;
              model.delete(up);
              goneOnce.add(up);
              reached.cascades++;
              up = parent.parent;
            }
          } else {
            const answer = await ds(url, 'GET', `${path(op.name)}?offset=-1`);
            if (!state) expect(answer.status).toBe(404);
            else if (state.softDeleted) expect(answer.status).toBe(410);
            else expect([answer.status, answer.text]).toEqual([200, state.text]);
          }
        }
        // The feeds left are the model's streams, soft-deleted ones included: a cascade removed
        // its sources at once, not on a later request for them.
        const feeds = (await store.feedNames()).filter((feed) => feed.startsWith(`ds.r${run}-`));
        expect(feeds).toEqual([...model.keys()].map((stream) => `ds.${path(stream)}`).sort());
        // Every stream reads as the model says at the end, and every removed one is gone.
        for (const stream of names) {
          const state = model.get(stream);
          const answer = await ds(url, 'GET', `${path(stream)}?offset=-1`);
          const expected = state === undefined ? [404, ''] : state.softDeleted ? [410, ''] : [200, state.text];
          expect([answer.status, answer.status === 200 ? answer.text : '']).toEqual(expected);
        }
      }),
      { numRuns: 60 },
    );
    for (const [branch, count] of Object.entries(reached)) expect(count, branch).toBeGreaterThan(0);
  }, 120_000);
});
