/**
 * A client of etcd's v3 JSON gateway (`/v3/kv/*`, `/v3/lease/*`, `/v3/watch`) over Node's own
 * `fetch`. The gateway is part of every etcd server since 3.4, speaks the same transactions as
 * gRPC, and needs no client library: the `etcd3` package would bring gRPC and protobuf runtimes
 * for the five calls a lease needs, and is thinly maintained. Keys and values are UTF-8 strings
 * here (the gateway carries them as base64); etcd's 64-bit numbers (revisions, lease ids) stay
 * decimal strings, since they pass 2^53.
 *
 * @example
 * const etcd = new EtcdClient(['http://127.0.0.1:2379']);
 * const { id } = await etcd.leaseGrant(10);
 * await etcd.txn([{ key: 'k', version: '0' }], [{ put: { key: 'k', value: 'v', lease: id } }]);
 */
import { StreamStackError } from '../errors.js';
import { etcdRequestMsMax } from '../limits.js';

/** A key as etcd holds it. */
export interface EtcdKeyValue {
  readonly key: string;
  readonly value: string;
  /** The revision of the key's last change. */
  readonly modRevision: string;
  /** The lease the key is attached to ("0": none). */
  readonly lease: string;
}

/** One comparison of a transaction: a key's version (`"0"`: absent), value or last revision equals this. */
export type EtcdCompare =
  | { readonly key: string; readonly version: string }
  | { readonly key: string; readonly value: string }
  | { readonly key: string; readonly modRevision: string };

/** One operation of a transaction. */
export type EtcdOperation =
  | { readonly put: { readonly key: string; readonly value: string; readonly lease?: string } }
  | { readonly delete: { readonly key: string } }
  | { readonly range: { readonly key: string } };

/** A transaction's outcome: which branch ran, and what each range of it found (`undefined`: absent). */
export interface EtcdTxnResult {
  readonly succeeded: boolean;
  readonly revision: string;
  readonly ranges: (EtcdKeyValue | undefined)[];
}

/** A change the watch reports. */
export interface EtcdEvent {
  readonly type: 'put' | 'delete';
  readonly key: string;
  /** The new value of a put. */
  readonly value?: string;
  readonly modRevision: string;
}

interface RawKeyValue {
  key?: string;
  value?: string;
  mod_revision?: string;
  lease?: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function base64(text: string): string {
  return Buffer.from(encoder.encode(text)).toString('base64');
}

function text(encoded: string | undefined): string {
  return encoded === undefined ? '' : decoder.decode(Buffer.from(encoded, 'base64'));
}

function keyValue(raw: RawKeyValue): EtcdKeyValue {
  return {
    key: text(raw.key),
    value: text(raw.value),
    modRevision: raw.mod_revision ?? '0',
    lease: raw.lease ?? '0',
  };
}

/**
 * The end of the range of every key starting with `prefix` (etcd's `range_end`): the prefix with
 * its last byte raised by one.
 */
export function prefixEnd(prefix: string): string {
  const bytes = Buffer.from(encoder.encode(prefix));
  bytes[bytes.length - 1] = (bytes.at(-1) ?? 0) + 1;
  return bytes.toString('base64');
}

function compareOf(compare: EtcdCompare): Record<string, string> {
  const key = base64(compare.key);
  if ('version' in compare) return { key, target: 'VERSION', result: 'EQUAL', version: compare.version };
  if ('value' in compare) return { key, target: 'VALUE', result: 'EQUAL', value: base64(compare.value) };
  return { key, target: 'MOD', result: 'EQUAL', mod_revision: compare.modRevision };
}

function operationOf(operation: EtcdOperation): Record<string, unknown> {
  if ('put' in operation) {
    const { key, value, lease } = operation.put;
    return { request_put: { key: base64(key), value: base64(value), ...(lease ? { lease } : {}) } };
  }
  if ('delete' in operation) return { request_delete_range: { key: base64(operation.delete.key) } };
  return { request_range: { key: base64(operation.range.key) } };
}

export class EtcdClient {
  /** The endpoint that answered last: requests go there first. */
  private preferred = 0;

  constructor(readonly endpoints: readonly string[]) {
    if (endpoints.length === 0) throw new StreamStackError('INVALID_ARGUMENT', 'etcd needs at least one endpoint');
  }

  /**
   * POSTs `body` to `path`, at each endpoint in turn until one answers: a cluster member that is
   * down is skipped. A refusal by etcd itself (4xx, or an error in the answer) is not retried.
   * A whole answer (`stream` false) must arrive within `etcdRequestMsMax`; a stream (`stream`
   * true) must begin within it, then lasts until `signal` aborts.
   */
  private async post(
    path: string,
    body: unknown,
    stream: boolean,
    signal?: AbortSignal,
  ): Promise<{ status: number; text: string; response: Response }> {
    let failure: unknown;
    for (let tried = 0; tried < this.endpoints.length; tried++) {
      const index = (this.preferred + tried) % this.endpoints.length;
      const endpoint = this.endpoints[index] as string;
      const controller = new AbortController();
      const timer = setTimeout(
        () => controller.abort(new Error(`no answer within ${etcdRequestMsMax} ms`)),
        etcdRequestMsMax,
      );
      const abort = () => controller.abort(signal?.reason);
      signal?.addEventListener('abort', abort, { once: true });
      try {
        const response = await fetch(new URL(path, endpoint), {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
          signal: controller.signal,
        });
        const answer = stream && response.ok ? '' : await response.text();
        if (response.status >= 500) {
          failure = new Error(`${endpoint} answered ${response.status}: ${answer}`);
          continue;
        }
        this.preferred = index;
        return { status: response.status, text: answer, response };
      } catch (error) {
        if (signal?.aborted) throw error;
        failure = error;
      } finally {
        clearTimeout(timer);
        if (!stream) signal?.removeEventListener('abort', abort);
      }
    }
    throw new StreamStackError(
      'UNAVAILABLE',
      `etcd did not answer at ${this.endpoints.join(', ')}: ${failure instanceof Error ? failure.message : String(failure)}`,
      { cause: failure, details: { service: 'etcd' } },
    );
  }

  private async call<T>(path: string, body: unknown): Promise<T> {
    const { status, text: answerText } = await this.post(path, body, false);
    let answer: (T & { message?: string }) | undefined;
    try {
      answer = JSON.parse(answerText) as T & { message?: string };
    } catch {
      answer = undefined;
    }
    if (status >= 300 || answer === undefined) {
      throw new StreamStackError('UNAVAILABLE', `etcd refused ${path}: ${answer?.message ?? `status ${status}`}`, {
        details: { service: 'etcd', status },
      });
    }
    return answer;
  }

  /** The key `key` and the store's revision; `kv` undefined when the key is absent. */
  async get(key: string): Promise<{ kv: EtcdKeyValue | undefined; revision: string }> {
    const answer = await this.call<{ kvs?: RawKeyValue[]; header: { revision: string } }>('/v3/kv/range', {
      key: base64(key),
    });
    const first = answer.kvs?.[0];
    return { kv: first && keyValue(first), revision: answer.header.revision };
  }

  /** Every key starting with `prefix`, and the revision they were read at. */
  async getPrefix(prefix: string): Promise<{ kvs: EtcdKeyValue[]; revision: string }> {
    const answer = await this.call<{ kvs?: RawKeyValue[]; header: { revision: string } }>('/v3/kv/range', {
      key: base64(prefix),
      range_end: prefixEnd(prefix),
    });
    return { kvs: (answer.kvs ?? []).map(keyValue), revision: answer.header.revision };
  }

  /** One transaction: if every comparison holds, `success` runs, else `failure`; atomically. */
  async txn(
    compares: readonly EtcdCompare[],
    success: readonly EtcdOperation[],
    failure: readonly EtcdOperation[] = [],
  ): Promise<EtcdTxnResult> {
    const answer = await this.call<{
      succeeded?: boolean;
      header: { revision: string };
      responses?: { response_range?: { kvs?: RawKeyValue[] } }[];
    }>('/v3/kv/txn', {
      compare: compares.map(compareOf),
      success: success.map(operationOf),
      failure: failure.map(operationOf),
    });
    const ranges: (EtcdKeyValue | undefined)[] = [];
    for (const response of answer.responses ?? []) {
      if (!response.response_range) continue;
      const first = response.response_range.kvs?.[0];
      ranges.push(first && keyValue(first));
    }
    return { succeeded: answer.succeeded === true, revision: answer.header.revision, ranges };
  }

  /** A new lease of `ttlSeconds` (etcd may raise it to its minimum); its id and granted TTL. */
  async leaseGrant(ttlSeconds: number): Promise<{ id: string; ttlSeconds: number }> {
    const answer = await this.call<{ ID: string; TTL: string; error?: string }>('/v3/lease/grant', {
      TTL: ttlSeconds,
    });
    if (answer.error) throw new StreamStackError('UNAVAILABLE', `etcd granted no lease: ${answer.error}`);
    return { id: answer.ID, ttlSeconds: Number(answer.TTL) };
  }

  /** Renews lease `id` for its TTL; the TTL it now has, 0 when the lease is gone (expired or revoked). */
  async leaseKeepAlive(id: string): Promise<number> {
    const answer = await this.call<{ result?: { TTL?: string } }>('/v3/lease/keepalive', { ID: id });
    return Number(answer.result?.TTL ?? 0);
  }

  /** Ends lease `id` now, deleting the keys attached to it; a lease already gone is no error. */
  async leaseRevoke(id: string): Promise<void> {
    const { status } = await this.post('/v3/lease/revoke', { ID: id }, false);
    // A lease that expired meanwhile is answered 404 ("requested lease not found"): revoked all the same.
    if (status >= 300 && status !== 404) {
      throw new StreamStackError('UNAVAILABLE', `etcd refused to revoke lease ${id}: status ${status}`, {
        details: { service: 'etcd', status },
      });
    }
  }

  /**
   * Watches every key starting with `prefix` from revision `fromRevision` on, calling `onEvents`
   * with each batch of changes in order, until `signal` aborts or the stream breaks (the promise
   * then rejects: the caller reads the keys again and watches anew). A watch whose start was
   * compacted away ends at once: its changes are lost, so the caller must read again.
   */
  async watch(
    prefix: string,
    fromRevision: string,
    onEvents: (events: EtcdEvent[]) => void,
    signal: AbortSignal,
  ): Promise<void> {
    const { response, text: refusal } = await this.post(
      '/v3/watch',
      { create_request: { key: base64(prefix), range_end: prefixEnd(prefix), start_revision: fromRevision } },
      true,
      signal,
    );
    if (!response.ok || !response.body) throw new Error(`etcd refused the watch: ${response.status} ${refusal}`);
    let pending = '';
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      pending += decoder.decode(chunk, { stream: true });
      let end = pending.indexOf('\n');
      while (end >= 0) {
        const line = pending.slice(0, end).trim();
        pending = pending.slice(end + 1);
        end = pending.indexOf('\n');
        if (line === '') continue;
        const message = JSON.parse(line) as {
          result?: {
            canceled?: boolean;
            compact_revision?: string;
            events?: { type?: string; kv: RawKeyValue }[];
          };
          error?: { message?: string };
        };
        const result = message.result;
        if (message.error || !result) throw new Error(`etcd ended the watch: ${message.error?.message ?? line}`);
        if (result.canceled || (result.compact_revision && result.compact_revision !== '0')) {
          throw new Error(`etcd ended the watch (compacted to ${result.compact_revision ?? '?'})`);
        }
        if (result.events && result.events.length > 0) {
          onEvents(
            result.events.map((event) => ({
              type: event.type === 'DELETE' ? 'delete' : 'put',
              key: text(event.kv.key),
              ...(event.type === 'DELETE' ? {} : { value: text(event.kv.value) }),
              modRevision: event.kv.mod_revision ?? '0',
            })),
          );
        }
      }
    }
    throw new Error('the watch stream ended');
  }
}
