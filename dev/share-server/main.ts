/**
 * Entry point of the demo share server (image leasehold.dev/demo-share-server): wires
 * config, the server and signals. SIGTERM or SIGINT (the agent's fence, or a pod
 * deletion) stops appending and serving, logs the end of the serving window and exits 0.
 * Exit codes: 0 stopped by a signal, 1 failed while running, 2 bad configuration.
 */
import { ConfigError } from '../../lib/errors.ts';
import { loadShareServerConfig } from './config.ts';
import { startShareServer } from './share-server.ts';

// The agent's signal fence finds this process by name (/proc/<pid>/comm) in the pod.
process.title = 'share-server';

async function main(): Promise<void> {
  let config: ReturnType<typeof loadShareServerConfig>;
  try {
    config = loadShareServerConfig(process.argv.slice(2), process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`share-server: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const log = (msg: string, extra: Record<string, unknown> = {}) =>
    process.stdout.write(
      `${JSON.stringify({ time: new Date().toISOString(), component: 'share-server', msg, ...extra })}\n`,
    );
  // Handlers first: a fence arriving while the server starts must still end the
  // window cleanly (stop waits for the start), never kill the process mid-append.
  const starting = startShareServer(config);
  const onSignal = (signal: NodeJS.Signals) => {
    starting
      .then(async (server) => {
        await server.stop(`signal ${signal}`);
        log('stopped', { signal, lastSeq: server.lastSeq });
        process.exit(0);
      })
      .catch((err: unknown) => {
        log('stop failed', { error: String(err) });
        process.exit(1);
      });
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const server = await starting;
  log('serving', { id: config.id, port: server.port, dir: config.dir, firstSeq: server.lastSeq + 1 });
}

main().catch((err: unknown) => {
  process.stderr.write(
    `share-server: failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
});
