/**
 * The faults users met on the command line, each reproduced as it was reported: damage in the
 * middle of a sealed segment, a deleted segment, damaged state logs, a tail interrupted or cut
 * off, a read-only or full disk. Each must give either the acknowledged data or a typed error,
 * never a silent cut, an untyped crash or a stale LOCK.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cli, cliBinary } from '../support/cli.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const binary = cliBinary;

/**
 * The feed of the report: 60 sealed commits of 20 records over 64 KiB segments, keyed. `other`:
 * another feed of the same shape (its segments have the same bases and record counts) whose
 * keys differ and whose fingerprints repeat, as the feed a restore mixed files up with.
 */
async function reportedFeed(directory: string, other = false): Promise<void> {
  const store = await openStore(directory);
  const feed = await store.createFeed('f');
  for (let commit = 0; commit < 60; commit++) {
    await feed.append(
      Array.from({ length: 20 }, (_, index) => ({
        payload: `${other ? 'COMMIT' : 'commit'} ${commit} record ${index} ${'x'.repeat(120)}`,
        key: `${other ? 'j' : 'k'}${index}`,
        version: commit,
        type: 'event',
        tags: [`t${index % 4}`],
        // As long as the default fingerprint (8 bytes), so the segments lay out the same.
        ...(other ? { fingerprint: `f${String((commit * 20 + index) % 500).padStart(7, '0')}` } : {}),
      })),
    );
  }
  await feed.createSubscription('billing', { after: 0 });
  await (await feed.subscription('billing')).advance(42);
  await store.close();
}

const historyFiles = (directory: string) =>
  fs
    .readdirSync(path.join(directory, 'feeds', 'f', 'history'))
    .filter((name) => name.endsWith('.hist'))
    .sort()
    .map((name) => path.join(directory, 'feeds', 'f', 'history', name));

describe('damage reported from the field', () => {
  it('a flipped byte at 20,000 of an early sealed segment: CORRUPT with file and offset, nothing cut, later commits readable', async () => {
    const data = temporaryDirectory();
    await reportedFeed(data);
    const [first] = historyFiles(data);
    const bytes = fs.readFileSync(first);
    bytes[20_000] ^= 0xff;
    fs.writeFileSync(first, bytes);

    const read = cli(data, ['read', 'f']);
    expect(read.status).toBe(1);
    expect(read.error).toMatchObject({ code: 'CORRUPT', file: fs.realpathSync(first), offset: expect.any(Number) });
    // What lies before the damage is returned exactly, and nothing after it pretends to be whole.
    expect(read.lines.length).toBeLessThan(1200);
    read.lines.forEach((line, index) => {
      expect(line.position).toBe(index + 1);
    });

    // A key's winner comes from the key dictionaries, built before the damage, and the record
    // it names is checked as it is read: exact, or CORRUPT if that record lies in the damage.
    const got = cli(data, ['get', 'f', 'k1']);
    if (got.status === 0)
      expect(got.lines.map((line) => line.payload)).toEqual([`commit 59 record 1 ${'x'.repeat(120)}`]);
    else expect(got.error).toMatchObject({ code: 'CORRUPT', file: fs.realpathSync(first) });
    for (const args of [
      ['read', 'f', '--mode', 'latest'],
      ['read', 'f', '--mode', 'dedup'],
    ]) {
      const result = cli(data, args);
      expect(result.status, args.join(' ')).toBe(1);
      expect(result.error, args.join(' ')).toMatchObject({ code: 'CORRUPT' });
    }
    // The segment's index was built from its bytes before they were damaged, and every record
    // it leads to is checked as it is read: the answer is exact, or it fails CORRUPT where a
    // record it needs lies in the damaged bytes.
    const indexed = cli(data, ['read', 'f', '--tag', 't1', '--plan', 'index']);
    if (indexed.status === 0) {
      expect(indexed.lines.map((line) => line.payload)).toEqual(
        Array.from(
          { length: 60 * 5 },
          (_, at) => `commit ${Math.floor(at / 5)} record ${(at % 5) * 4 + 1} ${'x'.repeat(120)}`,
        ),
      );
    } else {
      expect(indexed.error).toMatchObject({ code: 'CORRUPT', file: fs.realpathSync(first) });
    }
    // The last commit lies in a later segment and reads whole.
    const last = cli(data, ['read', 'f', '--commit', '60']);
    expect(last.status).toBe(0);
    expect(last.lines.map((line) => line.payload)).toEqual(
      Array.from({ length: 20 }, (_, index) => `commit 59 record ${index} ${'x'.repeat(120)}`),
    );
    // A writer's open cuts nothing: the damaged bytes are still there, and verify says so.
    expect(cli(data, ['append', 'f'], '{"payload":"after"}\n').status).toBe(0);
    expect(fs.readFileSync(first).equals(bytes)).toBe(true);
    const verify = cli(data, ['verify', 'f']);
    expect(verify.status).toBe(1);
    expect(verify.lines[0]).toMatchObject({
      ok: false,
      problems: expect.arrayContaining([expect.objectContaining({ code: 'CORRUPT', file: fs.realpathSync(first) })]),
    });
  });

  it('a deleted sealed segment: reads of its commits fail CORRUPT naming it; every mode and plan is typed', async () => {
    const data = temporaryDirectory();
    await reportedFeed(data);
    const files = historyFiles(data);
    expect(files.length).toBeGreaterThanOrEqual(3);
    const second = files[1];
    fs.rmSync(second);
    const missing = path.join(fs.realpathSync(path.dirname(second)), path.basename(second));
    const commits = cli(data, ['commits', 'f']).lines;
    const lost = commits.find((line) => line.stream === '');
    expect(lost, 'a stand-in for a lost commit').toBeDefined();
    const one = cli(data, ['read', 'f', '--commit', String(lost!.commit)]);
    expect(one.status).toBe(1);
    expect(one.error).toMatchObject({ code: 'CORRUPT', file: missing });
    for (const args of [
      ['get', 'f', 'k3'],
      ['read', 'f', '--tag', 't1', '--plan', 'index'],
      ['read', 'f', '--tag', 't1', '--plan', 'scan'],
      ['read', 'f', '--mode', 'dedup'],
    ]) {
      const result = cli(data, args);
      expect(result.status, args.join(' ')).toBe(1);
      expect(result.error, args.join(' ')).toMatchObject({ code: 'CORRUPT' });
    }
    expect(cli(data, ['read', 'f', '--commit', '60']).status).toBe(0);
  });

  it('a deleted newest segment fails verify, and the feed refuses writes it could not number', async () => {
    const data = temporaryDirectory();
    await reportedFeed(data);
    const files = historyFiles(data);
    fs.rmSync(files[files.length - 1]);
    const verify = cli(data, ['verify', 'f']);
    expect(verify.status).toBe(1);
    expect(verify.lines[0]).toMatchObject({ ok: false });
    const append = cli(data, ['append', 'f'], '{"payload":"x"}\n');
    expect(append.status).toBe(1);
    expect(append.error).toMatchObject({ code: 'CORRUPT' });
  });

  it("another feed's key and fingerprint dictionaries restored over a segment's: verify fails naming them, reads stay exact, a writer's open rebuilds them", async () => {
    const data = temporaryDirectory();
    const other = temporaryDirectory();
    await reportedFeed(data);
    await reportedFeed(other, true);
    // The last sealed segment: what `get` as of its last commit and dedup read from.
    const files = historyFiles(data);
    const sealed = path.basename(files[files.length - 2], '.hist');
    const asOf = (Number(path.basename(files[files.length - 1], '.hist')) - 1) / 20;
    const index = (directory: string) => path.join(fs.realpathSync(directory), 'feeds', 'f', 'index');
    const restored = ['.keys', '.fps'].map((extension) => path.join(index(data), sealed + extension));
    for (const file of restored) {
      const theirs = fs.readFileSync(path.join(index(other), path.basename(file)));
      // The same range in the head (base and record count at bytes 12 to 28), other contents.
      expect(theirs.subarray(12, 28).equals(fs.readFileSync(file).subarray(12, 28))).toBe(true);
      fs.writeFileSync(file, theirs);
    }

    const verify = cli(data, ['verify', 'f']);
    expect(verify.status).toBe(1);
    for (const file of restored)
      expect(verify.lines[0]!.problems).toContainEqual(expect.objectContaining({ code: 'INDEX', file }));
    // Read-only commands do not trust them: every record is a first occurrence, and a key's
    // winner as of the segment's last commit is that commit's record.
    expect(cli(data, ['read', 'f', '--mode', 'dedup']).lines).toHaveLength(1200);
    const got = cli(data, ['get', 'f', 'k1', '--as-of', String(asOf)]);
    expect(got.lines.map((line) => line.payload)).toEqual([`commit ${asOf - 1} record 1 ${'x'.repeat(120)}`]);

    // A writer's open rebuilds them; then nothing is left to report.
    expect(cli(data, ['append', 'f'], '{"payload":"after"}\n').status).toBe(0);
    for (const file of restored)
      expect(fs.readFileSync(file).equals(fs.readFileSync(path.join(index(other), path.basename(file))))).toBe(false);
    expect(cli(data, ['verify', 'f']).status).toBe(0);
  });

  it('a flipped byte in a subscription log or in lease.log sends neither the cursor nor the epoch back', async () => {
    const data = temporaryDirectory();
    await reportedFeed(data);
    // A lease that has expired by the time the next command runs, so a new holder may take over.
    const lease = cli(data, ['lease', 'acquire', 'f', '--holder', 'old', '--ttl-ms', '10']);
    expect(lease.lines[0]).toMatchObject({ epoch: 1 });
    const state = path.join(data, 'feeds', 'f', 'state');
    for (const file of [path.join(state, 'subscriptions', 'billing.log'), path.join(state, 'lease.log')]) {
      const bytes = fs.readFileSync(file);
      bytes[bytes.length - 3] ^= 0x55;
      fs.writeFileSync(file, bytes);
    }
    const subscriptions = cli(data, ['sub', 'list', 'f']);
    expect(subscriptions.lines).toEqual([expect.objectContaining({ subscription: 'billing', cursor: 42 })]);
    const next = cli(data, ['lease', 'acquire', 'f', '--holder', 'new']);
    expect(next.lines[0]).toMatchObject({ epoch: (lease.lines[0]!.epoch as number) + 1 });
    expect(cli(data, ['verify', 'f']).lines[0]).toMatchObject({ ok: false });
  });
});

describe('tail', () => {
  it('follows commits another process appends, and exits 0 on SIGINT leaving no LOCK', async () => {
    const data = temporaryDirectory();
    expect(cli(data, ['feed', 'create', 'f']).status).toBe(0);
    expect(cli(data, ['append', 'f'], '{"payload":"one"}\n').status).toBe(0);
    const tail = spawn(process.execPath, [binary, '--data', data, 'tail', 'f', '--after', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    tail.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => tail.on('exit', (code) => resolve(code)));
    const payloads = () =>
      out
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line).payload as string);
    await waitFor(() => payloads().length === 1);
    // The tail holds no lock: a writer appends beside it.
    expect(cli(data, ['append', 'f'], '{"payload":"two"}\n').status).toBe(0);
    await waitFor(() => payloads().length === 2);
    tail.kill('SIGINT');
    expect(await exited).toBe(0);
    expect(payloads()).toEqual(['one', 'two']);
    expect(fs.existsSync(path.join(data, 'LOCK'))).toBe(false);
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Small file systems for full and read-only disks: root may mount tmpfs, and CI runs as root. */
const mounted: string[] = [];
afterEach(() => {
  for (const mount of mounted.splice(0)) spawnSync('umount', ['-l', mount]);
});

function tmpfs(bytes: number): string | undefined {
  const mount = temporaryDirectory('streamstack-tmpfs-');
  const result = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes}`, 'tmpfs', mount]);
  if (result.status !== 0) return undefined;
  mounted.push(mount);
  return mount;
}

describe('disks that refuse writes', () => {
  it('read, verify and tail work on a read-only mount; writes fail with a typed IO error', async () => {
    const mount = tmpfs(256 * 1024 * 1024);
    expect(mount).toBeDefined();
    const data = path.join(mount!, 'data');
    expect(cli(data, ['feed', 'create', 'f']).status).toBe(0);
    expect(cli(data, ['append', 'f'], '{"payload":"kept"}\n').status).toBe(0);
    expect(spawnSync('mount', ['-o', 'remount,ro', mount!]).status).toBe(0);
    expect(cli(data, ['read', 'f']).lines.map((line) => line.payload)).toEqual(['kept']);
    expect(cli(data, ['verify']).status).toBe(0);
    const append = cli(data, ['append', 'f'], '{"payload":"refused"}\n');
    expect(append.status).toBe(1);
    expect(append.error).toMatchObject({ code: 'IO', errno: 'EROFS' });
  });

  it('a full disk: reads go on, an append fails typed, no empty LOCK is left, and nothing acknowledged is lost', async () => {
    const mount = tmpfs(80 * 1024 * 1024);
    expect(mount).toBeDefined();
    const data = path.join(mount!, 'data');
    expect(cli(data, ['feed', 'create', 'f']).status).toBe(0);
    expect(cli(data, ['append', 'f'], '{"payload":"kept"}\n').status).toBe(0);
    // Fill what is left of the disk.
    spawnSync('dd', ['if=/dev/zero', `of=${path.join(mount!, 'filler')}`, 'bs=1M'], { stdio: 'ignore' });
    expect(cli(data, ['read', 'f']).lines.map((line) => line.payload)).toEqual(['kept']);
    // Enough to need a new 64 MiB WAL segment, which no longer fits.
    const lease = cli(data, ['lease', 'acquire', 'f', '--holder', 'me']);
    if (lease.status === 0) {
      const token = String(lease.lines[0]!.token);
      const stream = cli(data, ['stream', 'open', 'f', '--token', token]);
      expect(stream.status).toBe(1);
      // The error says why: a segment's preallocation does not fit on the disk.
      expect(stream.error).toMatchObject({ code: 'IO', errno: 'ENOSPC', bytes: 64 * 1024 * 1024 });
    } else {
      expect(lease.error).toMatchObject({ code: 'IO', errno: 'ENOSPC' });
    }
    expect(fs.existsSync(path.join(data, 'LOCK'))).toBe(false);
    fs.rmSync(path.join(mount!, 'filler'));
    expect(cli(data, ['read', 'f']).lines.map((line) => line.payload)).toEqual(['kept']);
    expect(cli(data, ['append', 'f'], '{"payload":"after"}\n').status).toBe(0);
    expect(cli(data, ['read', 'f']).lines.map((line) => line.payload)).toEqual(['kept', 'after']);
  });
});
