/**
 * @streamstack/client: a StreamStack server with the embedded API's shape (docs/http.md).
 *
 * @example
 * import { RemoteStore } from '@streamstack/client';
 * const store = await RemoteStore.open('http://127.0.0.1:4437');
 * const feed = await store.feed('orders');
 * for await (const record of feed.read({ after: 0, mode: 'latest' })) console.log(record.key);
 */
export { RemoteStore } from './remote-store.js';
export type { RemoteStoreOptions } from './remote-store.js';
export { RemoteFeed } from './remote-feed.js';
export { RemoteStream } from './remote-stream.js';
export { RemoteSubscription } from './remote-subscription.js';
export { errorFromBody } from './transport.js';
export type { TransportOptions } from './transport.js';
