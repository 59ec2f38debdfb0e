/** URL paths and query encodings shared by the remote classes. */
import type { AppendCondition, ReadOptions } from '@streamstack/engine';
import type { QueryInput } from './transport.js';

export function feedPath(feed: string): string {
  return `/v1/feeds/${encodeURIComponent(feed)}`;
}

/** A condition as the server's JSON `condition` parameter, which says all an embedded one can. */
export function conditionQuery(condition: AppendCondition | undefined): QueryInput {
  return condition === undefined ? {} : { condition: JSON.stringify(condition) };
}

/** Read options as query parameters; the filter goes as JSON, so a query of several items fits. */
export function readQuery(options: ReadOptions): QueryInput {
  return {
    after: options.after,
    upTo: options.upTo,
    mode: options.mode,
    dedupScope: options.dedupScope,
    plan: options.plan,
    limit: options.limit,
    ...(options.filter === undefined ? {} : { filter: JSON.stringify(options.filter) }),
  };
}
