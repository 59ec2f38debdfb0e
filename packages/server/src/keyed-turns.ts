/**
 * Work that takes turns by key: each piece of work for a key starts once every earlier one for
 * that key has settled (succeeded or failed), in arrival order; work for other keys runs
 * alongside. The Durable Streams streams and subscriptions use it so that each check is made
 * against the state the write before it left.
 */
export class KeyedTurns {
  /** Each key's last piece of work, settled; gone once nothing is waiting on the key. */
  private readonly queues = new Map<string, Promise<unknown>>();

  /** Runs `work` in the next turn of `key`; resolves or rejects as it does. */
  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const before = this.queues.get(key) ?? Promise.resolve();
    const turn = before.then(work, work);
    const settled = turn.then(
      () => undefined,
      () => undefined,
    );
    this.queues.set(key, settled);
    void settled.then(() => {
      if (this.queues.get(key) === settled) this.queues.delete(key);
    });
    return turn;
  }
}
