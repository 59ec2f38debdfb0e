/**
 * The README's examples run as written, so that they cannot drift from the API: every code
 * block is either run here or named below with the reason it is not. TypeScript blocks are
 * type-checked as TypeScript and run as plain `.mjs` on this Node (20 in CI); the command-line
 * block runs in bash with `streamstack` on the PATH; the client block runs against a server
 * started on the address it names.
 *
 * So do the quick examples of `docs/`. A docs example is a fragment: it names a `feed` (or a
 * `signal` and a `handle`) that its page's text has introduced. Each runs after the setting its
 * page describes, given below as a prelude: for `docs/history.md`, a feed `orders` of 120 commits
 * in small segments (so trims and key compactions have whole segments to work on); for
 * `docs/http.md`, a server at the address the example names, with the feed it opens, and a
 * `handle` that stops the follow after its first commit; `docs/cluster.md` and `docs/groups.md`
 * hold complete programs. Every JavaScript or TypeScript block of
 * `docs/` runs here: a new one fails the suite until it is given a setting. (One file, so that
 * the README's and the docs' servers never race for the one port both name.)
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { etcdBinary, startEtcd } from '../support/etcd.mjs';
import { startVersitygw, versitygwBinary } from '../support/object-store.js';
import { temporaryDirectory } from '../support/store.js';

const root = path.resolve('.');
const cliBin = path.join(root, 'packages/cli/bin/streamstack.js');

interface Block {
  readonly language: string;
  readonly code: string;
  /** The README line the block starts on, for messages. */
  readonly line: number;
}

const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
const blocks: Block[] = [...readme.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map((match) => ({
  language: match[1]!,
  code: match[2]!,
  line: readme.slice(0, match.index).split('\n').length,
}));

/** Blocks not run here, each found by a line it holds, and why. */
const notRun = [
  {
    holds: 'bash scripts/setup.sh && pnpm demo',
    why: 'the set-up is what CI runs before this suite, and the demo writes ./data in the repository',
  },
  { holds: 'pnpm test', why: 'it is the run this test is part of' },
  { holds: 'pnpm -r --filter', why: 'test/packaging/install.test.ts packs and installs the tarballs this way' },
];

/** A scratch folder where `@streamstack/engine` and `@streamstack/client` resolve to the built packages. */
function workspace(): string {
  const directory = fs.realpathSync(temporaryDirectory('streamstack-readme-'));
  fs.mkdirSync(path.join(directory, 'node_modules', '@streamstack'), { recursive: true });
  for (const name of ['engine', 'client'])
    fs.symlinkSync(path.join(root, 'packages', name), path.join(directory, 'node_modules', '@streamstack', name));
  fs.writeFileSync(path.join(directory, 'package.json'), JSON.stringify({ type: 'module' }));
  fs.writeFileSync(
    path.join(directory, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2022',
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        types: ['node'],
        typeRoots: [path.join(root, 'node_modules', '@types')],
      },
      files: ['example.ts'],
    }),
  );
  return directory;
}

/** Type-checks `code` as TypeScript, then runs it as plain JavaScript; returns what it printed. */
function runTypeScript(block: Block, directory: string): string {
  fs.writeFileSync(path.join(directory, 'example.ts'), block.code);
  const checked = spawnSync(
    process.execPath,
    [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', directory],
    { encoding: 'utf8' },
  );
  expect(checked.status, `README line ${block.line} does not type-check:\n${checked.stdout}${checked.stderr}`).toBe(0);
  fs.writeFileSync(path.join(directory, 'example.mjs'), block.code);
  const ran = spawnSync(process.execPath, ['example.mjs'], {
    cwd: directory,
    encoding: 'utf8',
    env: withoutDataVariable(),
  });
  expect(ran.status, `README line ${block.line} failed as .mjs:\n${ran.stderr}`).toBe(0);
  return ran.stdout;
}

/** This process's environment without STREAMSTACK_DATA, so the examples use ./data as a user's would. */
function withoutDataVariable(): NodeJS.ProcessEnv {
  const { STREAMSTACK_DATA: _ignored, ...rest } = process.env;
  return rest;
}

interface DocsBlock extends Block {
  /** The file under docs/. */
  readonly page: string;
}

const pages = fs.readdirSync(path.join(root, 'docs')).filter((name) => name.endsWith('.md'));
const docsBlocks: DocsBlock[] = pages.flatMap((page) => {
  const text = fs.readFileSync(path.join(root, 'docs', page), 'utf8');
  return [...text.matchAll(/^```(js|ts|javascript|typescript|mjs)\n([\s\S]*?)^```$/gm)].map((match) => ({
    page,
    language: match[1]!,
    code: match[2]!,
    line: text.slice(0, match.index).split('\n').length,
  }));
});

/** What each page's examples assume: code run before them (JavaScript), and its types for the check. */
const settings: Record<string, { readonly prelude: string; readonly declarations: string; readonly after: string }> = {
  'history.md': {
    prelude: [
      "import { Store } from '@streamstack/engine';",
      "const store = await Store.open('./data', { segmentBytes: 64 * 1024 });",
      "const feed = await store.createFeed('orders');",
      'for (let commit = 1; commit <= 120; commit++) {',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a line of the example's source, template literal and all.
      '  await feed.append(Array.from({ length: 20 }, (_, i) => ({ payload: JSON.stringify({ commit, i, note: "x".repeat(200) }), key: `order-${i}` })));',
      '}',
      '',
    ].join('\n'),
    declarations:
      "import { Store } from '@streamstack/engine';\nconst store = await Store.open('./data');\nconst feed = await store.createFeed('orders');\n",
    after: '\nawait store.close();\n',
  },
  // Complete programs: the example names the etcd and the object store it runs against.
  'cluster.md': { prelude: '', declarations: '', after: '' },
  // A complete program over a store of its own.
  'groups.md': { prelude: '', declarations: '', after: '' },
  'http.md': {
    prelude: [
      'const stop = new AbortController();',
      'const signal = stop.signal;',
      'let handled = 0;',
      'function handle(commit, records) {',
      '  console.log(JSON.stringify({ commit: commit.commit, records: records.length }));',
      '  if (++handled === 1) stop.abort();',
      '}',
      '',
    ].join('\n'),
    declarations:
      'declare const signal: AbortSignal;\ndeclare function handle(commit: { readonly commit: number }, records: readonly unknown[]): void;\n',
    after: '',
  },
};

/**
 * Runs `run` while `streamstack serve` serves `data` on the port `address` names (the one an
 * example connects to), once /health answers; stops the server after.
 */
async function withServer(address: RegExpExecArray, data: string, run: () => void): Promise<void> {
  const server = spawn(process.execPath, [cliBin, '--data', data, 'serve', '--port', address[1]!], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  server.stdout!.on('data', (chunk: Buffer) => (log += chunk.toString()));
  server.stderr!.on('data', (chunk: Buffer) => (log += chunk.toString()));
  try {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const up = await fetch(`${address[0]}/health`).then(
        (response) => response.ok,
        () => false,
      );
      if (up) break;
      expect(Date.now() < deadline, `the server did not start on port ${address[1]} (is it taken?):\n${log}`).toBe(
        true,
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    run();
  } finally {
    server.kill('SIGTERM');
    await new Promise((resolve) => server.on('close', resolve));
  }
}

const blockHolding = (text: string): Block => {
  const found = blocks.filter((block) => block.code.includes(text));
  expect(found, `one README block holds ${JSON.stringify(text)}`).toHaveLength(1);
  return found[0]!;
};

describe('README examples', () => {
  it('every code block is run below or named as not run, with a reason', () => {
    const run = [
      blockHolding("from '@streamstack/engine'"),
      blockHolding("from '@streamstack/client'"),
      blockHolding('streamstack feed create orders'),
    ];
    const skipped = notRun.map((entry) => blockHolding(entry.holds));
    expect(new Set([...run, ...skipped]).size).toBe(blocks.length);
  });

  it('the embedded example type-checks and runs on this Node as plain JavaScript', () => {
    const directory = workspace();
    const printed = runTypeScript(blockHolding("from '@streamstack/engine'"), directory);
    expect(printed).toContain('sealed commit 1');
    expect(printed).toContain('billing handles');
    const exported = JSON.parse(
      fs.readFileSync(path.join(directory, 'exports', '2026-12', 'manifest.json'), 'utf8'),
    ) as { files: unknown[] };
    expect(exported.files.length).toBeGreaterThan(0);
  }, 120_000);

  it('the command-line example runs in bash, each command succeeding', () => {
    const directory = workspace();
    const bin = path.join(directory, 'bin');
    fs.mkdirSync(bin);
    fs.symlinkSync(cliBin, path.join(bin, 'streamstack'));
    const block = blockHolding('streamstack feed create orders');
    const ran = spawnSync('bash', ['-euo', 'pipefail', '-c', block.code], {
      cwd: directory,
      encoding: 'utf8',
      env: { ...withoutDataVariable(), PATH: `${bin}:${process.env.PATH}` },
    });
    expect(ran.status, `README line ${block.line}:\n${ran.stderr}`).toBe(0);
    const lines = ran.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(lines.some((line) => line.feed === 'orders' && line.ok === true)).toBe(true);
    expect(fs.existsSync(path.join(directory, 'exports', 'orders', 'manifest.json'))).toBe(true);
  }, 120_000);

  it('the client example runs against a new server at the address it names', async () => {
    const directory = workspace();
    const block = blockHolding("from '@streamstack/client'");
    const address = /http:\/\/127\.0\.0\.1:(\d+)/.exec(block.code);
    expect(address).not.toBeNull();
    await withServer(address!, path.join(directory, 'served'), () => {
      expect(runTypeScript(block, directory).trim()).toBe('en');
    });
  }, 120_000);
});

/** Type-checks the block after its page's declarations, then runs it after its prelude as `.mjs`; returns what it printed. */
function runDocsBlock(block: DocsBlock, directory: string, env: Record<string, string> = {}): string {
  const setting = settings[block.page]!;
  const where = `docs/${block.page} line ${block.line}`;
  fs.writeFileSync(path.join(directory, 'example.ts'), `${setting.declarations}${block.code}${setting.after}`);
  const checked = spawnSync(
    process.execPath,
    [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', directory],
    { encoding: 'utf8' },
  );
  expect(checked.status, `${where} does not type-check:\n${checked.stdout}${checked.stderr}`).toBe(0);
  fs.writeFileSync(path.join(directory, 'example.mjs'), `${setting.prelude}${block.code}${setting.after}`);
  const ran = spawnSync(process.execPath, ['example.mjs'], {
    cwd: directory,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, ...env },
  });
  expect(ran.status, `${where} failed as .mjs:\n${ran.stderr}`).toBe(0);
  return ran.stdout;
}

describe('docs/ examples', () => {
  it('every JavaScript and TypeScript block of docs/ has a setting to run in', () => {
    expect(docsBlocks.length).toBeGreaterThanOrEqual(4);
    for (const block of docsBlocks)
      expect(Object.keys(settings), `docs/${block.page} line ${block.line}`).toContain(block.page);
  });

  for (const block of docsBlocks.filter((candidate) => candidate.page === 'history.md')) {
    it(`docs/history.md line ${block.line} runs on a feed of 120 commits`, () => {
      const directory = workspace();
      runDocsBlock(block, directory);
      if (block.code.includes('feed.export')) {
        for (const month of ['2024-06', '2024-07'])
          expect(fs.existsSync(path.join(directory, 'exports', month, 'manifest.json')), month).toBe(true);
      }
    }, 120_000);
  }

  for (const block of docsBlocks.filter((candidate) => candidate.page === 'cluster.md')) {
    it.skipIf(etcdBinary() === undefined || versitygwBinary() === undefined)(
      `docs/cluster.md line ${block.line} runs against the etcd and the object store it names`,
      async () => {
        const directory = workspace();
        const etcdPort = Number(/coordination: \{ etcd: 'http:\/\/127\.0\.0\.1:(\d+)'/.exec(block.code)?.[1]);
        const objects = /bucket: '([^']+)'.*endpoint: 'http:\/\/127\.0\.0\.1:(\d+)'/.exec(block.code);
        expect(etcdPort).toBeGreaterThan(0);
        expect(objects).not.toBeNull();
        const etcd = await startEtcd(etcdBinary(), etcdPort);
        const s3 = await startVersitygw(versitygwBinary()!, Number(objects![2]));
        try {
          await s3.createBucket(objects![1]!);
          const credentials = {
            AWS_ACCESS_KEY_ID: s3.credentials.accessKeyId,
            AWS_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
            AWS_REGION: s3.region,
          };
          const printed = runDocsBlock(block, directory, credentials);
          // Epoch 1; one node (this one); the holder; slots: the first grant's fences (8: it
          // cannot know that no writer before it has groups in flight) and the append's group.
          expect(printed.trim()).toBe('1 1 ingest-1 9');
        } finally {
          await s3.stop();
          await etcd.stop();
        }
      },
      120_000,
    );
  }

  for (const block of docsBlocks.filter((candidate) => candidate.page === 'groups.md')) {
    it(`docs/groups.md line ${block.line} shares its feed among workers as it says`, () => {
      const printed = runDocsBlock(block, workspace());
      // The key order held ada's second email back from the first claim.
      expect(printed.match(/^send /gm)).toHaveLength(2);
      expect(printed).toContain('cursor: 3');
      expect(printed).toContain('acked: 3');
    }, 120_000);
  }

  for (const block of docsBlocks.filter((candidate) => candidate.page === 'http.md')) {
    it(`docs/http.md line ${block.line} runs against a server at the address it names`, async () => {
      const directory = workspace();
      const address = /http:\/\/127\.0\.0\.1:(\d+)/.exec(block.code);
      expect(address).not.toBeNull();
      const data = path.join(directory, 'served');
      const feedName = /store\.feed\('([^']+)'\)/.exec(block.code)?.[1];
      if (feedName)
        expect(
          spawnSync(process.execPath, [cliBin, '--data', data, 'feed', 'create', feedName], { encoding: 'utf8' })
            .status,
        ).toBe(0);
      await withServer(address!, data, () => {
        const printed = runDocsBlock(block, directory);
        // The follow handed the example's own append to `handle`, then ended when it aborted.
        expect(
          printed
            .trim()
            .split('\n')
            .map((line) => JSON.parse(line)),
        ).toEqual([{ commit: 1, records: 1 }]);
      });
    }, 120_000);
  }
});
