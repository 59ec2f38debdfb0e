/**
 * A closing server's sweep of its connections. Node's `closeIdleConnections` leaves alone a
 * connection on which a request began to arrive and never ended (a client that went away in the
 * middle of one, as a follower's cut-short long poll can), and a server's close then waits for
 * Node's headers timeout, a minute. This counts the responses in progress on each connection
 * instead, and closes every connection that has none: nothing is answered on it any more, and a
 * request that would come is refused while draining anyway.
 *
 * @example
 * const sweep = new ConnectionSweep(app.server); // before it listens
 * setInterval(() => sweep.closeQuiet(), 50); // while closing
 */
import type http from 'node:http';
import type { Socket } from 'node:net';

export class ConnectionSweep {
  /** Each open connection, with the number of its responses in progress. */
  private readonly responses = new Map<Socket, number>();

  constructor(server: http.Server) {
    server.on('connection', (socket: Socket) => {
      this.responses.set(socket, 0);
      socket.once('close', () => this.responses.delete(socket));
    });
    server.on('request', (request: http.IncomingMessage, response: http.ServerResponse) => {
      const { socket } = request;
      this.responses.set(socket, (this.responses.get(socket) ?? 0) + 1);
      response.once('close', () => {
        const left = this.responses.get(socket);
        if (left !== undefined) this.responses.set(socket, left - 1);
      });
    });
  }

  /** Closes every connection with no response in progress. */
  closeQuiet(): void {
    for (const [socket, inProgress] of this.responses) if (inProgress <= 0) socket.destroy();
  }
}
