import fs from 'node:fs';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Store } from '@streamstack/engine';
import { temporaryDirectory } from './workload.mjs';
const probe = fileURLToPath(new URL('./scale-probe.mjs', import.meta.url));
for (const commits of [200_000, 2_000_000]) {
  const directory = temporaryDirectory('scale-commits');
  const store = await Store.open(directory);
  const feed = await store.createFeed('commits');
  let issued = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: 64 }, async () => {
    while (issued < commits) { const n = issued++; await feed.append([{ payload: `{"n":${n},"pad":"${'x'.repeat(180)}"}`, key: `key-${n % 1000000}`, type: `t${n % 8}`, tags: [`tag-${n % 1000000}`] }]); }
  }));
  const ingestS = (performance.now() - started) / 1000;
  await store.close();
  const out = execFileSync(process.execPath, [probe, directory, 'commits', '1000000', '10000'], { encoding: 'utf8', maxBuffer: 1 << 20 });
  console.log(commits, `ingest ${ingestS.toFixed(1)} s`, out.trim().split('\n').pop());
  fs.rmSync(directory, { recursive: true, force: true });
}
