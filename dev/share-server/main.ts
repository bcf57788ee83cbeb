/**
 * Entry point of the demo share server (image leasehold.dev/demo-share-server): wires
 * config, the server and signals. SIGTERM or SIGINT (the agent's fence, or a pod
 * deletion) stops appending and serving, logs the end of the serving window and exits 0.
 * A stubborn server (--sigterm-delay, see config.ts) answers SIGTERM later (serving
 * on until then) or never (only SIGKILL ends it); SIGINT always stops it at once.
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
  const stopNow = (signal: NodeJS.Signals, reason: string) => {
    starting
      .then(async (server) => {
        await server.stop(reason);
        log('stopped', { signal, lastSeq: server.lastSeq });
        process.exit(0);
      })
      .catch((err: unknown) => {
        log('stop failed', { error: String(err) });
        process.exit(1);
      });
  };
  let delayed: NodeJS.Timeout | undefined;
  process.on('SIGTERM', () => {
    const delayMs = config.sigtermDelayMs;
    if (delayMs === 0) return stopNow('SIGTERM', 'signal SIGTERM');
    if (delayMs === Number.POSITIVE_INFINITY) {
      log('ignoring SIGTERM (--sigterm-delay=never): serving on until SIGKILL', { signal: 'SIGTERM' });
      return;
    }
    if (delayed) return; // a second SIGTERM does not move the stop
    log('SIGTERM: serving on before stopping', { signal: 'SIGTERM', delayMs });
    delayed = setTimeout(
      () => stopNow('SIGTERM', `signal SIGTERM (stopped ${delayMs} ms after it)`),
      delayMs,
    );
  });
  process.on('SIGINT', () => stopNow('SIGINT', 'signal SIGINT'));
  const server = await starting;
  log('serving', { id: config.id, port: server.port, dir: config.dir, firstSeq: server.lastSeq + 1 });
}

main().catch((err: unknown) => {
  process.stderr.write(
    `share-server: failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
});
