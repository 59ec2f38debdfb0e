// The process the export power-loss test cuts: it exports feed `f` of a store outside the
// power-loss mount into new directories on the mount, one after another, the formats in turn.
// It prints `ready` once the store is open, `export` before each export, and `exported` (the
// directory and the record count) once `feed.export` has returned, which is when its manifest
// is durable. It runs on the built engine (packages/engine/dist).
//
// Arguments: the store's directory, the mount and the cycle. Environment: STREAMSTACK_KERNELS.
import fs from 'node:fs';
import path from 'node:path';
import { loadKernels, Store } from '../../packages/engine/dist/index.js';
import { exportStoreOptions } from './export-workload.mjs';
import { emit } from './ingest.mjs';

const [source, mount, cycle] = process.argv.slice(2);
const kernels = loadKernels(process.env.STREAMSTACK_KERNELS ?? 'auto');
// The child before this one was killed with the store open: its lock names a process that is gone.
const store = await Store.open(source, { ...exportStoreOptions(), kernels, breakLock: true });
const feed = await store.feed('f');
// Whether the mount takes O_DIRECT (the native kernels' export files use it where it does).
let direct = true;
try {
  fs.closeSync(
    fs.openSync(
      path.join(mount, `direct-probe-${cycle}`),
      fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_DIRECT,
    ),
  );
} catch {
  direct = false;
}
emit({ kind: 'ready', direct });
const formats = ['ndjson', 'arrow', 'parquet'];
for (let n = 0; ; n++) {
  const format = formats[n % formats.length];
  const directory = `out-${cycle}-${n}`;
  emit({ kind: 'export', directory, format });
  const manifest = await feed.export({ format, to: path.join(mount, directory) });
  emit({ kind: 'exported', directory, format, records: manifest.records });
}
