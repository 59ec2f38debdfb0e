// The process the fork crash test kills: over feed `source` (made and filled by the first child,
// grown by each later one), it forks at random commits, appends to the forks and deletes some,
// printing a line before each fork (`fork`) and after it (`forked`), and before each deletion
// (`delete`), so the parent knows which were acknowledged. Every record is a function of where it
// lies, so the parent can check any feed without a log: commit n of the source holds `s<n>.0`
// and `s<n>.1`; commit n of fork F, past its fork point, holds `F.<n>`. It runs on the built
// engine (packages/engine/dist).
import { Store } from '../../packages/engine/dist/index.js';

const [directory, cycleText, seedText] = process.argv.slice(2);
const cycle = Number(cycleText);
let state = Number(seedText) >>> 0 || 1;
const random = () => {
  state ^= state << 13;
  state ^= state >>> 17;
  state ^= state << 5;
  return (state >>> 0) / 2 ** 32;
};
const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const pad = (text) => text.padEnd(3000, '.');

const store = await Store.open(directory, { segmentBytes: 64 * 1024 });
const source = (await store.feedNames()).includes('source')
  ? await store.feed('source')
  : await store.createFeed('source');
const grow = async (count) => {
  for (let index = 0; index < count; index++) {
    const next = ((await source.head())?.commit ?? 0) + 1;
    await source.append([{ payload: pad(`s${next}.0`) }, { payload: pad(`s${next}.1`) }]);
  }
};
await grow((await source.head()) === undefined ? 60 : 5);
emit({ kind: 'ready' });
for (let index = 0; ; index++) {
  const head = (await source.head()).commit;
  const at = 1 + Math.floor(random() * head);
  const name = `f${cycle}-${index}`;
  emit({ kind: 'fork', feed: name, at });
  const fork = await source.fork(name, { at });
  emit({ kind: 'forked', feed: name, at });
  for (let count = Math.floor(random() * 3); count > 0; count--) {
    const next = (await fork.head()).commit + 1;
    await fork.append([{ payload: pad(`${name}.${next}`) }]);
  }
  if (random() < 0.4) {
    emit({ kind: 'delete', feed: name });
    await store.deleteFeed(name);
  }
  if (random() < 0.3) await grow(2);
}
