/**
 * A real etcd for the lease tests and benchmarks: the server scripts/test-tools.sh builds from
 * tools/etcd-server into Go's bin folder (or an `etcd` on the PATH, such as Debian's
 * `etcd-server`), started on 127.0.0.1 and two free ports over a temporary data folder, and
 * stopped by PID. Its heartbeat (10 ms) and election timeout (100 ms) are short, as a one-member
 * test cluster allows, so that leases of one second expire on time. Plain JavaScript, so that a
 * benchmark run by plain Node starts it too.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { serverProcess } from './server-process.mjs';
import { freePort } from './versitygw.mjs';

/** The etcd to run: Go's bin folder first (test-tools builds it there), then the PATH. */
export function etcdBinary() {
  const gopath = process.env.GOPATH?.split(path.delimiter)[0] || path.join(os.homedir(), 'go');
  const built = path.join(process.env.GOBIN || path.join(gopath, 'bin'), 'etcd');
  if (fs.existsSync(built)) return built;
  const found = spawnSync('sh', ['-c', 'command -v etcd'], { encoding: 'utf8' });
  return found.status === 0 && found.stdout.trim() !== '' ? found.stdout.trim() : undefined;
}

/** Why the etcd tests skip when etcd is missing. */
export const etcdMissing = 'etcd is not built (scripts/test-tools.sh builds it with Go)';

/** Resolves true once etcd at `endpoint` serves requests; false if `child` exits or `tries` pass. */
async function ready(endpoint, child, tries) {
  for (let attempt = 0; attempt < tries && child.exitCode === null; attempt++) {
    try {
      const response = await fetch(`${endpoint}/v3/kv/range`, {
        method: 'POST',
        body: JSON.stringify({ key: 'cmVhZHk=' }),
        signal: AbortSignal.timeout(1000),
      });
      await response.text();
      if (response.ok) return true;
    } catch {
      // Not listening yet.
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

async function launch(binary, clientPort, peerPort, dataDir, output) {
  const client = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const child = spawn(
    binary,
    [
      '--name',
      'test',
      '--data-dir',
      dataDir,
      '--listen-client-urls',
      client,
      '--advertise-client-urls',
      client,
      '--listen-peer-urls',
      peer,
      '--initial-advertise-peer-urls',
      peer,
      '--initial-cluster',
      `test=${peer}`,
      '--heartbeat-interval',
      '10',
      '--election-timeout',
      '100',
      '--log-level',
      'error',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stdout?.on('data', (chunk) => output.push(chunk.toString()));
  child.stderr?.on('data', (chunk) => output.push(chunk.toString()));
  const exited = new Promise((resolve) => child.once('exit', () => resolve()));
  if (await ready(client, child, 200)) return { child, exited };
  if (child.exitCode === null && child.pid !== undefined) process.kill(child.pid, 'SIGKILL');
  await exited;
  return undefined;
}

/**
 * Starts etcd and waits until it serves (on `fixedClientPort` when an example names its address,
 * else a free port). Returns its `endpoint` and controls: `halt` stops it by its PID (etcd is
 * down, its data kept), `resume` starts it again on the same ports, `wipe` halts it, deletes its
 * data and starts it empty (an etcd restored from nothing), `stop` ends it and removes its folder.
 *
 * @param {string | undefined} binary
 * @param {number | undefined} [fixedClientPort]
 */
export async function startEtcd(binary = etcdBinary(), fixedClientPort) {
  if (!binary) throw new Error(etcdMissing);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-etcd-'));
  const dataDir = path.join(root, 'data');
  const output = [];
  for (let start = 0; start < (fixedClientPort ? 1 : 3); start++) {
    const clientPort = fixedClientPort ?? (await freePort());
    const peerPort = await freePort();
    const running = await launch(binary, clientPort, peerPort, dataDir, output);
    if (!running) continue;
    const server = serverProcess(
      running,
      () => launch(binary, clientPort, peerPort, dataDir, output),
      'SIGKILL',
      () => `etcd did not start again on port ${clientPort}: ${output.join('')}`,
    );
    return {
      endpoint: `http://127.0.0.1:${clientPort}`,
      halt: server.halt,
      resume: server.resume,
      async wipe() {
        await server.halt();
        fs.rmSync(dataDir, { recursive: true, force: true });
        await server.resume();
      },
      async stop() {
        await server.stop();
        fs.rmSync(root, { recursive: true, force: true });
      },
    };
  }
  fs.rmSync(root, { recursive: true, force: true });
  throw new Error(`etcd did not start: ${output.join('')}`);
}
