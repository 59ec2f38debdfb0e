/**
 * The two ways to reach a store that the shared behavioural suite runs against: embedded (the
 * engine in this process) and remote (the client talking to a server this test started on
 * port 0 over the same kind of store). The suite `await`s every call, so where the embedded API
 * is synchronous (`info`, `head`, `subscriptions`) and the client's is async, both work.
 */
import { RemoteStore } from '../../packages/client/src/index.js';
import { createServer } from '../../packages/server/src/index.js';
import { openStore } from './store.js';

export interface Opened {
  // The suite uses the shared shape of Store and RemoteStore; it is not type-checked as one.
  readonly store: any;
  close(): Promise<void>;
}

export interface Target {
  readonly name: string;
  open(directory: string): Promise<Opened>;
}

export const embedded: Target = {
  name: 'embedded',
  async open(directory) {
    const store = await openStore(directory);
    return { store, close: () => store.close() };
  },
};

export const remote: Target = {
  name: 'remote',
  async open(directory) {
    const server = await createServer({ store: await openStore(directory), logger: false, live: { heartbeatMs: 1000 } });
    const url = await server.listen({ port: 0 });
    const store = await RemoteStore.open(url);
    return {
      store,
      async close() {
        await store.close();
        await server.close();
      },
    };
  },
};

export const targets: readonly Target[] = [embedded, remote];
