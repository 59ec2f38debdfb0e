/**
 * OpenAPI fragments for the routes (served by `@fastify/swagger` at `/openapi.json`). Query
 * parameters are declared as strings or string lists and parsed by request-params.ts, so a bad
 * value gets the same typed error with or without the schema.
 */

type ParameterKind = 'integer' | 'string' | 'list' | 'boolean' | 'json';

const descriptions: Record<string, string> = {
  after: 'a commit cursor: commits after this one',
  upTo: 'the last commit to read (default: the head)',
  limit: 'at most this many',
  mode: 'raw, dedup or latest',
  type: 'only records of this type (repeatable: any of them)',
  tag: 'only records with this tag (repeatable: all of them)',
  plan: 'auto, index or scan',
  dedupScope: 'history or window',
  wait: 'long-poll: wait up to this many seconds for a commit after `after`',
  message: 'the commit message',
  ifNoMatchType: 'condition: refuse if a record of this type (repeatable: any of them) lies after afterPosition',
  ifNoMatchTag: 'condition: … with this tag (repeatable: all of them)',
  afterPosition: 'condition: only records after this position count (default 0)',
  fromSeq: 'from this seq on',
  filter: 'a RecordFilter as JSON ({"items": [{"types", "tags"}, …]} or one item), instead of type and tag',
  condition: 'an AppendCondition as JSON ({"failIfMatch", "after"}), instead of the ifNoMatch parameters',
  asOf: 'as of this commit',
  max: 'stop before passing this many records (whole commits)',
};

/** A querystring schema: every parameter optional, described, its kind as the docs give it. */
export function querySchema(parameters: Record<string, ParameterKind>) {
  return {
    type: 'object',
    properties: Object.fromEntries(
      Object.entries(parameters).map(([name, kind]) => [
        name,
        kind === 'list'
          ? { type: 'array', items: { type: 'string' }, description: descriptions[name] }
          : { type: 'string', description: `${descriptions[name] ?? name}${kind === 'string' ? '' : ` (${kind})`}` },
      ]),
    ),
  };
}

/** A route's OpenAPI summary and tag. */
export function describe(tag: string, summary: string, extra: Record<string, unknown> = {}) {
  return { tags: [tag], summary, ...extra };
}

export const conditionParameters = { ifNoMatchType: 'list', ifNoMatchTag: 'list', afterPosition: 'integer', condition: 'json' } as const;
