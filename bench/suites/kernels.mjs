// Suite `kernels`: the native kernels against their TypeScript twins in one run, and CRC-32
// against Node's zlib.crc32 as the peer. Targets are the foundation issue's.
import zlib from 'node:zlib';
import { loadKernels } from '@streamstack/engine';
import { Suite } from '../harness.mjs';

function randomBytes(length, seed) {
  const bytes = new Uint8Array(length);
  let state = seed >>> 0;
  for (let i = 0; i < length; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    bytes[i] = state >>> 24;
  }
  return bytes;
}

function randomSorted(count, range, seed) {
  const chosen = new Set();
  let state = seed >>> 0;
  while (chosen.size < count) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    chosen.add(Math.floor((state / 2 ** 32) * range));
  }
  return Uint32Array.from(chosen).sort();
}

/** Tag-like keys ("course:0001234" …), sorted and unique, packed as the kernels take them. */
function tagKeys(count) {
  const encoder = new TextEncoder();
  const names = [];
  const kinds = ['course', 'student', 'teacher', 'order'];
  for (let i = 0; i < count; i++)
    names.push(`${kinds[i % kinds.length]}:${String((i * 7919) % (count * 10)).padStart(8, '0')}`);
  names.sort();
  const encoded = names.map((name) => encoder.encode(name));
  const ends = new Uint32Array(count);
  let total = 0;
  encoded.forEach((key, index) => {
    total += key.length;
    ends[index] = total;
  });
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const key of encoded) {
    bytes.set(key, at);
    at += key.length;
  }
  const values = Float64Array.from({ length: count }, (_, index) => index * 3);
  return { keys: { bytes, ends }, values, encoded };
}

export async function run() {
  const native = loadKernels('native');
  const ts = loadKernels('ts');
  const suite = new Suite('kernels');

  for (const [label, size] of [
    ['64 B', 64],
    ['4 KiB', 4096],
    ['1 MiB', 1 << 20],
  ]) {
    const bytes = randomBytes(size, size);
    const z = await suite.measure(`crc32 zlib ${label}`, () => zlib.crc32(bytes), { bytes: size });
    const n = await suite.measure(`crc32 native ${label}`, () => native.crc32(bytes), { bytes: size });
    const t = await suite.measure(`crc32 ts ${label}`, () => ts.crc32(bytes), { bytes: size });
    suite.ratio(`crc32 native / zlib at ${label}`, n.opsPerSecond / z.opsPerSecond, size >= 4096 ? 1 : undefined);
    if (size === 1 << 20) suite.ratio('crc32 ts throughput at 1 MiB', t.bytesPerSecond / 1e9, 1, 'GB/s');
  }

  for (const count of [100_000, 1_000_000]) {
    const { keys, values, encoded } = tagKeys(count);
    const label = count === 100_000 ? '10^5' : '10^6';
    const nb = await suite.measure(`fst build native ${label} keys`, () => native.fstBuild(keys, values), {
      items: count,
      minSamples: 3,
    });
    const tb = await suite.measure(`fst build ts ${label} keys`, () => ts.fstBuild(keys, values), {
      items: count,
      minSamples: 3,
    });
    suite.ratio(`fst build native keys/s at ${label}`, nb.itemsPerSecond / 1e6, 1, 'M keys/s');
    suite.ratio(`fst build ts / native at ${label}`, tb.opsPerSecond / nb.opsPerSecond, 0.25);

    const fst = native.fstBuild(keys, values);
    const probes = Array.from({ length: 1000 }, (_, index) => encoded[(index * 104729) % count]);
    const nl = await suite.measure(
      `fst lookup native ${label} (1000 gets)`,
      () => {
        for (const key of probes) native.fstGet(fst, key);
      },
      { items: probes.length },
    );
    const tl = await suite.measure(
      `fst lookup ts ${label} (1000 gets)`,
      () => {
        for (const key of probes) ts.fstGet(fst, key);
      },
      { items: probes.length },
    );
    suite.ratio(`fst lookup ts / native at ${label}`, tl.opsPerSecond / nl.opsPerSecond, 0.25);
  }

  for (const [label, small, large] of [
    ['10^3 ∩ 10^6', 1000, 1_000_000],
    ['10^5 ∩ 10^5', 100_000, 100_000],
  ]) {
    const a = randomSorted(small, 4_000_000, 1);
    const b = randomSorted(large, 4_000_000, 2);
    const n = await suite.measure(`intersect native ${label}`, () => native.intersect(a, b), { items: small + large });
    const t = await suite.measure(`intersect ts ${label}`, () => ts.intersect(a, b), { items: small + large });
    suite.ratio(
      `intersect native / ts at ${label}`,
      n.opsPerSecond / t.opsPerSecond,
      label === '10^5 ∩ 10^5' ? 3 : undefined,
    );
  }

  return suite.finish();
}
