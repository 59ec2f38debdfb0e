/**
 * How the route schemas validate requests and serialize answers.
 *
 * - JSON bodies are checked without type coercion: fastify's default Ajv turns `"5000"` into
 *   5000 and `5` into `"5"`, which would make bodies the engine refuses today pass. Parameters,
 *   query strings and headers keep its `array` coercion (a single `type=a` is a list of one).
 * - Bodies of other types (NDJSON records, a Durable Stream's bytes) are parsed and checked as
 *   they arrive (ndjson.ts, body-gate.ts): their schemas only document the wire form.
 * - A property may name the code its bad value gets (`x-error-code`), so that a type the schema
 *   refuses gets the code the engine gave it before the schema existed (a feed name `INVALID_NAME`,
 *   a cursor `CURSOR_OUT_OF_RANGE`); see http-errors.ts.
 * - A refused request still looks up the feed its route names first, as every handler does, so
 *   that a request to a missing feed is `FEED_NOT_FOUND` (an invalid name `INVALID_NAME`)
 *   whatever else is wrong with it, as before the schemas.
 * - Answers are serialized with JSON.stringify, as they were before routes had response
 *   schemas: fast-json-stringify would drop properties a schema does not list and turn a value
 *   of another type into the listed one, so the schemas could change what a client reads.
 */
import { Ajv, type Options, type ValidateFunction } from 'ajv';
import type { FastifyInstance, FastifyRequest } from 'fastify';

/** The keyword a schema names a bad value's error code with. */
export const errorCodeKeyword = 'x-error-code';

function ajvWith(options: Options): Ajv {
  // `verbose` keeps the failing schema in each error, where the error code is read from.
  const ajv = new Ajv({ useDefaults: false, removeAdditional: false, allErrors: false, verbose: true, ...options });
  ajv.addKeyword({ keyword: errorCodeKeyword, schemaType: 'string' });
  return ajv;
}

/** Header names in lower case, as Node gives them (fastify does this only for its own compiler). */
function lowerCaseHeaders(schema: Record<string, unknown>): Record<string, unknown> {
  const properties = schema.properties as Record<string, unknown> | undefined;
  const required = schema.required as string[] | undefined;
  return {
    ...schema,
    ...(properties
      ? {
          properties: Object.fromEntries(
            Object.entries(properties).map(([name, value]) => [name.toLowerCase(), value]),
          ),
        }
      : {}),
    ...(required ? { required: required.map((name) => name.toLowerCase()) } : {}),
  };
}

const accept: ValidateFunction = Object.assign(() => true, { errors: null }) as unknown as ValidateFunction;

/**
 * Sets the server's validator and serializer compilers (before any route is added);
 * `lookUpFeed` looks up the feed a request names, if it names one.
 */
export function useRouteSchemaCompilers(
  app: FastifyInstance,
  lookUpFeed: (request: FastifyRequest) => Promise<unknown>,
): void {
  const bodies = ajvWith({ coerceTypes: false });
  const parameters = ajvWith({ coerceTypes: 'array' });
  app.setValidatorCompiler((definition) => {
    const { schema, httpPart: part } = definition;
    const contentType = (definition as { contentType?: string }).contentType;
    if (part === 'body')
      return contentType === undefined || contentType === 'application/json' ? bodies.compile(schema) : accept;
    return parameters.compile(part === 'headers' ? lowerCaseHeaders(schema as Record<string, unknown>) : schema);
  });
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  // A validation failure waits for the feed lookup: the route gets it as its own error after that.
  app.addHook('onRoute', (route) => {
    route.attachValidation = true;
  });
  // A callback hook: it runs for every request and waits only when validation failed.
  app.addHook('preHandler', (request, _reply, done) => {
    const failure = request.validationError;
    if (!failure) {
      done();
      return;
    }
    lookUpFeed(request).then(
      () => done(failure),
      (error: Error) => done(error),
    );
  });
}
