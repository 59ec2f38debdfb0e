// UmaDB, the peer of `pnpm bench server`'s side-by-side: a Rust DCB event store with a gRPC
// server (tonic). This module finds or builds its server, runs it in a process of its own on a
// free loopback port, and talks to it with the official Node gRPC client (@grpc/grpc-js) over its
// own protocol definition, as a Node user of UmaDB would.
//
// The server comes from crates.io (`cargo install umadb --version 0.7.8 --locked`), built once
// into Cargo's bin folder; its build needs `protoc` (Debian: protobuf-compiler). The protocol
// definition is read from the `umadb-proto` crate that build downloaded, so it is always the
// server's own. Where any of it is missing the side-by-side is skipped with a message saying what.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

export const umadbVersion = '0.7.8';
/** How long the server may take to answer its first call before the side-by-side gives up. */
const startupMs = 15_000;

const cargoHome = process.env.CARGO_HOME ?? path.join(os.homedir(), '.cargo');

function onPath(command) {
  try {
    execFileSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** The `umadb-proto` crate's protocol file in Cargo's registry, or undefined. */
function protocolFile() {
  const sources = path.join(cargoHome, 'registry', 'src');
  if (!fs.existsSync(sources)) return undefined;
  for (const registry of fs.readdirSync(sources)) {
    const file = path.join(sources, registry, `umadb-proto-${umadbVersion}`, 'proto', 'v1', 'umadb.proto');
    if (fs.existsSync(file)) return file;
  }
  return undefined;
}

/**
 * The UmaDB server binary and its protocol file, building them once when Cargo and protoc are
 * here; `{ skipped }` with the reason otherwise. `STREAMSTACK_BENCH_UMADB` names a binary to use.
 */
export function locateUmadb(log) {
  const binary = process.env.STREAMSTACK_BENCH_UMADB ?? path.join(cargoHome, 'bin', 'umadb');
  if (!fs.existsSync(binary) || !protocolFile()) {
    if (process.env.STREAMSTACK_BENCH_UMADB)
      return { skipped: `STREAMSTACK_BENCH_UMADB names ${binary}, which is missing` };
    if (!onPath('cargo')) return { skipped: 'Cargo is not installed, so UmaDB cannot be built' };
    if (!onPath('protoc'))
      return { skipped: 'protoc is missing, so UmaDB cannot be built (Debian: apt-get install protobuf-compiler)' };
    log(`  building UmaDB ${umadbVersion} with cargo install (once; several minutes)\n`);
    try {
      execFileSync('nice', ['-n', '19', 'cargo', 'install', 'umadb', '--version', umadbVersion, '--locked'], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
    } catch (error) {
      const stderr = String(error.stderr ?? '')
        .trim()
        .split('\n')
        .slice(-3)
        .join(' | ');
      return { skipped: `cargo install umadb failed: ${stderr}` };
    }
  }
  const proto = protocolFile();
  if (!fs.existsSync(binary) || !proto) return { skipped: 'the UmaDB build left no binary or protocol file' };
  return { binary, proto };
}

/** A free loopback port (asked of the OS, then released for the server to take). */
async function freePort() {
  const probe = net.createServer();
  await new Promise((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address();
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/** CPU time (user + system, µs) a process has used, from /proc: the same measure for both servers. */
export function processCpuMicros(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name, which is in parentheses and may hold spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticksPerSecond = 100;
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / ticksPerSecond;
}

/** The UmaDB server in its own process, and a gRPC client of it. */
export class UmadbPeer {
  static async start({ binary, proto }, directory) {
    const port = await freePort();
    const child = spawn(binary, ['--listen', `127.0.0.1:${port}`, '--db-path', path.join(directory, 'uma.db')], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr = (stderr + chunk).slice(-2000);
    });
    const definition = protoLoader.loadSync(proto, { keepCase: false, longs: Number, defaults: true, oneofs: true });
    const { DCB } = grpc.loadPackageDefinition(definition).umadb.v1;
    const client = new DCB(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const peer = new UmadbPeer(child, client);
    const deadline = performance.now() + startupMs;
    for (;;) {
      try {
        await peer.head();
        return peer;
      } catch (error) {
        if (child.exitCode !== null || performance.now() > deadline) {
          peer.close();
          throw new Error(`UmaDB did not start: ${error.message}; its stderr: ${stderr.trim()}`);
        }
        await delay(100);
      }
    }
  }

  constructor(child, client) {
    this.child = child;
    this.client = client;
    this.pid = child.pid;
  }

  head() {
    return new Promise((resolve, reject) =>
      this.client.Head({}, (error, answer) => (error ? reject(error) : resolve(answer.position ?? 0))),
    );
  }

  /** Appends `events` ({type, tags, data}); resolves to the new head position. */
  append(events, condition) {
    const request = {
      events: events.map((event) => ({ eventType: event.type, tags: event.tags, data: event.data })),
    };
    if (condition) request.condition = condition;
    return new Promise((resolve, reject) =>
      this.client.Append(request, (error, answer) => (error ? reject(error) : resolve(answer.position))),
    );
  }

  /** Reads every event matching `query` (all when undefined); resolves to how many came. */
  read(query) {
    return new Promise((resolve, reject) => {
      let count = 0;
      const call = this.client.Read(query ? { query } : {});
      call.on('data', (response) => {
        count += response.events.length;
      });
      call.on('error', reject);
      call.on('end', () => resolve(count));
    });
  }

  close() {
    this.client.close();
    this.child.kill();
  }
}
