// A live reader (follow or a subscription's live loop) waiting for the next commit must end
// with CLOSED when its store closes, not hang forever.
import { expect, it } from 'vitest';
import { openStore, temporaryDirectory } from '../support/store.js';

it('live reader ends with CLOSED when its store closes', async () => {
  const store = await openStore(temporaryDirectory());
  const feed = await store.createFeed('f');
  await feed.append([{ payload: 'a' }]);
  const seen: number[] = [];
  const reading = (async () => {
    for await (const { commit } of feed.follow({ after: 0 })) seen.push(commit.commit);
  })();
  await new Promise((r) => setTimeout(r, 50));
  // Awaited from before the close: the reader ends while the close is still under way.
  const ended = expect(reading).rejects.toMatchObject({ code: 'CLOSED' });
  await store.close();
  await ended;
  expect(seen).toEqual([1]);
});
