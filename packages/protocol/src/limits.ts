/** The bounds of the record line format, which the engine's `limits` lists with its own. */

/**
 * Deepest nesting of arrays and objects in the JSON payload of a record line (the command line,
 * HTTP), in levels. The payload is stored as its JSON text, and JSON.stringify recurses once per
 * level: it runs out of stack at a few thousand levels on Node's default stack, so a bound well
 * below that turns an abusive document into a typed refusal instead of a crash. Real documents
 * stay far shallower.
 */
export const jsonNestingDepthMax = 512;
