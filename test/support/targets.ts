/**
 * The two ways to reach a store that the shared behavioural suite runs against: embedded (the
 * engine in this process) and remote (the client talking to a server this test started on
 * port 0 over the same kind of store). The two have one shape (every call that may need a round
 * trip is async in both, docs/http.md), so the suite is type-checked against both as a union.
 */

import { RemoteStore } from '../../packages/client/src/index.js';
import type { Store } from '../../packages/engine/src/index.js';
import { createServer } from '../../packages/server/src/index.js';
import { openStore } from './store.js';

export interface Opened {
  readonly store: Store | RemoteStore;
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
    const server = await createServer({
      store: await openStore(directory),
      logger: false,
      live: { heartbeatMs: 1000 },
    });
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
