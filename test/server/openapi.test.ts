import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import SwaggerParser from '@apidevtools/swagger-parser';
import openapiTS, { astToString } from 'openapi-typescript';
import { describe, expect, it } from 'vitest';
import type { ErrorCode } from '../../packages/engine/src/index.js';
import { errorStatuses } from '../../packages/server/src/http-errors.js';
import { protocolStatusOf } from '../../packages/server/src/schemas-durable-streams.js';
import { subscriptionStatusOf } from '../../packages/server/src/schemas-durable-subscriptions.js';
import { call, startServer } from '../support/server.js';
import { temporaryDirectory } from '../support/store.js';

const run = promisify(execFile);
const repository = path.resolve(import.meta.dirname, '../..');

type Operation = {
  operationId?: string;
  security?: Record<string, string[]>[];
  parameters?: { in: string; name: string; required?: boolean }[];
  requestBody?: { content: Record<string, unknown> };
  responses: Record<
    string,
    { description: string; content?: Record<string, { schema: any }>; headers?: Record<string, unknown> }
  >;
  'x-streamstack-operation'?: string;
};
type Document = {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, any> };
};

async function documentOf(url: string): Promise<Document> {
  const response = await fetch(`${url}/openapi.json`);
  expect(response.status).toBe(200);
  return (await response.json()) as Document;
}

/** A fastify route path as the document writes it: `:feed` is `{feed}`, the wildcard `{name}`. */
const documentPath = (url: string) => url.replace(/:(\w+)/g, '{$1}').replace(/\*$/, '{name}');

describe('the OpenAPI document at /openapi.json', () => {
  it('is valid OpenAPI 3 and documents every route with its statuses, errors, headers and security', async () => {
    const { server, url } = await startServer();
    const document = await documentOf(url);
    expect(document.openapi).toBe('3.1.0');
    await SwaggerParser.validate(structuredClone(document) as never);
    // The validator does refuse a broken document, so passing it means something.
    const broken = structuredClone(document) as any;
    broken.paths['/health'].get.responses = 'none';
    await expect(SwaggerParser.validate(broken)).rejects.toThrow();

    // Every route fastify serves is in the document with its method, and nothing else is.
    const served = server.servedRoutes().filter((route) => route.url !== '/openapi.json');
    expect(served.length).toBeGreaterThanOrEqual(40);
    for (const route of served)
      expect(
        document.paths[documentPath(route.url)]?.[route.method.toLowerCase()],
        `${route.method} ${route.url}`,
      ).toBeDefined();
    const documented = Object.entries(document.paths).flatMap(([at, methods]) =>
      Object.keys(methods).map((method) => `${method.toUpperCase()} ${at}`),
    );
    expect(documented.sort()).toEqual(served.map((route) => `${route.method} ${documentPath(route.url)}`).sort());

    const operations = Object.entries(document.paths).flatMap(([at, methods]) =>
      Object.entries(methods).map(([method, operation]) => ({ at, method, operation })),
    );
    for (const { at, method, operation } of operations) {
      const where = `${method.toUpperCase()} ${at}`;
      const statuses = Object.keys(operation.responses);
      expect(
        statuses.some((status) => /^[23]/.test(status)),
        where,
      ).toBe(true);
      expect(
        Object.values(operation.responses).map((response) => response.description),
        where,
      ).not.toContain('Default Response');
      // Every error answer has the one error body, its codes those of its status on this route.
      const statusOf = at.startsWith('/ds/v1/stream/__ds/')
        ? subscriptionStatusOf
        : at.startsWith('/ds/')
          ? protocolStatusOf
          : (code: ErrorCode) => errorStatuses[code];
      const errors = statuses.filter((status) => Number(status) >= 400);
      expect(errors, where).toEqual(expect.arrayContaining(['400', '403', '500', '503']));
      for (const status of errors) {
        const schema = operation.responses[status]!.content?.['application/json']?.schema;
        expect(schema?.required, `${where} ${status}`).toEqual(['error']);
        expect(schema.properties.error.required).toEqual(['code', 'message']);
        const codes = schema.properties.error.properties.code.enum as ErrorCode[];
        expect(codes.length).toBeGreaterThan(0);
        for (const code of codes) expect(statusOf(code), `${where}: ${code}`).toBe(Number(status));
      }
      // A route a token is checked on names the operation as its scope and answers 401; the others need none.
      const scope = operation['x-streamstack-operation'];
      if (scope === undefined) expect(operation.security, where).toEqual([]);
      else {
        expect(operation.security, where).toEqual([{ bearer: [scope] }]);
        expect(statuses, where).toContain('401');
      }
    }
    expect(document.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    // Every operation has an operationId a generator can name a call with, each its own.
    const ids = operations.map(({ operation }) => operation.operationId);
    for (const id of ids) expect(id).toMatch(/^[a-z][A-Za-z]+$/);
    expect(new Set(ids).size).toBe(ids.length);

    // Creates answer 201; deletes of the protocol and empty answers have no body.
    const success = (at: string, method: string) =>
      Object.keys(document.paths[at]![method]!.responses).filter((status) => /^[23]/.test(status) && status !== '307');
    // A feed's routes may redirect to the node that writes it, with Location; taking the lease does not.
    const redirect = document.paths['/v1/feeds/{feed}/records']!.post!.responses['307'];
    expect(redirect?.headers?.location).toBeDefined();
    expect(JSON.stringify(redirect)).toContain('NOT_OWNER');
    expect(document.paths['/v1/feeds/{feed}/lease']!.post!.responses['307']).toBeUndefined();
    expect(document.paths['/v1/feeds']!.post!.responses['307']).toBeUndefined();
    for (const [at, method] of [
      ['/v1/feeds', 'post'],
      ['/v1/feeds/{feed}/lease', 'post'],
      ['/v1/feeds/{feed}/streams', 'post'],
      ['/v1/feeds/{feed}/records', 'post'],
      ['/v1/feeds/{feed}/subscriptions', 'post'],
    ] as const) {
      expect(success(at, method), `${method} ${at}`).toEqual(['201']);
    }
    expect(success('/ds/v1/stream/{name}', 'put')).toEqual(['200', '201']);
    expect(success('/ds/v1/stream/{name}', 'delete')).toEqual(['204']);
    expect(document.paths['/ds/v1/stream/{name}']!.delete!.responses['204']!.content).toBeUndefined();
    const codesOf = (at: string, method: string, status: string) =>
      document.paths[at]![method]!.responses[status]!.content!['application/json']!.schema.properties.error.properties
        .code.enum;
    expect(codesOf('/v1/feeds', 'post', '409')).toEqual(expect.arrayContaining(['FEED_EXISTS']));
    expect(codesOf('/v1/feeds/{feed}/streams/{id}/records', 'post', '412')).toEqual(
      expect.arrayContaining(['FENCED', 'SEQ_MISMATCH']),
    );
    expect(codesOf('/ds/v1/stream/{name}', 'post', '409')).toEqual(
      expect.arrayContaining(['SEQ_MISMATCH', 'STREAM_SEALED', 'CONTENT_TYPE_MISMATCH']),
    );
    expect(codesOf('/v1/feeds/{feed}', 'get', '404')).toEqual(['FEED_NOT_FOUND']);

    // The headers the routes read are declared, required where the route refuses to go without.
    const header = (at: string, method: string, name: string) =>
      document.paths[at]![method]!.parameters?.find(
        (parameter) => parameter.in === 'header' && parameter.name === name,
      );
    for (const [at, method] of [
      ['/v1/feeds/{feed}/lease', 'put'],
      ['/v1/feeds/{feed}/lease', 'delete'],
      ['/v1/feeds/{feed}/streams', 'post'],
      ['/v1/feeds/{feed}/streams/{id}/records', 'post'],
      ['/v1/feeds/{feed}/streams/{id}/seal', 'post'],
      ['/v1/feeds/{feed}/streams/{id}/abort', 'post'],
    ] as const) {
      expect(header(at, method, 'SS-Fencing-Token'), `${method} ${at}`).toMatchObject({ required: true });
    }
    expect(header('/v1/feeds/{feed}/records', 'post', 'SS-Fencing-Token')).toMatchObject({ required: false });
    expect(header('/v1/feeds/{feed}/streams/{id}/records', 'post', 'SS-Expected-Seq')).toBeDefined();
    expect(header('/v1/feeds/{feed}/records', 'get', 'Last-Event-ID')).toBeDefined();
    for (const name of ['Stream-Seq', 'Producer-Id', 'Producer-Epoch', 'Producer-Seq', 'Stream-Closed'])
      expect(header('/ds/v1/stream/{name}', 'post', name), name).toBeDefined();
    for (const name of ['Stream-TTL', 'Stream-Expires-At'])
      expect(header('/ds/v1/stream/{name}', 'put', name), name).toBeDefined();
    expect(header('/ds/v1/stream/{name}', 'get', 'If-None-Match')).toBeDefined();

    // Bodies and answers with their content types: JSON, NDJSON, event streams, text.
    expect(Object.keys(document.paths['/v1/feeds']!.post!.requestBody!.content)).toEqual(['application/json']);
    // A body the route also takes absent is optional; records and bodies with required fields are not.
    expect(document.paths['/v1/feeds/{feed}/lease']!.put!.requestBody).toMatchObject({ required: false });
    expect(document.paths['/v1/feeds/{feed}/lease']!.post!.requestBody).toMatchObject({ required: true });
    expect(document.paths['/v1/feeds/{feed}/streams/{id}/records']!.post!.requestBody).toMatchObject({
      required: true,
    });
    expect(Object.keys(document.paths['/v1/feeds/{feed}/records']!.post!.requestBody!.content)).toContain(
      'application/x-ndjson',
    );
    expect(Object.keys(document.paths['/v1/feeds/{feed}/records']!.get!.responses['200']!.content!)).toEqual([
      'application/x-ndjson',
      'text/event-stream',
    ]);
    expect(document.paths['/v1/feeds/{feed}/records']!.get!.responses['200']!.headers).toHaveProperty('SS-Head');
    expect(Object.keys(document.paths['/metrics']!.get!.responses['200']!.content!)).toEqual(['text/plain']);
    expect(document.paths['/health']!.get!.responses['200']!.content!['application/json']!.schema).toMatchObject({
      required: ['ok', 'version', 'kernels', 'storeFormat'],
    });
    const query = document.paths['/v1/feeds/{feed}/records']!.get!.parameters!.filter(
      (parameter) => parameter.in === 'query',
    ).map((parameter) => parameter.name);
    expect(query).toEqual(
      expect.arrayContaining(['after', 'upTo', 'mode', 'type', 'tag', 'filter', 'limit', 'plan', 'dedupScope', 'wait']),
    );
  });

  it('refuses input the schemas refuse with the codes the routes gave before they had schemas, and coerces no JSON body', async () => {
    const { url } = await startServer();
    expect((await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } })).status).toBe(201);
    const badName = await call(url, 'POST', '/v1/feeds', { body: { name: 5 } });
    expect([badName.status, badName.json.error.code]).toEqual([400, 'INVALID_NAME']);
    const noName = await call(url, 'POST', '/v1/feeds', { body: {} });
    expect([noName.status, noName.json.error.code]).toEqual([400, 'INVALID_NAME']);
    const badHolder = await call(url, 'POST', '/v1/feeds/f/lease', { body: { holder: 5 } });
    expect([badHolder.status, badHolder.json.error]).toEqual([
      400,
      expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'holder' }),
    ]);
    // Text is not a number, however it reads: the body gets no coercion.
    const textTtl = await call(url, 'POST', '/v1/feeds/f/lease', { body: { holder: 'a', ttlMs: '60000' } });
    expect([textTtl.status, textTtl.json.error]).toEqual([
      400,
      expect.objectContaining({ code: 'INVALID_ARGUMENT', field: 'ttlMs' }),
    ]);
    const lease = await call(url, 'POST', '/v1/feeds/f/lease', { body: { holder: 'a', ttlMs: null } });
    expect(lease.status).toBe(201);
    const noToken = await call(url, 'POST', '/v1/feeds/f/streams', { body: {} });
    expect([noToken.status, noToken.json.error]).toEqual([
      400,
      {
        code: 'INVALID_ARGUMENT',
        message: 'this request needs the SS-Fencing-Token header',
        header: 'SS-Fencing-Token',
      },
    ]);
    expect((await call(url, 'POST', '/v1/feeds/f/subscriptions', { body: { name: 's' } })).status).toBe(201);
    for (const cursor of ['x', 1.5, null]) {
      const moved = await call(url, 'POST', '/v1/feeds/f/subscriptions/s/advance', { body: { cursor } });
      expect([moved.status, moved.json.error.code], String(cursor)).toEqual([416, 'CURSOR_OUT_OF_RANGE']);
    }
    const notObject = await call(url, 'PUT', '/v1/feeds/f/retention', { body: [] });
    expect([notObject.status, notObject.json.error.code]).toEqual([400, 'INVALID_ARGUMENT']);
    // What the route names is looked up first, as before the schemas: a missing feed or stream wins over a bad body or header.
    const missingFeed = await call(url, 'POST', '/v1/feeds/nothing/lease', { body: { holder: 5 } });
    expect([missingFeed.status, missingFeed.json.error.code]).toEqual([404, 'FEED_NOT_FOUND']);
    const missingStream = await call(url, 'POST', '/v1/feeds/f/streams/nothing/seal');
    expect([missingStream.status, missingStream.json.error.code]).toEqual([404, 'STREAM_NOT_FOUND']);
    const missingSubscription = await call(url, 'POST', '/v1/feeds/f/subscriptions/nothing/advance', {
      body: { cursor: 'x' },
    });
    expect([missingSubscription.status, missingSubscription.json.error.code]).toEqual([404, 'SUBSCRIPTION_NOT_FOUND']);
    // A feed's info keeps every property the engine gives it.
    const info = await call(url, 'GET', '/v1/feeds/f');
    expect(Object.keys(info.json).sort()).toEqual(
      [
        'activeStream',
        'commits',
        'createdAt',
        'durability',
        'epoch',
        'head',
        'horizon',
        'lease',
        'lowMark',
        'lowPosition',
        'name',
        'records',
        'retention',
      ].sort(),
    );
  });

  it('generates a typed client that creates a feed, takes the lease, appends and reads the records back', async () => {
    const { url } = await startServer();
    const directory = temporaryDirectory();
    // The program resolves openapi-fetch, TypeScript and Node's types from the repository.
    fs.symlinkSync(path.join(repository, 'node_modules'), path.join(directory, 'node_modules'), 'dir');
    fs.writeFileSync(path.join(directory, 'api.d.ts'), astToString(await openapiTS((await documentOf(url)) as never)));
    fs.writeFileSync(path.join(directory, 'package.json'), JSON.stringify({ type: 'module' }));
    fs.writeFileSync(
      path.join(directory, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noUncheckedIndexedAccess: true,
          outDir: 'out',
          types: ['node'],
          lib: ['ES2022', 'DOM'],
        },
        files: ['main.ts'],
      }),
    );
    fs.writeFileSync(path.join(directory, 'main.ts'), generatedClientProgram);
    await run(process.execPath, [path.join(repository, 'node_modules/typescript/bin/tsc'), '-p', directory], {
      cwd: directory,
    });
    const { stdout } = await run(process.execPath, [path.join(directory, 'out/main.js'), url], { cwd: directory });
    const result = JSON.parse(stdout);
    expect(result.created).toMatchObject({ status: 201, name: 'generated' });
    expect(result.lease).toMatchObject({ status: 201, holder: 'generated-client', epoch: 1 });
    expect(result.appended).toMatchObject({ status: 201, commit: 1, records: 2, message: 'from a generated client' });
    expect(result.duplicate).toEqual({ status: 409, code: 'FEED_EXISTS' });
    expect(result.read.map((line: { payload: string; commit: number }) => [line.commit, line.payload])).toEqual([
      [1, 'one'],
      [1, 'two'],
    ]);
    expect(result.key).toMatchObject({ key: 'k', payload: 'two', commit: 1 });
  });
});

/**
 * A client program over the generated `paths` types. It must type-check as written: a route,
 * a status, a body or a header that goes missing from the document breaks its compilation.
 */
const generatedClientProgram = `
import createClient from 'openapi-fetch';
import type { paths } from './api.js';

type FeedInfo = paths['/v1/feeds']['post']['responses'][201]['content']['application/json'];
type Commit = paths['/v1/feeds/{feed}/records']['post']['responses'][201]['content']['application/json'];
type RecordLine = paths['/v1/feeds/{feed}/keys/{key}']['get']['responses'][200]['content']['application/json'];
type Conflict = paths['/v1/feeds']['post']['responses'][409]['content']['application/json'];
type FencingHeader = paths['/v1/feeds/{feed}/streams/{id}/records']['post']['parameters']['header']['SS-Fencing-Token'];

const client = createClient<paths>({ baseUrl: process.argv[2] });

const created = await client.POST('/v1/feeds', { body: { name: 'generated' } });
if (!created.data) throw new Error('create failed: ' + JSON.stringify(created.error));
const feed: FeedInfo = created.data;

const lease = await client.POST('/v1/feeds/{feed}/lease', { params: { path: { feed: feed.name } }, body: { holder: 'generated-client', ttlMs: 60000 } });
if (!lease.data) throw new Error('lease failed: ' + JSON.stringify(lease.error));
const token: FencingHeader = lease.data.token;

const appended = await client.POST('/v1/feeds/{feed}/records', {
  params: { path: { feed: feed.name }, query: { message: 'from a generated client' }, header: { 'SS-Fencing-Token': token } },
  body: '{"payload":"one"}\\n{"payload":"two","key":"k"}\\n',
  bodySerializer: (body: string) => body,
  headers: { 'content-type': 'application/x-ndjson' },
});
if (!appended.data) throw new Error('append failed: ' + JSON.stringify(appended.error));
const commit: Commit = appended.data;

const duplicate = await client.POST('/v1/feeds', { body: { name: 'generated' } });
const conflict: Conflict | undefined = duplicate.response.status === 409 ? (duplicate.error as Conflict) : undefined;

const read = await client.GET('/v1/feeds/{feed}/records', { params: { path: { feed: feed.name }, query: { after: '0' } }, parseAs: 'text' });
if (read.data === undefined) throw new Error('read failed');
const lines = read.data.split('\\n').filter((line) => line !== '').map((line) => JSON.parse(line) as RecordLine);

const key = await client.GET('/v1/feeds/{feed}/keys/{key}', { params: { path: { feed: feed.name, key: 'k' } } });
if (!key.data) throw new Error('key failed: ' + JSON.stringify(key.error));
const record: RecordLine = key.data;

console.log(JSON.stringify({
  created: { status: created.response.status, name: feed.name },
  lease: { status: lease.response.status, holder: lease.data.holder, epoch: lease.data.epoch },
  appended: { status: appended.response.status, commit: commit.commit, records: commit.records, message: commit.message },
  duplicate: { status: duplicate.response.status, code: conflict?.error.code },
  read: lines,
  key: record,
}));
`;
