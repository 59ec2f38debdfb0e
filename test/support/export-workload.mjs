// The export worker test's feed: enough bytes for two export files (the file size target is
// `exportFileBytesTarget`), so two files are written at once; records with keys, tags, types and
// text payloads with characters JSON escapes, a few payloads repeated (stored once, read from
// elsewhere in their segment), and in the last fifth one payload per commit that is not UTF-8
// (past the first file, which ends after about 1 / 1.4 of the commits: its payloads are all text,
// and a later file's are not). Run by the test's own
// process on the sources and by a child on the built engine: both must write the same files.

/** How both runs open their store: the same clock and stream ids, so the same records. */
export function exportStoreOptions() {
  let id = 0;
  return { segmentBytes: 8 * 1024 * 1024, clock: () => 1_700_000_000_000, newId: () => `id-${++id}` };
}

/** The text's bytes after a byte that is never UTF-8. */
function notText(text) {
  const encoded = new TextEncoder().encode(text);
  const bytes = new Uint8Array(1 + encoded.length);
  bytes[0] = 0xff;
  bytes.set(encoded, 1);
  return bytes;
}

/** Appends the workload to a new feed `f` of `store`; returns the number of records. */
export async function fillExportFeed(store, fileBytesTarget) {
  const feed = await store.createFeed('f');
  const payloadBytes = 48 * 1024;
  const perCommit = 32;
  const commits = Math.ceil((fileBytesTarget * 1.4) / (payloadBytes * perCommit));
  for (let commit = 0; commit < commits; commit++) {
    await feed.append(
      Array.from({ length: perCommit }, (_, n) => {
        const repeated = n % 8 === 0;
        const head = repeated
          ? `{"shared":${n}, "text":"tab\\there, quote \\" é"`
          : `{"commit":${commit},"n":${n},"text":"line\\nbreak"`;
        const text = `${head},"pad":"${'p'.repeat(payloadBytes - head.length - 10)}"}`;
        const binary = n === perCommit - 1 && commit >= commits * 0.8;
        return {
          payload: binary ? notText(text) : text,
          key: `k${(commit * perCommit + n) % 997}`,
          type: n % 3 === 0 ? 'created' : 'updated',
          tags: [`t${n % 5}`, `c${commit % 7}`],
        };
      }),
    );
  }
  return commits * perCommit;
}
