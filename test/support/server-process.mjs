/**
 * The life of a server a test starts (versitygw, etcd): stopped by its PID when halted, started
 * again over the same folder and ports when resumed, and killed if the test process ends without
 * stopping it (a crash, an interrupt). Plain JavaScript, for the tests and the benches alike.
 */

/**
 * Controls for a server whose first run is `first` (`{ child, exited }`), which `relaunch` starts
 * again (resolving undefined when it does not answer); `haltSignal` is what halting sends, and
 * `failure()` says why a restart failed.
 */
export function serverProcess(first, relaunch, haltSignal, failure) {
  let running = first;
  const stopOnExit = () => {
    const pid = running?.child.pid;
    if (running?.child.exitCode === null && pid !== undefined) process.kill(pid, 'SIGKILL');
  };
  process.once('exit', stopOnExit);
  const halt = async () => {
    const current = running;
    running = undefined;
    if (current && current.child.exitCode === null && current.child.pid !== undefined) {
      process.kill(current.child.pid, haltSignal);
      await current.exited;
    }
  };
  return {
    /** Stops the server by its PID; its folder and ports are kept. */
    halt,
    /** Starts a halted server again on the same ports, over the same folder. */
    async resume() {
      if (running) return;
      running = await relaunch();
      if (!running) throw new Error(failure());
    },
    /** Halts it for good: the test process no longer kills it on exit. */
    async stop() {
      process.off('exit', stopOnExit);
      await halt();
    },
  };
}
