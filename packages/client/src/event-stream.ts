/**
 * Reads a `text/event-stream` body into events (the SSE format: `field: value` lines, blank-line
 * separated). Only the fields the server sends matter here: `id`, `event` and `data`.
 */
export interface ServerEvent {
  readonly id?: string;
  readonly event: string;
  readonly data: string;
}

export async function* serverEvents(
  body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
): AsyncGenerator<ServerEvent> {
  const decoder = new TextDecoder();
  let buffered = '';
  let fields: { id?: string; event?: string; data: string[] } = { data: [] };
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffered.indexOf('\n')) !== -1) {
      const line = buffered.slice(0, end).replace(/\r$/, '');
      buffered = buffered.slice(end + 1);
      if (line === '') {
        if (fields.data.length > 0)
          yield {
            ...(fields.id === undefined ? {} : { id: fields.id }),
            event: fields.event ?? 'message',
            data: fields.data.join('\n'),
          };
        fields = { data: [] };
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const name = colon === -1 ? line : line.slice(0, colon);
      const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (name === 'data') fields.data.push(value);
      else if (name === 'id') fields.id = value;
      else if (name === 'event') fields.event = value;
    }
  }
}
