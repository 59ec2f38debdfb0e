/**
 * A real S3-compatible server for the object store's tests and the tiering benchmark: versitygw (built once by
 * scripts/test-tools.sh with `go install`) on 127.0.0.1 and a free port, over its posix backend
 * in a temporary folder, with root credentials made up for the run and handed to it in its
 * environment. `versitygwBinary()` says whether it is built; without it the tests that need it
 * skip and say why. Plain JavaScript, so that `pnpm bench` (plain Node) starts it too; the tests
 * take it typed through `object-store.ts`.
 */
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { serverProcess } from './server-process.mjs';

const warningSwitch = 'AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED';

/** Where `go install` puts versitygw: GOBIN, else the first GOPATH's bin, else ~/go/bin. */
export function versitygwBinary() {
  const gopath = process.env.GOPATH?.split(path.delimiter)[0] || path.join(os.homedir(), 'go');
  const binary = path.join(process.env.GOBIN || path.join(gopath, 'bin'), 'versitygw');
  return fs.existsSync(binary) ? binary : undefined;
}

/** Why the object store tests skip when versitygw is missing. */
export const versitygwMissing = 'versitygw is not built (scripts/test-tools.sh builds it with Go)';

/** A port nothing listens on right now: the kernel's pick for port 0, released at once. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Resolves once `endpoint` answers an HTTP request (any status); false after `tries` refusals. */
async function answers(endpoint, child, tries) {
  for (let attempt = 0; attempt < tries && child.exitCode === null; attempt++) {
    const ok = await new Promise((resolve) => {
      const request = http.get(endpoint, (response) => {
        response.resume();
        resolve(true);
      });
      request.once('error', () => resolve(false));
    });
    if (ok) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

/** One run of the versitygw process on `port` over `root`; undefined when it exits before it answers. */
async function launch(binary, port, root, region, credentials, output) {
  const endpoint = `http://127.0.0.1:${port}`;
  const child = spawn(binary, ['--port', `127.0.0.1:${port}`, '--quiet', '--region', region, 'posix', root], {
    env: {
      ...process.env,
      ROOT_ACCESS_KEY_ID: credentials.accessKeyId,
      ROOT_SECRET_ACCESS_KEY: credentials.secretAccessKey,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (chunk) => output.push(chunk.toString()));
  child.stderr?.on('data', (chunk) => output.push(chunk.toString()));
  const exited = new Promise((resolve) => child.once('exit', () => resolve()));
  // Up to ten seconds for a start that takes a fraction of one: only a failure waits that long.
  if (await answers(endpoint, child, 200)) return { child, exited };
  if (child.exitCode === null && child.pid !== undefined) process.kill(child.pid, 'SIGKILL');
  return undefined;
}

/**
 * Starts versitygw (`binary`) and waits until it answers. A port taken between `freePort` and the
 * server's listen makes it exit: another port is tried. With `fixedPort` (an example that names
 * its address), that port only.
 */
export async function startVersitygw(binary, fixedPort) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-versitygw-'));
  const credentials = {
    accessKeyId: `test${crypto.randomBytes(6).toString('hex')}`,
    secretAccessKey: crypto.randomBytes(18).toString('hex'),
  };
  const region = 'us-east-1';
  const output = [];
  for (let start = 0; start < (fixedPort ? 1 : 3); start++) {
    const port = fixedPort ?? (await freePort());
    const endpoint = `http://127.0.0.1:${port}`;
    const running = await launch(binary, port, root, region, credentials, output);
    if (!running) continue;
    // A test process that ends without its afterAll (a crash, an interrupt) still stops it.
    const server = serverProcess(
      running,
      () => launch(binary, port, root, region, credentials, output),
      'SIGTERM',
      () => `versitygw did not start again on port ${port}: ${output.join('')}`,
    );
    return {
      endpoint,
      region,
      credentials,
      async createBucket(bucket) {
        // The SDK's warning about Node versions is switched off for the test's own client too,
        // as the store does it: for the constructor only, so a child process a test starts
        // does not inherit the switch.
        const before = process.env[warningSwitch];
        process.env[warningSwitch] = 'true';
        let client;
        try {
          client = new S3Client({ endpoint, region, credentials, forcePathStyle: true });
        } finally {
          if (before === undefined) delete process.env[warningSwitch];
          else process.env[warningSwitch] = before;
        }
        try {
          await client.send(new CreateBucketCommand({ Bucket: bucket }));
        } finally {
          client.destroy();
        }
      },
      halt: server.halt,
      resume: server.resume,
      async stop() {
        await server.stop();
        fs.rmSync(root, { recursive: true, force: true });
      },
    };
  }
  fs.rmSync(root, { recursive: true, force: true });
  throw new Error(`versitygw did not start: ${output.join('')}`);
}
