/**
 * The contract every `SegmentStore` keeps, run against each implementation: the local folder
 * (`LocalSegmentStore`) and the object store (`ObjectSegmentStore`, against a real versitygw
 * server that scripts/test-tools.sh builds). Whole files stored with `put` and `putFile` (one of
 * several multipart parts too) read back by range; `list`, `delete` and `size` agree with them;
 * a missing name is `IO` with errno `ENOENT`, a range past the end `CORRUPT`, a name with a `/`
 * refused; and two stores side by side (sibling prefixes in one bucket, or one nested in the
 * other) never see each other's files. Then what only the object store has: `putIfAbsent`, its
 * typed errors for an unreachable server, refused credentials and a missing bucket, and no
 * warning from the AWS SDK in a user's output.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadKernels } from '../../packages/engine/src/index.js';
import { objectPartBytes } from '../../packages/engine/src/limits.js';
import {
  ObjectSegmentStore,
  type ObjectSegmentStoreOptions,
} from '../../packages/engine/src/storage/object-segment-store.js';
import { LocalSegmentStore, type SegmentStore } from '../../packages/engine/src/storage/segment-store.js';
import { failure } from '../support/failure.js';
import {
  freePort,
  startVersitygw,
  type Versitygw,
  versitygwBinary,
  versitygwMissing,
} from '../support/object-store.js';
import { temporaryDirectory } from '../support/store.js';

const kernels = loadKernels();
const engineFolder = fileURLToPath(new URL('../../packages/engine', import.meta.url));

/** `length` bytes that differ from their neighbours and from any shifted copy of themselves. */
function patterned(length: number, seed = 0): Uint8Array {
  const bytes = new Uint8Array(length);
  for (let index = 0; index < length; index++) bytes[index] = (index * 7 + (index >>> 9) + seed) % 251;
  return bytes;
}

const bytes = patterned(300);

/**
 * Where `actual` first differs from `expected` (-1 when it does not): compared as buffers, since
 * `toEqual` walks a typed array's indices one by one and runs out of memory on 20 MiB.
 */
function firstDifference(actual: Uint8Array, expected: Uint8Array): number {
  if (Buffer.from(actual.buffer, actual.byteOffset, actual.length).equals(expected)) return -1;
  const length = Math.min(actual.length, expected.length);
  for (let index = 0; index < length; index++) if (actual[index] !== expected[index]) return index;
  return length;
}

/** Stores over one place: two side by side, and one inside the first (a sub-folder, a longer prefix). */
interface Stores {
  readonly a: SegmentStore;
  readonly b: SegmentStore;
  readonly nested: SegmentStore;
  /** A folder for local files that `putFile` consumes. */
  readonly scratch: string;
}

interface Backend {
  readonly name: string;
  /** Why the suite skips; undefined when it runs. */
  readonly missing?: string;
  setUp(): Promise<void>;
  tearDown(): Promise<void>;
  stores(): Promise<Stores>;
}

const localBackend: Backend = {
  name: 'LocalSegmentStore',
  async setUp() {},
  async tearDown() {},
  async stores() {
    const folder = temporaryDirectory();
    const scratch = path.join(folder, 'scratch');
    fs.mkdirSync(scratch);
    return {
      a: new LocalSegmentStore(kernels, path.join(folder, 'a')),
      b: new LocalSegmentStore(kernels, path.join(folder, 'b')),
      nested: new LocalSegmentStore(kernels, path.join(folder, 'a', 'y')),
      scratch,
    };
  },
};

const binary = versitygwBinary();
const bucket = 'segments';
let server: Versitygw | undefined;
const opened: ObjectSegmentStore[] = [];
let prefixes = 0;

/** An object store in the test bucket under `prefix`, closed after the file. */
function objectStore(prefix: string, change: Partial<ObjectSegmentStoreOptions> = {}): ObjectSegmentStore {
  const store = new ObjectSegmentStore({
    endpoint: server!.endpoint,
    bucket,
    prefix,
    region: server!.region,
    credentials: server!.credentials,
    forcePathStyle: true,
    ...change,
  });
  opened.push(store);
  return store;
}

const objectBackend: Backend = {
  name: 'ObjectSegmentStore',
  missing: binary === undefined ? versitygwMissing : undefined,
  async setUp() {
    server = await startVersitygw(binary!);
    await server.createBucket(bucket);
  },
  async tearDown() {
    for (const store of opened.splice(0)) store.close();
    await server?.stop();
  },
  async stores() {
    // Every test under a prefix of its own, so none sees another's objects.
    const root = `run/${++prefixes}/`;
    return {
      // Past two parts a file goes up in parts here, so the contract's 20 MiB file takes the
      // multipart path (the default bound sends whole segments in one PUT).
      a: objectStore(`${root}a/`, { singlePutBytesMax: 2 * objectPartBytes }),
      b: objectStore(`${root}b/`),
      nested: objectStore(`${root}a/y/`),
      scratch: temporaryDirectory(),
    };
  },
};

for (const backend of [localBackend, objectBackend]) {
  describe.skipIf(backend.missing !== undefined)(
    `${backend.name} keeps the SegmentStore contract${backend.missing ? ` (skipped: ${backend.missing})` : ''}`,
    () => {
      beforeAll(() => backend.setUp());
      afterAll(() => backend.tearDown());

      it('reads back ranges of what put stored; a second put replaces it whole', async () => {
        const { a } = await backend.stores();
        await a.put('0000000000000001.sum', bytes);
        expect(await a.read('0000000000000001.sum', 10, 20)).toEqual(bytes.subarray(10, 30));
        expect(await a.read('0000000000000001.sum', 0, 300)).toEqual(bytes);
        expect(await a.read('0000000000000001.sum', 299, 1)).toEqual(bytes.subarray(299));
        expect(await a.read('0000000000000001.sum', 300, 0)).toEqual(new Uint8Array(0));
        const into = new Uint8Array(5);
        expect(await a.readInto('0000000000000001.sum', into, 295)).toBe(into);
        expect(into).toEqual(bytes.subarray(295));
        expect(await a.size('0000000000000001.sum')).toBe(300);

        await a.put('0000000000000001.sum', bytes.subarray(0, 7));
        expect(await a.size('0000000000000001.sum')).toBe(7);
        expect(await a.read('0000000000000001.sum', 0, 7)).toEqual(bytes.subarray(0, 7));
        expect((await failure(() => a.read('0000000000000001.sum', 0, 8))).code).toBe('CORRUPT');

        await a.put('0000000000000002.sum', new Uint8Array(0));
        expect(await a.size('0000000000000002.sum')).toBe(0);
        expect(await a.read('0000000000000002.sum', 0, 0)).toEqual(new Uint8Array(0));
      });

      it("reads a file's start with the file's size, whole with Infinity, and an empty file too", async () => {
        const { a } = await backend.stores();
        await a.put('0000000000000003.keys', bytes);
        const head = await a.readStart('0000000000000003.keys', 16);
        expect(head).toEqual({ bytes: bytes.subarray(0, 16), size: 300 });
        // A start longer than the file is the file, as a summary read whole asks.
        expect(await a.readStart('0000000000000003.keys', 1000)).toEqual({ bytes, size: 300 });
        expect(await a.readStart('0000000000000003.keys', Number.POSITIVE_INFINITY)).toEqual({ bytes, size: 300 });
        await a.put('0000000000000004.keys', new Uint8Array(0));
        expect(await a.readStart('0000000000000004.keys', 16)).toEqual({ bytes: new Uint8Array(0), size: 0 });
        const missing = await failure(() => a.readStart('0000000000000005.keys', 16));
        expect([missing.code, missing.details?.errno]).toEqual(['IO', 'ENOENT']);
      });

      it('lists, deletes and sizes its files; deleting a missing one is no failure', async () => {
        const { a } = await backend.stores();
        expect(await a.list()).toEqual([]);
        await a.delete('0000000000000001.idx');
        await a.put('0000000000000001.idx', bytes);
        await a.put('0000000000000001.keys', bytes.subarray(0, 10));
        await a.put('0000000000000100.idx', bytes);
        expect((await a.list()).sort()).toEqual([
          '0000000000000001.idx',
          '0000000000000001.keys',
          '0000000000000100.idx',
        ]);
        await a.delete('0000000000000001.idx');
        await a.delete('0000000000000001.idx');
        expect((await a.list()).sort()).toEqual(['0000000000000001.keys', '0000000000000100.idx']);
        expect(await a.size('0000000000000001.idx')).toBeUndefined();
        expect(await a.size('0000000000000001.keys')).toBe(10);
      });

      it('deletes many names at once, missing ones among them', async () => {
        const { a } = await backend.stores();
        for (const base of [1, 2, 3]) await a.put(`000000000000000${base}.idx`, bytes.subarray(0, base));
        await a.deleteAll(['0000000000000001.idx', '0000000000000003.idx', '0000000000000009.idx']);
        expect(await a.list()).toEqual(['0000000000000002.idx']);
        await a.deleteAll([]);
        expect(await a.size('0000000000000002.idx')).toBe(2);
      });

      it('stores a local file with putFile and consumes it, one of several upload parts too', async () => {
        const { a, scratch } = await backend.stores();
        const small = path.join(scratch, 'small');
        fs.writeFileSync(small, bytes);
        await a.putFile('0000000000000001.hist', small);
        expect(fs.existsSync(small)).toBe(false);
        expect(await a.read('0000000000000001.hist', 0, 300)).toEqual(bytes);

        // 20 MiB: past one part, so the object store sends it as a multipart upload.
        const large = patterned(20 * 1024 * 1024, 3);
        expect(large.length).toBeGreaterThan(2 * objectPartBytes);
        const file = path.join(scratch, 'large');
        fs.writeFileSync(file, large);
        await a.putFile('0000000000000002.hist', file);
        expect(fs.existsSync(file)).toBe(false);
        expect(await a.size('0000000000000002.hist')).toBe(large.length);
        // Ranges across the parts' seams, and the whole file.
        for (const [offset, length] of [
          [objectPartBytes - 10, 20],
          [2 * objectPartBytes - 1, 2],
          [large.length - 5, 5],
          [0, large.length],
        ] as const)
          expect(
            firstDifference(
              await a.read('0000000000000002.hist', offset, length),
              large.subarray(offset, offset + length),
            ),
          ).toBe(-1);
        expect((await a.list()).sort()).toEqual(['0000000000000001.hist', '0000000000000002.hist']);

        // A refused putFile leaves the local file where it was.
        const kept = path.join(scratch, 'kept');
        fs.writeFileSync(kept, bytes);
        expect((await failure(() => a.putFile('x/0000000000000003.hist', kept))).code).toBe('INTERNAL');
        expect(fs.existsSync(kept)).toBe(true);
      });

      it('reports a missing name as IO with errno ENOENT, and a range past the end as CORRUPT', async () => {
        const { a } = await backend.stores();
        for (const missing of [
          await failure(() => a.read('0000000000000009.hist', 0, 8)),
          await failure(() => a.read('0000000000000009.hist', 0, 0)),
          await failure(() => a.readInto('0000000000000009.hist', new Uint8Array(8), 0)),
        ]) {
          expect(missing.code).toBe('IO');
          expect(missing.details.errno).toBe('ENOENT');
        }
        expect(await a.size('0000000000000009.hist')).toBeUndefined();

        await a.put('0000000000000001.hist', bytes);
        for (const [offset, length] of [
          [290, 20],
          [300, 1],
          [400, 10],
        ] as const)
          expect((await failure(() => a.read('0000000000000001.hist', offset, length))).code).toBe('CORRUPT');
        expect((await failure(() => a.readInto('0000000000000001.hist', new Uint8Array(20), 290))).code).toBe(
          'CORRUPT',
        );
      });

      it('refuses a name that is not a file name', async () => {
        const { a } = await backend.stores();
        for (const name of ['a/b', '../0000000000000001.hist', '']) {
          expect((await failure(() => a.put(name, bytes))).code).toBe('INTERNAL');
          expect((await failure(() => a.read(name, 0, 1))).code).toBe('INTERNAL');
          expect((await failure(() => a.delete(name))).code).toBe('INTERNAL');
          expect((await failure(() => a.size(name))).code).toBe('INTERNAL');
        }
        expect(await a.list()).toEqual([]);
      });

      it('keeps stores side by side and nested apart', async () => {
        const { a, b, nested } = await backend.stores();
        await a.put('0000000000000001.hist', bytes);
        await b.put('0000000000000001.hist', bytes.subarray(0, 5));
        await b.put('0000000000000002.hist', bytes);
        await nested.put('0000000000000003.hist', bytes);
        expect(await a.list()).toEqual(['0000000000000001.hist']);
        expect((await b.list()).sort()).toEqual(['0000000000000001.hist', '0000000000000002.hist']);
        expect(await nested.list()).toEqual(['0000000000000003.hist']);
        expect(await a.size('0000000000000001.hist')).toBe(300);
        expect(await b.size('0000000000000001.hist')).toBe(5);
        expect(await a.size('0000000000000002.hist')).toBeUndefined();

        await b.delete('0000000000000001.hist');
        expect(await a.read('0000000000000001.hist', 0, 300)).toEqual(bytes);
        expect(await b.list()).toEqual(['0000000000000002.hist']);
      });
    },
  );
}

describe.skipIf(binary === undefined)(
  `ObjectSegmentStore's own behaviour${binary === undefined ? ` (skipped: ${versitygwMissing})` : ''}`,
  () => {
    beforeAll(() => objectBackend.setUp());
    afterAll(() => objectBackend.tearDown());

    it('has no local path, and refuses a prefix that is not a folder of keys', async () => {
      const { a } = await objectBackend.stores();
      expect(a.localPath('0000000000000001.hist')).toBeUndefined();
      for (const prefix of ['history', '/history/'])
        expect(() => objectStore(prefix)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
      // An empty prefix is the whole bucket; the other tests' objects are all under `run/`.
      expect(await objectStore('').list()).toEqual([]);
    });

    it('putIfAbsent creates an object once: versitygw honours If-None-Match', async () => {
      const store = objectStore(`run/${++prefixes}/`);
      expect(await store.putIfAbsent('0000000000000001.desc', bytes)).toBe(true);
      expect(await store.putIfAbsent('0000000000000001.desc', bytes.subarray(0, 3))).toBe(false);
      // The second write did not replace the first.
      expect(await store.size('0000000000000001.desc')).toBe(300);
      expect(await store.read('0000000000000001.desc', 0, 300)).toEqual(bytes);
      // A name freed by a delete can be created again.
      await store.delete('0000000000000001.desc');
      expect(await store.putIfAbsent('0000000000000001.desc', bytes.subarray(0, 3))).toBe(true);
      expect(await store.size('0000000000000001.desc')).toBe(3);
    });

    it('stores a file between one part and the single-PUT bound in one streamed PUT, read back whole', async () => {
      const store = objectStore(`run/${++prefixes}/`);
      const size = objectPartBytes + 4 * 1024 * 1024 + 3;
      expect(store.requestsToStore(size)).toBe(1);
      const content = new Uint8Array(size);
      for (let at = 0; at < size; at++) content[at] = (at * 31 + 7) & 0xff;
      const file = path.join(temporaryDirectory(), 'streamed');
      fs.writeFileSync(file, content);
      await store.copyFile('0000000000000001.hist', file);
      expect(fs.existsSync(file)).toBe(true);
      expect(await store.size('0000000000000001.hist')).toBe(size);
      expect(firstDifference(await store.read('0000000000000001.hist', 0, size), content)).toBe(-1);
      expect(store.requestsToStore(200 * 1024 * 1024)).toBe(Math.ceil((200 * 1024 * 1024) / objectPartBytes) + 2);
    });

    it('of 32 concurrent putIfAbsent on one name exactly one wins, and its bytes stay (what descriptors rely on)', async () => {
      const store = objectStore(`run/${++prefixes}/`);
      const attempts = Array.from({ length: 32 }, (_, writer) => new Uint8Array(64).fill(writer + 1));
      const won = await Promise.all(attempts.map((candidate) => store.putIfAbsent('0000000000000001', candidate)));
      expect(won.filter(Boolean)).toHaveLength(1);
      const winner = won.indexOf(true);
      expect(await store.read('0000000000000001', 0, 64)).toEqual(attempts[winner]);
    });

    it('answers a conditional write with If-Match on a missing key with 404, not a write', async () => {
      const { S3Client, PutObjectCommand } = await import('@aws-sdk/client-s3');
      const client = new S3Client({
        endpoint: server!.endpoint,
        region: server!.region,
        credentials: server!.credentials,
        forcePathStyle: true,
      });
      try {
        const key = `run/${++prefixes}/missing`;
        const answer = await client
          .send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: bytes, IfMatch: '"0123456789abcdef"' }))
          .then(
            () => 200,
            (error: { $metadata?: { httpStatusCode?: number } }) => error.$metadata?.httpStatusCode,
          );
        expect(answer).toBe(404);
        expect(await objectStore(key.slice(0, key.lastIndexOf('/') + 1)).size('missing')).toBeUndefined();
      } finally {
        client.destroy();
      }
    });

    it('reports a server that does not answer as UNAVAILABLE, with the cause, and writes nothing to the console', async () => {
      const store = objectStore('run/down/', { endpoint: `http://127.0.0.1:${await freePort()}` });
      // A file streamed in one PUT: the SDK, left to itself, warns on the console when one fails.
      const streamed = path.join(temporaryDirectory(), 'streamed');
      fs.writeFileSync(streamed, new Uint8Array(objectPartBytes + 1));
      const warn = vi.spyOn(console, 'warn');
      const error = vi.spyOn(console, 'error');
      try {
        for (const failed of [
          await failure(() => store.read('0000000000000001.hist', 0, 1)),
          await failure(() => store.list()),
          await failure(() => store.put('0000000000000001.hist', bytes)),
          await failure(() => store.copyFile('0000000000000002.hist', streamed)),
        ]) {
          expect(failed.code).toBe('UNAVAILABLE');
          expect(failed.cause).toBeDefined();
        }
        expect(warn).not.toHaveBeenCalled();
        expect(error).not.toHaveBeenCalled();
      } finally {
        warn.mockRestore();
        error.mockRestore();
      }
    });

    it('reports refused credentials as IO with errno EACCES, and never shows the secret', async () => {
      const secretAccessKey = 'not-the-secret-0123456789';
      const store = objectStore('run/denied/', {
        credentials: { accessKeyId: server!.credentials.accessKeyId, secretAccessKey },
      });
      for (const error of [
        await failure(() => store.read('0000000000000001.hist', 0, 1)),
        await failure(() => store.list()),
      ]) {
        expect(error.code).toBe('IO');
        expect(error.details.errno).toBe('EACCES');
        expect(`${error.message} ${JSON.stringify(error.toJSON())}`).not.toContain(secretAccessKey);
      }
    });

    it('reports a missing bucket as IO, not as a missing object or an empty list; putFile keeps its file', async () => {
      // Past one part the file goes in parts here. (Streamed in one PUT instead, a refusal the
      // server sends before the body is read may reach the client as a reset connection:
      // `UNAVAILABLE`, not the bucket's `IO`.)
      const store = objectStore('run/', { bucket: 'no-such-bucket', singlePutBytesMax: objectPartBytes });
      const scratch = temporaryDirectory();
      // One file sent in a single PUT, one in parts: a failed upload of either leaves it.
      const small = path.join(scratch, 'small');
      const large = path.join(scratch, 'large');
      fs.writeFileSync(small, bytes);
      fs.writeFileSync(large, new Uint8Array(objectPartBytes + 1));
      for (const error of [
        await failure(() => store.list()),
        await failure(() => store.read('0000000000000001.hist', 0, 1)),
        await failure(() => store.putFile('0000000000000001.hist', small)),
        await failure(() => store.putFile('0000000000000002.hist', large)),
      ]) {
        expect(error.code).toBe('IO');
        expect(error.details.s3Code).toBe('NoSuchBucket');
        expect(error.details.errno).toBeUndefined();
      }
      expect(fs.existsSync(small) && fs.existsSync(large)).toBe(true);
    });

    it("keeps the AWS SDK's Node version warning out of a user's output", () => {
      // A process of its own, as a user's: the SDK warns once per process. The built engine is
      // what a user runs (`pnpm test` builds it before the tests).
      const environment = { ...process.env };
      delete environment.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED;
      const options = {
        endpoint: server!.endpoint,
        bucket,
        prefix: 'run/quiet/',
        region: server!.region,
        credentials: server!.credentials,
        forcePathStyle: true,
      };
      const run = (program: string) =>
        spawnSync(process.execPath, ['--input-type=module', '-e', program], {
          cwd: engineFolder,
          env: environment,
          encoding: 'utf8',
        });
      const quiet = run(
        `import { ObjectSegmentStore } from './dist/storage/object-segment-store.js';
         const store = new ObjectSegmentStore(${JSON.stringify(options)});
         await store.put('0000000000000001.hist', new Uint8Array([1, 2, 3]));
         console.log(JSON.stringify(await store.list()));
         store.close();`,
      );
      expect(quiet.stderr).toBe('');
      expect(quiet.stdout.trim()).toBe('["0000000000000001.hist"]');
      expect(process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED).toBeUndefined();
      // The SDK left to itself does warn on this Node (it says so below Node 22), so the check
      // above is not empty by accident.
      const loud = run(
        `import { S3Client } from '@aws-sdk/client-s3';
         new S3Client(${JSON.stringify(options)}).destroy();`,
      );
      expect(loud.stderr.includes('NodeVersionSupportWarning')).toBe(Number(process.versions.node.split('.')[0]) < 22);
    });
  },
);
