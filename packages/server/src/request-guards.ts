/**
 * What keeps a web page from driving the server: the `Host` check, the `Origin` check and CORS.
 *
 * A server without tokens is local-only, but a browser on the same machine is local too. A page
 * can send a simple (unpreflighted) request to 127.0.0.1 from any site, and with DNS rebinding
 * it can make its own name point at 127.0.0.1 and read the answers as same-origin. So:
 *
 * - `Host` must name this server: a loopback name (`localhost`, `*.localhost`), an IP literal
 *   (a rebinding page's `Host` is always its own DNS name, never an address), the name the
 *   server listens on, or a name given in `allowedHosts` (`--allow-host`). Anything else is 403
 *   `FORBIDDEN` with `reason: "host"`, before routing, on every route.
 * - A request carrying an `Origin` that is neither this server's own nor one given in
 *   `corsOrigins` (`--cors`) is refused with 403 `FORBIDDEN`, `reason: "origin"`, unless it is a
 *   GET or HEAD (which change nothing, and whose answer the page cannot read without CORS
 *   headers). That is what stops a cross-site form or `text/plain` POST, which a browser sends
 *   without a preflight.
 * - CORS headers are sent only to an origin in `corsOrigins` (`*` there allows every origin, as
 *   the server answered before this check existed); preflights from any other origin get 403.
 */
import net from 'node:net';
import { StreamStackError } from '@streamstack/engine';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** Settings of the checks (ServerOptions.allowedHosts and .corsOrigins). */
export interface RequestGuardSettings {
  /** Host names (`name` or `name:port`) accepted besides loopback names and IP literals; `*` accepts any. */
  readonly allowedHosts: readonly string[];
  /** Origins (`scheme://host[:port]`) that may call from a web page; `*` allows every origin. */
  readonly corsOrigins: readonly string[];
}

/** Headers a page may read from an answer: the server's own and the Durable Streams protocol's. */
const exposedHeaders = [
  'SS-Head',
  'Stream-Next-Offset',
  'Stream-Cursor',
  'Stream-Up-To-Date',
  'Stream-Closed',
  'Stream-TTL',
  'Stream-Expires-At',
  'Producer-Epoch',
  'Producer-Seq',
  'Producer-Expected-Seq',
  'Producer-Received-Seq',
  'Stream-SSE-Data-Encoding',
  'ETag',
  'Location',
  'Retry-After',
].join(', ');

/** What a preflight allows: every method the routes serve and every header they read. */
const preflightHeaders: Record<string, string> = {
  'access-control-allow-methods': 'GET, HEAD, PUT, POST, DELETE, OPTIONS',
  'access-control-allow-headers': [
    'Content-Type',
    'Authorization',
    'Accept',
    'Last-Event-ID',
    'SS-Fencing-Token',
    'SS-Expected-Seq',
    'If-None-Match',
    'Stream-Seq',
    'Stream-TTL',
    'Stream-Expires-At',
    'Stream-Closed',
    'Producer-Id',
    'Producer-Epoch',
    'Producer-Seq',
  ].join(', '),
  'access-control-max-age': '86400',
};

/** Methods that change nothing: a disallowed origin may send them (and cannot read the answer). */
const safeMethods = new Set(['GET', 'HEAD']);

/** The host name of a `Host` header, lower-case, without its port (an IPv6 literal keeps its brackets). */
export function hostNameOf(host: string): string {
  const lower = host.trim().toLowerCase();
  if (lower.startsWith('[')) return lower.slice(0, lower.indexOf(']') + 1);
  const colon = lower.lastIndexOf(':');
  return colon === -1 ? lower : lower.slice(0, colon);
}

/** True for a name that can only mean this machine or an address: never a rebinding page's. */
function isLoopbackOrAddress(name: string): boolean {
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  const bare = name.startsWith('[') && name.endsWith(']') ? name.slice(1, -1) : name;
  return net.isIP(bare) !== 0;
}

export class RequestGuards {
  private readonly hosts: Set<string>;
  private readonly anyHost: boolean;
  private readonly origins: Set<string>;
  private readonly anyOrigin: boolean;

  constructor(settings: RequestGuardSettings) {
    this.hosts = new Set(settings.allowedHosts.map((host) => host.trim().toLowerCase()));
    this.anyHost = this.hosts.has('*');
    this.origins = new Set(settings.corsOrigins.map((origin) => origin.trim().toLowerCase().replace(/\/$/, '')));
    this.anyOrigin = this.origins.has('*');
  }

  /** True when some origin may call from a web page (the Durable Streams route's CORP header follows). */
  get corsEnabled(): boolean {
    return this.origins.size > 0;
  }

  /** Accepts `name` (the server's `--host`, when it is a name) as this server's too. */
  allowHost(name: string): void {
    this.hosts.add(name.trim().toLowerCase());
  }

  /** `FORBIDDEN` unless the request's `Host` names this server. */
  checkHost(request: FastifyRequest): void {
    const host = request.headers.host;
    // HTTP/1.0 has no Host; a browser always sends one, so a request without it is no page's.
    if (host === undefined || this.anyHost) return;
    const name = hostNameOf(host);
    if (isLoopbackOrAddress(name) || this.hosts.has(name) || this.hosts.has(host.trim().toLowerCase())) return;
    throw new StreamStackError(
      'FORBIDDEN',
      `Host ${host.slice(0, 256)} is not this server's (streamstack serve --allow-host NAME accepts it)`,
      {
        details: { reason: 'host', host: host.slice(0, 256) },
      },
    );
  }

  /**
   * Checks the request's `Origin` and sets the CORS headers an allowed one gets; `FORBIDDEN` for
   * a disallowed origin on a method that changes something. Answers a preflight itself: true
   * when it did (the caller sends nothing more).
   */
  checkOrigin(request: FastifyRequest, reply: FastifyReply): boolean {
    const origin = request.headers.origin;
    const preflight = request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined;
    if (origin === undefined) return false;
    const listed = this.anyOrigin || this.origins.has(origin.trim().toLowerCase());
    if (listed) {
      // Set on the raw response, so that answers written past fastify (SSE) carry them too.
      reply.raw.setHeader('access-control-allow-origin', this.anyOrigin ? '*' : origin);
      reply.raw.setHeader('access-control-expose-headers', exposedHeaders);
      if (!this.anyOrigin) reply.raw.setHeader('vary', 'Origin');
      if (preflight) {
        reply.code(204).headers(preflightHeaders).send();
        return true;
      }
      return false;
    }
    // A page of this server's own origin needs no CORS; the Host check already vouched for it.
    const host = request.headers.host?.trim().toLowerCase();
    const own =
      host !== undefined && (origin.toLowerCase() === `http://${host}` || origin.toLowerCase() === `https://${host}`);
    if (own && !preflight) return false;
    if (!preflight && safeMethods.has(request.method)) return false;
    throw new StreamStackError(
      'FORBIDDEN',
      `Origin ${origin.slice(0, 256)} may not call this server (streamstack serve --cors ORIGIN allows it)`,
      {
        details: { reason: 'origin', origin: origin.slice(0, 256) },
      },
    );
  }
}
