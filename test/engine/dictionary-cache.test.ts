/**
 * The key dictionaries' cache: past its bound it lets go of the least recently used entries —
 * by their last use, not by when they were read in — never of the one just read in, and it
 * counts bytes exactly as entries come, grow and go.
 */
import { describe, expect, it } from 'vitest';
import { DictionaryCache } from '../../packages/engine/src/query/indexes/dictionary-cache.js';

interface Slot {
  name: string;
  lastUsed?: number;
}

describe('DictionaryCache', () => {
  it('evicts by last use, keeps what was just read in, and counts bytes', () => {
    const evicted: string[] = [];
    const cache = new DictionaryCache<Slot>(100, (slot) => evicted.push(slot.name));
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((name) => ({ name }));
    cache.remember(a, 40);
    cache.remember(b, 40);
    // a was read in first but used last: b is the least recently used.
    cache.use(a);
    cache.remember(c, 40);
    expect(evicted).toEqual(['b']);
    expect(cache.holding).toEqual({ entries: 2, bytes: 80 });
    // An entry that grows past the bound on its own pushes out everything else, but not itself.
    cache.remember(c, 150);
    expect(evicted).toEqual(['b', 'a']);
    expect(cache.holding).toEqual({ entries: 1, bytes: 150 });
    cache.forget(c);
    cache.forget(c);
    expect(cache.holding).toEqual({ entries: 0, bytes: 0 });
    cache.remember(d, 10);
    expect(cache.holding).toEqual({ entries: 1, bytes: 10 });
  });
});
