/**
 * The Durable Streams conformance suite (@durable-streams/server-conformance-tests, pinned at
 * 0.3.6) against the compatibility route, `/ds/v1/stream/{name}` (docs/http.md): one server
 * over a fresh store, its long-poll cut to half a second so that the suite's waits are short,
 * with the suite's tests of the reserved subscription APIs turned on (it runs them only when asked).
 *
 * The suite has no hook to skip or expect failures, so this file decides per test in a
 * `beforeEach` over the suite's own task tree: a test listed in `expectedFailures` is marked to
 * fail, so that it passing fails the run and the list cannot go stale. Each entry says why it
 * is there.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runConformanceTests } from '@durable-streams/server-conformance-tests';
import type { RunnerTask, TestContext } from 'vitest';
import { afterAll, beforeAll, beforeEach, describe } from 'vitest';
import { Store } from '../../packages/engine/src/index.js';
import { createServer, type StreamStackServer } from '../../packages/server/src/index.js';

/**
 * Tests expected to fail, by their path in the suite (`Group > … > test`), each with its reason.
 * None today: every test of the suite passes, the fork groups included.
 */
const expectedFailures = new Map<string, string>([]);

/** The server's long-poll wait: short, so that the suite's timed-out polls answer quickly. */
const longPollMs = 500;

const config = { baseUrl: '', longPollTimeoutMs: 4 * longPollMs, subscriptions: true };
let server: StreamStackServer | undefined;
let directory: string | undefined;

beforeAll(async () => {
  directory = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-ds-conformance-'));
  // The suite sends one CORS preflight from https://example.com (If-None-Match must be allowed):
  // the server sends CORS headers only to origins it is configured with, so this one is.
  server = await createServer({
    store: await Store.open(directory),
    logger: false,
    durableStreams: { longPollMs },
    corsOrigins: ['https://example.com'],
  });
  config.baseUrl = `${await server.listen({ port: 0 })}/ds`;
});

afterAll(async () => {
  await server?.close();
  if (directory) fs.rmSync(directory, { recursive: true, force: true });
});

/** The names of the groups around `task`, outermost first, and its own name last. */
function pathOf(task: RunnerTask): string[] {
  const names: string[] = [];
  for (let at: RunnerTask | undefined = task; at && at !== task.file; at = at.suite) names.unshift(at.name);
  return names;
}

beforeEach((context: TestContext) => {
  const names = pathOf(context.task);
  // The outermost group is this file's own describe below.
  if (expectedFailures.has(names.slice(1).join(' > '))) (context.task as { fails?: boolean }).fails = true;
});

describe('Durable Streams conformance (suite 0.3.6)', () => {
  runConformanceTests(config);
});
