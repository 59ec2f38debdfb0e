/**
 * Payloads repeated inside one run are stored once and referenced after. The run finds repeats
 * by 30 bits of their CRC-32C (a small integer for V8), so two different payloads that share
 * those bits must never be mistaken for each other: each reads back as itself, and only bytes
 * are spent on them.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { loadKernels, type Store } from '../../packages/engine/src/index.js';
import { buildCommitRun, type CommitRunInput } from '../../packages/engine/src/storage/commit-run.js';
import { FrameBuilder } from '../../packages/engine/src/storage/framing.js';
import { oneShotRunInput } from '../support/commit-runs.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const kernels = loadKernels();
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Candidates searched for a pair: by the birthday bound about 20 pairs share 30 bits among them. */
const candidates = 200_000;

/** Two payloads whose CRC-32Cs agree in their low 30 bits and differ in the top two. */
function payloadsSharingKeyBits(): [string, string] {
  // Sixteen pseudo-random hex digits each: payloads that differ only in a few neighbouring bytes
  // never collide this way (a CRC is linear, and one-to-one on differences of 32 bits or less).
  let state = 0x2545_f491;
  const hex = () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0).toString(16).padStart(8, '0');
  };
  const texts = Array.from({ length: candidates }, () => `payload ${hex()}${hex()}`);
  const bytes = encoder.encode(texts.join(''));
  const ranges = new Uint32Array(2 * candidates);
  for (let index = 0, at = 0; index < candidates; index++) {
    ranges[2 * index] = at;
    at += texts[index].length;
    ranges[2 * index + 1] = at;
  }
  const checksums = kernels.payloadChecksums(bytes, ranges);
  const byKeyBits = new Map<number, number>();
  for (let index = 0; index < candidates; index++) {
    const crc = checksums[2 * index];
    const earlier = byKeyBits.get(crc & 0x3fff_ffff);
    if (earlier !== undefined && checksums[2 * earlier] !== crc) return [texts[earlier], texts[index]];
    byKeyBits.set(crc & 0x3fff_ffff, index);
  }
  throw new Error(`no two of ${candidates} payloads share 30 bits of their CRC-32C`);
}

function runOf(payloads: readonly string[]): CommitRunInput {
  return oneShotRunInput(
    payloads.map((payload) => ({ payload: encoder.encode(payload), tombstone: false, tags: [] })),
    1,
  );
}

let store: Store | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

describe('payloads repeated within a run', () => {
  const [first, second] = payloadsSharingKeyBits();

  it('are found by 30 bits of their CRC: payloads that share them are told apart by their bytes', async () => {
    const repeat = 'a payload repeated in the run';
    const payloads = [first, second, repeat, first, repeat, second, repeat];
    const built = await buildCommitRun(kernels, new FrameBuilder(4096), runOf(payloads), () => undefined, 4096);
    const stored = built.newPayloads.map((payload) => decoder.decode(payload.bytes));
    // A true repeat is stored once; the two that share key bits displace each other in the map,
    // so each may be stored again, which costs bytes and nothing else.
    expect(stored.filter((payload) => payload === repeat)).toHaveLength(1);
    expect(stored.filter((payload) => payload === first).length).toBeGreaterThanOrEqual(1);
    expect(stored.filter((payload) => payload === second).length).toBeGreaterThanOrEqual(1);
    expect(new Set(stored)).toEqual(new Set([first, second, repeat]));
  });

  it('read back as themselves from a one-shot commit and from a sealed stream', async () => {
    store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('repeats');
    const payloads = [first, second, first, second, first, 'other', 'other', second];
    await feed.append(payloads.map((payload) => ({ payload })));
    const { token } = await feed.acquireLease({ holder: 'test' });
    const stream = await feed.openStream({ token });
    await stream.append(
      payloads.map((payload) => ({ payload })),
      { token },
    );
    await stream.seal({ token });
    const read: string[] = [];
    for await (const record of feed.read({ after: 0 })) read.push(decoder.decode(record.payload));
    expect(read).toEqual([...payloads, ...payloads]);
  });
});
