/**
 * A Durable Streams subscription's configuration (docs/http.md, subscriptions on the
 * compatibility route): the PUT body checked and normalised, the webhook URL checked against
 * server-side request forgery, and the glob that links streams to it.
 *
 * The protocol's glob: `*` matches one path segment, `**` zero or more, anything else itself.
 */
import net from 'node:net';
import { StreamStackError } from '@streamstack/engine';
import {
  subscriptionLeaseMsDefault,
  subscriptionLeaseMsMax,
  subscriptionLeaseMsMin,
  subscriptionStreamsMax,
  subscriptionTextCharactersMax,
  webhookRetryJitterRatio,
  webhookRetryMsMax,
  webhookRetryMsMin,
} from './limits.js';

export type SubscriptionType = 'webhook' | 'pull-wake';

/** A subscription's configuration, normalised: two equal ones are the same subscription. */
export interface SubscriptionConfig {
  readonly type: SubscriptionType;
  readonly pattern: string | null;
  /** Explicit stream paths, sorted, without repeats. */
  readonly streams: readonly string[];
  readonly webhookUrl: string | null;
  readonly wakeStream: string | null;
  readonly leaseTtlMs: number;
  readonly description: string | null;
}

function invalid(message: string, details: Record<string, unknown> = {}): StreamStackError {
  return new StreamStackError('INVALID_ARGUMENT', message, { details: { field: 'body', ...details } });
}

function text(value: unknown, field: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value.length === 0 || value.length > subscriptionTextCharactersMax) {
    throw invalid(`${field} is a string of 1 to ${subscriptionTextCharactersMax} characters`, { field });
  }
  return value;
}

/** Explicit stream paths, sorted and without repeats. */
export function streamPaths(value: unknown, field = 'streams'): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.length > subscriptionStreamsMax) {
    throw invalid(`${field} is an array of at most ${subscriptionStreamsMax} stream paths`, { field });
  }
  return [...new Set(value.map((path) => text(path, field)!))].sort();
}

/** The configuration a PUT body asks for; `INVALID_ARGUMENT` or `WEBHOOK_URL_REJECTED` when it is not one. */
export function subscriptionConfigOf(body: unknown): SubscriptionConfig {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalid('the body is a JSON object');
  const fields = body as Record<string, unknown>;
  const type = fields.type;
  if (type !== 'webhook' && type !== 'pull-wake') throw invalid('type is "webhook" or "pull-wake"', { field: 'type' });
  const pattern = text(fields.pattern, 'pattern');
  const streams = streamPaths(fields.streams);
  if (pattern === null && streams.length === 0) throw invalid('give a pattern, streams, or both', { field: 'pattern' });
  const webhook = fields.webhook as { url?: unknown } | undefined;
  const webhookUrl = type === 'webhook' ? checkWebhookUrl(webhook?.url) : null;
  const wakeStream = type === 'pull-wake' ? text(fields.wake_stream, 'wake_stream') : null;
  if (type === 'pull-wake' && wakeStream === null)
    throw invalid('a pull-wake subscription needs wake_stream', { field: 'wake_stream' });
  const lease = fields.lease_ttl_ms ?? subscriptionLeaseMsDefault;
  if (
    !Number.isSafeInteger(lease) ||
    (lease as number) < subscriptionLeaseMsMin ||
    (lease as number) > subscriptionLeaseMsMax
  ) {
    throw invalid(`lease_ttl_ms is an integer from ${subscriptionLeaseMsMin} to ${subscriptionLeaseMsMax}`, {
      field: 'lease_ttl_ms',
    });
  }
  return {
    type,
    pattern,
    streams,
    webhookUrl,
    wakeStream,
    leaseTtlMs: lease as number,
    description: text(fields.description, 'description'),
  };
}

/** True when two configurations are the same subscription (the protocol's idempotent re-confirmation). */
export function sameSubscription(a: SubscriptionConfig, b: SubscriptionConfig): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * A webhook URL, checked: `https`, or `http` to `localhost` or `127.0.0.x` (the protocol's
 * development exception); never an address of a private, loopback, link-local or otherwise
 * local network outside that exception (`WEBHOOK_URL_REJECTED`). A host name is not resolved
 * here: one that resolves to such an address is not caught.
 */
export function checkWebhookUrl(value: unknown): string {
  let url: URL;
  try {
    url = new URL(String(value));
  } catch {
    throw rejected(value, 'it is not an absolute URL');
  }
  if (value === undefined || typeof value !== 'string') throw rejected(value, 'webhook.url is missing');
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const development = host === 'localhost' || /^127\.0\.0\.\d{1,3}$/.test(host);
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && development)) {
    throw rejected(value, 'it must use https (http only to localhost or 127.0.0.x)');
  }
  if (url.username !== '' || url.password !== '') throw rejected(value, 'it must not carry credentials');
  if (!development && (host.endsWith('.localhost') || isLocalAddress(host))) {
    throw rejected(value, 'it names a private, loopback or link-local address');
  }
  return url.toString();
}

function rejected(value: unknown, why: string): StreamStackError {
  return new StreamStackError('WEBHOOK_URL_REJECTED', `webhook URL refused: ${why}`, {
    details: { field: 'webhook.url', value: String(value).slice(0, subscriptionTextCharactersMax) },
  });
}

/** True for an IP address of a network that is not the public internet. */
function isLocalAddress(host: string): boolean {
  if (net.isIPv4(host)) {
    const [a, b] = host.split('.').map(Number) as [number, number];
    return (
      a === 0 ||
      a === 10 ||
      a === 127 ||
      (a === 100 && b >= 64 && b <= 127) ||
      (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168) ||
      a >= 224
    );
  }
  if (net.isIPv6(host)) {
    // An IPv4-mapped address (URL writes it in hex: ::ffff:a00:1 for 10.0.0.1) is its IPv4 one.
    const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(host);
    if (dotted) return isLocalAddress(dotted[1]!);
    const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
    if (hex) {
      const high = Number.parseInt(hex[1]!, 16);
      const low = Number.parseInt(hex[2]!, 16);
      return isLocalAddress(`${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`);
    }
    return host === '::' || host === '::1' || /^f[cd]/.test(host) || /^fe[89ab]/.test(host) || /^ff/.test(host);
  }
  return false;
}

/** True when `path` (a stream-root-relative stream path) matches the glob `pattern`. */
export function globMatches(pattern: string, path: string): boolean {
  const want = pattern.split('/');
  const have = path.split('/');
  const match = (i: number, j: number): boolean => {
    if (i === want.length) return j === have.length;
    if (want[i] === '**') return match(i + 1, j) || (j < have.length && match(i, j + 1));
    if (j === have.length) return false;
    return (want[i] === '*' || want[i] === have[j]) && match(i + 1, j + 1);
  };
  return match(0, 0);
}

/** A pattern never links the subscription's own wake stream: each wake would wake it again. */
export function linkable(config: SubscriptionConfig, name: string): boolean {
  return name !== config.wakeStream;
}

/** The wait before retry `attempts` of a failed delivery: doubling from 1 s, at most 60 s, ±20%. */
export function retryDelayMs(attempts: number, random: () => number = Math.random): number {
  const base = Math.min(webhookRetryMsMax, webhookRetryMsMin * 2 ** Math.min(attempts - 1, 16));
  return Math.round(base * (1 + webhookRetryJitterRatio * (2 * random() - 1)));
}
