/**
 * Bearer tokens from a token file, kept only as SHA-256 hashes, each allowed some operations on
 * some feeds. Without a token file the server is local-only and checks nothing.
 *
 * The file (JSON):
 * @example
 * {
 *   "tokens": [
 *     { "name": "ingest", "sha256": "9f86d0…", "feeds": ["orders", "audit.*"], "operations": ["write", "lease", "read"] },
 *     { "name": "ops", "sha256": "2c26b4…", "feeds": ["*"], "operations": ["admin", "read"] }
 *   ]
 * }
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import { StreamStackError } from '@streamstack/engine';

/** What a request does, for scoping tokens. */
export type Operation = 'read' | 'write' | 'lease' | 'admin';

const operations: readonly Operation[] = ['read', 'write', 'lease', 'admin'];

export interface TokenGrant {
  /** Names the token in logs and errors; the token itself is never logged. */
  readonly name: string;
  /** Hex SHA-256 of the token. */
  readonly sha256: string;
  /** Feed names, or prefixes ending in `*` (`*` alone: every feed). */
  readonly feeds: readonly string[];
  readonly operations: readonly Operation[];
}

/** The hex SHA-256 of a token, as the token file keeps it. */
export function hashToken(token: string): string {
  return crypto.createHash('sha256').update(token, 'utf8').digest('hex');
}

function invalid(reason: string): StreamStackError {
  return new StreamStackError('INVALID_ARGUMENT', `token file: ${reason}`);
}

/** Checks a parsed token file; bad entries are refused whole, so no token is half-configured. */
export function parseTokenFile(value: unknown): TokenGrant[] {
  const tokens = (value as { tokens?: unknown } | null)?.tokens;
  if (!Array.isArray(tokens)) throw invalid('expected {"tokens": [...]}');
  return tokens.map((entry: Record<string, unknown>, index) => {
    const name = typeof entry?.name === 'string' && entry.name !== '' ? entry.name : `#${index}`;
    if (typeof entry?.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(entry.sha256))
      throw invalid(`token ${name}: sha256 must be 64 lowercase hex digits`);
    if (!Array.isArray(entry.feeds) || entry.feeds.some((feed) => typeof feed !== 'string' || feed === ''))
      throw invalid(`token ${name}: feeds must be a list of names or prefixes`);
    if (!Array.isArray(entry.operations) || entry.operations.some((op) => !operations.includes(op as Operation))) {
      throw invalid(`token ${name}: operations must be a list of ${operations.join(', ')}`);
    }
    return { name, sha256: entry.sha256, feeds: entry.feeds as string[], operations: entry.operations as Operation[] };
  });
}

/** Reads and checks a token file. */
export function loadTokenFile(file: string): TokenGrant[] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new StreamStackError('INVALID_ARGUMENT', `cannot read the token file ${file}`, {
      cause: error,
      details: { file },
    });
  }
  try {
    return parseTokenFile(JSON.parse(text));
  } catch (error) {
    if (error instanceof StreamStackError) throw error;
    throw invalid(`${file} is not valid JSON`);
  }
}

/** True when `grant` covers feed `feed` (undefined: a request about no one feed). */
export function coversFeed(grant: TokenGrant, feed: string | undefined): boolean {
  if (feed === undefined) return grant.feeds.includes('*');
  return grant.feeds.some((pattern) =>
    pattern.endsWith('*') ? feed.startsWith(pattern.slice(0, -1)) : pattern === feed,
  );
}

/** Decides requests against a set of grants. */
export class Authorizer {
  private readonly byHash: Map<string, TokenGrant>;

  constructor(grants: readonly TokenGrant[]) {
    this.byHash = new Map(grants.map((grant) => [grant.sha256, grant]));
  }

  /**
   * The grant of the bearer token in `authorization`: `UNAUTHENTICATED` without a known token.
   * Tokens are compared by their hashes, so the lookup's timing tells nothing about a token.
   */
  authenticate(authorization: string | undefined): TokenGrant {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!match)
      throw new StreamStackError('UNAUTHENTICATED', 'this server needs a bearer token (Authorization: Bearer …)');
    const grant = this.byHash.get(hashToken(match[1]!));
    if (!grant) throw new StreamStackError('UNAUTHENTICATED', 'the bearer token is not known to this server');
    return grant;
  }

  /** `FORBIDDEN` unless `grant` allows `operation` on `feed`. */
  authorize(grant: TokenGrant, operation: Operation, feed: string | undefined): void {
    if (!grant.operations.includes(operation) || !coversFeed(grant, feed)) {
      throw new StreamStackError(
        'FORBIDDEN',
        `token ${grant.name} may not ${operation} ${feed === undefined ? 'across feeds' : `feed ${feed}`}`,
        {
          details: { operation, ...(feed === undefined ? {} : { feed }) },
        },
      );
    }
  }
}
