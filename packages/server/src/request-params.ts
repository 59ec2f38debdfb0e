/**
 * Query parameters and headers as the engine's options: integers, repeatable filters, read
 * modes and append conditions, mirroring the CLI's flags. A malformed value is refused with
 * `INVALID_ARGUMENT` naming the parameter, before the engine is asked anything.
 */
import { type AppendCondition, type Plan, StreamStackError } from '@streamstack/engine';

export type QueryValue = string | string[] | undefined;
export type QueryParams = Record<string, QueryValue>;

/** The single value of a parameter; a repeated one is refused. */
export function single(query: QueryParams, name: string): string | undefined {
  const value = query[name];
  if (Array.isArray(value))
    throw new StreamStackError('INVALID_ARGUMENT', `${name} is given more than once`, { details: { parameter: name } });
  return value;
}

/** Every value of a repeatable parameter (`type=a&type=b`). */
export function many(query: QueryParams, name: string): string[] {
  const value = query[name];
  return value === undefined ? [] : Array.isArray(value) ? value : [value];
}

/** A non-negative integer, as the CLI's integer flags take it (`wait`, `Last-Event-ID`). */
export function integerText(text: string | undefined, name: string): number | undefined {
  if (text === undefined) return undefined;
  const parsed = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(parsed)) {
    throw new StreamStackError('INVALID_ARGUMENT', `${name} must be a non-negative integer`, {
      details: { parameter: name, value: text },
    });
  }
  return parsed;
}

/**
 * A number handed to the engine as it is, so that a cursor of -1 or 1.5 fails with the code
 * the embedded API gives it (`CURSOR_OUT_OF_RANGE`, say); only text that is no number at all is
 * refused here.
 */
export function numberText(text: string | undefined, name: string): number | undefined {
  if (text === undefined) return undefined;
  const parsed = Number(text);
  if (text.trim() === '' || !Number.isFinite(parsed)) {
    throw new StreamStackError('INVALID_ARGUMENT', `${name} must be a number`, {
      details: { parameter: name, value: text },
    });
  }
  return parsed;
}

/** A numeric parameter, for the engine to check (see `numberText`). */
export function integer(query: QueryParams, name: string): number | undefined {
  return numberText(single(query, name), name);
}

/** One of `choices`, or undefined when absent. */
export function choice<T extends string>(query: QueryParams, name: string, choices: readonly T[]): T | undefined {
  const value = single(query, name);
  if (value === undefined) return undefined;
  if (!(choices as readonly string[]).includes(value)) {
    throw new StreamStackError('INVALID_ARGUMENT', `${name} must be one of ${choices.join(', ')}`, {
      details: { parameter: name, value },
    });
  }
  return value as T;
}

export const plans: readonly Plan[] = ['auto', 'index', 'scan'];

/** A boolean parameter: `true` or `false`. */
export function flag(query: QueryParams, name: string): boolean | undefined {
  const value = choice(query, name, ['true', 'false'] as const);
  return value === undefined ? undefined : value === 'true';
}

/**
 * The append condition of `ifNoMatchType`, `ifNoMatchTag` and `afterPosition`, as the CLI's
 * `--if-no-match-type`, `--if-no-match-tag` and `--after-position` give it; undefined when no
 * type or tag is named.
 */
export function conditionOf(query: QueryParams): AppendCondition | undefined {
  const json = jsonParameter(query, 'condition');
  if (json !== undefined) {
    if (query.ifNoMatchType !== undefined || query.ifNoMatchTag !== undefined || query.afterPosition !== undefined) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        'condition is given as JSON or as ifNoMatchType/ifNoMatchTag/afterPosition, not both',
        { details: { parameter: 'condition' } },
      );
    }
    return json as AppendCondition;
  }
  const types = many(query, 'ifNoMatchType');
  const tags = many(query, 'ifNoMatchTag');
  const after = integer(query, 'afterPosition');
  if (types.length === 0 && tags.length === 0) {
    if (after !== undefined)
      throw new StreamStackError('INVALID_ARGUMENT', 'afterPosition needs ifNoMatchType or ifNoMatchTag', {
        details: { parameter: 'afterPosition' },
      });
    return undefined;
  }
  return {
    failIfMatch: { items: [{ ...(types.length > 0 ? { types } : {}), ...(tags.length > 0 ? { tags } : {}) }] },
    after: after ?? 0,
  };
}

/**
 * A parameter holding JSON (`filter`, `condition`): for what the flag-like parameters cannot say,
 * such as a query of several items. The engine checks the value itself.
 */
export function jsonParameter(query: QueryParams, name: string): unknown {
  const text = single(query, name);
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new StreamStackError('INVALID_ARGUMENT', `${name} must be JSON`, { details: { parameter: name } });
  }
}

/** The fencing token header, required. */
export function fencingToken(headers: Record<string, string | string[] | undefined>): string {
  const token = optionalFencingToken(headers);
  if (token === undefined)
    throw new StreamStackError('INVALID_ARGUMENT', 'this request needs the SS-Fencing-Token header', {
      details: { header: 'SS-Fencing-Token' },
    });
  return token;
}

/** The fencing token header, when there is one. */
export function optionalFencingToken(headers: Record<string, string | string[] | undefined>): string | undefined {
  const value = headers['ss-fencing-token'];
  if (Array.isArray(value)) throw new StreamStackError('INVALID_ARGUMENT', 'SS-Fencing-Token is given more than once');
  return value === undefined || value === '' ? undefined : value;
}

/** `SS-Expected-Seq`, when given. */
export function expectedSeq(headers: Record<string, string | string[] | undefined>): number | undefined {
  const value = headers['ss-expected-seq'];
  if (Array.isArray(value)) throw new StreamStackError('INVALID_ARGUMENT', 'SS-Expected-Seq is given more than once');
  return numberText(value, 'SS-Expected-Seq');
}
