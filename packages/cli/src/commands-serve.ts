/** `serve`: the data directory over HTTP (docs/http.md), until SIGTERM or SIGINT. */

import { Store } from '@streamstack/engine';
import type { Command } from 'commander';
import { integer, storeSettings } from './shared.js';

interface ServeFlags {
  host: string;
  port: number;
  tokens?: string;
  bodyLimit?: number;
  exports?: string;
  allowHost: string[];
  cors: string[];
  logLevel: string;
  advertiseUrl?: string;
  webhookKey?: string;
}

/** Collects a repeatable option's values. */
const repeated = (value: string, previous: string[]): string[] => [...previous, value];

export function addServeCommand(program: Command): void {
  program
    .command('serve')
    .description('serve the data directory over HTTP until SIGTERM or SIGINT; logs are JSON lines on stdout')
    .option('--host <host>', 'address to listen on (anything but loopback needs --tokens)', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0: any free port)', integer('--port'), 4437)
    .option(
      '--tokens <file>',
      'bearer tokens file (hashed, scoped); without it the server is local-only and checks nothing',
    )
    .option('--body-limit <bytes>', 'largest request body', integer('--body-limit'))
    .option('--exports <dir>', 'directory that exports over HTTP are written under (without it, export is refused)')
    .option(
      '--allow-host <name>',
      'a Host name the server answers besides loopback names, IP literals and --host (repeatable; * accepts any)',
      repeated,
      [],
    )
    .option(
      '--cors <origin>',
      'an origin web pages may call from, with CORS headers (repeatable; * allows any); none by default',
      repeated,
      [],
    )
    .option(
      '--advertise-url <url>',
      'with --etcd: the address other nodes and clients reach this server at, listed by GET /v1/cluster (default: the address it listens on)',
    )
    .option(
      '--webhook-key <file>',
      'the Ed25519 key Durable Streams webhooks are signed with (made there, owner-only, if missing); without it a key of this process only',
    )
    .option('--log-level <level>', 'pino log level', 'info')
    .action(async (flags: ServeFlags) => {
      // Loaded here, not at the top: fastify and its plugins would add to every command's start.
      const { createServer, loadTokenFile } = await import('@streamstack/server');
      const tokens = flags.tokens === undefined ? undefined : loadTokenFile(flags.tokens);
      const { data, options } = storeSettings(program, 'write');
      const store = await Store.open(data, options);
      let server;
      try {
        server = await createServer({
          store,
          ...(tokens ? { tokens } : {}),
          ...(flags.bodyLimit === undefined ? {} : { bodyLimit: flags.bodyLimit }),
          ...(flags.exports === undefined ? {} : { exportDirectory: flags.exports }),
          allowedHosts: flags.allowHost,
          corsOrigins: flags.cors,
          ...(flags.webhookKey === undefined ? {} : { durableStreams: { webhookKeyFile: flags.webhookKey } }),
          logger: { level: flags.logLevel },
        });
        const address = await server.listen({ host: flags.host, port: flags.port });
        // With --etcd, the other nodes list this one at the address its clients reach.
        await store.advertise(flags.advertiseUrl ?? address);
      } catch (error) {
        await (server ? server.close() : store.close());
        throw error;
      }
      const running = server;
      // A graceful stop: refuse new requests, end live reads, finish the rest, close the store.
      await new Promise<void>((resolve, reject) => {
        const stop = (signal: string) => {
          process.off('SIGTERM', onTerm);
          process.off('SIGINT', onInt);
          running.app.log.info({ signal }, 'draining');
          running.close().then(resolve, reject);
        };
        const onTerm = () => stop('SIGTERM');
        const onInt = () => stop('SIGINT');
        process.once('SIGTERM', onTerm);
        process.once('SIGINT', onInt);
      });
    });
}
