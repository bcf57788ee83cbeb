/**
 * The agent sidecar's entry point: only wiring. Reads the env (config.ts), serves the
 * endpoints, acquires the Lease (acquire-loop.ts), renews it (renew-loop.ts), and ends
 * in exactly one of: release on SIGTERM/SIGINT (release.ts, exit 0), fence (fence.ts,
 * exit 1), or a start failure (exit 3). Exit codes: exit-codes.ts. Env vars: config.ts.
 *
 * Before acquiring, the agent checks that it could carry out its fence (fence-targets.ts:
 * CAP_KILL, a shared PID namespace for `pod`); if not, it never acquires, so the server
 * (gated on /readyz) never starts, and /readyz, /healthz and one log line say why.
 *
 * NB: an unexpected exception also fences (readiness drops, fence action, exit 1): a
 * crashed agent must not leave a server serving without a renewed lease.
 */
import { systemClock } from '../lib/clock.ts';
import { ConfigError } from '../lib/errors.ts';
import { type Endpoints, serveEndpoints } from '../lib/http-endpoints.ts';
import type { Logger } from '../lib/logger.ts';
import { acquireLease } from './acquire-loop.ts';
import { AgentHealth } from './agent-health.ts';
import { createAgentLogger } from './agent-logger.ts';
import { AgentMetrics } from './agent-metrics.ts';
import { type AgentConfig, readAgentConfig } from './config.ts';
import { EXIT_CONFIG, EXIT_FENCED, EXIT_RELEASED, EXIT_START_FAILED } from './exit-codes.ts';
import { runFence } from './fence.ts';
import { fencePreflightProblem } from './fence-targets.ts';
import { resolveKubeConnection } from './kube-connection.ts';
import { HttpLeaseStore } from './lease-http-store.ts';
import { listProcesses, readOwnCredentials } from './process-table.ts';
import { releaseLease } from './release.ts';
import { renewLoop } from './renew-loop.ts';
import { checkServer } from './server-check.ts';
import { awaitClearance, PromiseKeeper } from './witness-promises.ts';

async function main(): Promise<number> {
  let config: AgentConfig;
  try {
    config = readAgentConfig(process.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`leasehold agent: ${err.message}\n`);
    return EXIT_CONFIG;
  }
  const clock = systemClock;
  const log = createAgentLogger('agent', config.logLevel).child({
    lease: `${config.namespace}/${config.leaseName}`,
    pod: config.podName,
  });
  const metrics = new AgentMetrics(clock);
  // Witness promises (witness-promises.ts): with none configured, the deadline is proof + T.
  const keeper = new PromiseKeeper({ config, clock, log, metrics });
  const provenUntil = (proofSentAtMs: number) => keeper.deadlineMs(proofSentAtMs);
  metrics.setProof(config.timings.renewDeadlineMs, () =>
    provenUntil(metrics.lastProofSentAtMs ?? Number.NEGATIVE_INFINITY),
  );
  const health = new AgentHealth(metrics, config.timings.renewDeadlineMs, clock, provenUntil);
  const fence = async (why: Record<string, unknown>): Promise<number> => {
    health.enter('fenced');
    const startedAtMs = clock.now();
    const result = await runFence(config.fence, clock);
    const fenceMs = Math.round((clock.now() - startedAtMs) * 10) / 10;
    log.error({ ...why, fence: result, fenceMs }, 'fenced: readiness dropped, fence action done, exiting');
    return EXIT_FENCED;
  };
  process.on('uncaughtException', (err) => {
    log.fatal({ err }, 'unexpected error');
    void fence({ reason: 'unexpected-error' }).then((code) => process.exit(code));
  });

  let store: HttpLeaseStore;
  let endpoints: Endpoints;
  let apiSource: string;
  try {
    const connection = await resolveKubeConnection(process.env);
    apiSource = connection.source;
    store = new HttpLeaseStore(connection);
    endpoints = await serveEndpoints({
      host: config.httpHost,
      port: config.httpPort,
      registry: metrics.registry,
      healthz: health.healthz,
      readyz: health.readyz,
    });
  } catch (err) {
    log.fatal({ err }, 'could not start (kubeconfig or HTTP port)');
    return EXIT_START_FAILED;
  }
  log.info(
    { httpPort: endpoints.port, api: apiSource, timings: config.timings, fence: config.fence.action },
    'agent started',
  );

  const stopping = new AbortController();
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      log.info({ signal }, 'planned stop requested');
      stopping.abort();
    });
  }
  const deps = { config, store, clock, log, metrics, stop: stopping.signal };

  const cannotFence = fencePreflightProblem(config.fence.action, {
    selfPid: process.pid,
    processes: listProcesses(),
    credentials: readOwnCredentials(),
  });
  if (cannotFence) {
    health.enter('cannot-fence', cannotFence);
    log.error(
      { fence: config.fence.action },
      `${cannotFence}; not acquiring the lease (the server stays stopped)`,
    );
    await new Promise<void>((resolve) =>
      stopping.signal.addEventListener('abort', () => resolve(), { once: true }),
    );
    return finish(log, endpoints, EXIT_RELEASED, 'stopped without acquiring (could not fence)');
  }

  health.enter('acquiring');
  const acquired = await acquireLease({
    ...deps,
    // A server of this pod running while another pod holds the lease has no proof: this
    // agent was restarted in place (no exit handler ran) after losing the lease, or after
    // a fence that found nothing while a late server started. Stop it now, not after the
    // liveness probe's delay. NB: not for `command` (it cannot tell whether a server of
    // this pod runs, and a replacement waiting for the old holder is the normal case).
    onOtherHolder: async (holder) => {
      if (config.fence.action !== 'pod' && config.fence.action !== 'signal') return false;
      // With a server check, only a server that answers it serves: the shipped NFS
      // server's entrypoint waits at its own lease gate in every fresh pod (a replacement
      // waiting for a holder to let go), and must be left waiting.
      if (
        config.serverCheck &&
        !(await checkServer(config.serverCheck.target, config.serverCheck.timeoutMs)).ok
      )
        return false;
      const result = await runFence(config.fence, clock);
      if (result.kind === 'no-process') return false;
      health.enter('fenced');
      log.error(
        { holder, fence: result },
        'fenced at start: a server of this pod was running while another pod holds the lease',
      );
      return true;
    },
  });
  if (acquired.kind === 'stopped') return finish(log, endpoints, EXIT_RELEASED, 'stopped before acquiring');
  if (acquired.kind === 'fenced') return finish(log, endpoints, EXIT_FENCED);
  if (acquired.kind === 'timed-out') {
    log.error(
      { holder: acquired.holder, after: config.acquireTimeoutMs },
      'could not acquire the lease in time',
    );
    return finish(log, endpoints, EXIT_START_FAILED);
  }
  if (acquired.kind === 'refused') {
    // A manager declared this pod's incarnation dead: its server must not serve.
    return finish(log, endpoints, await fence({ reason: 'own lease marked delinquent' }));
  }
  metrics.renewed(acquired.sentAtMs, 0, false);
  log.info({ how: acquired.how, transitions: acquired.lease.transitions }, 'lease acquired');

  const renewing = new AbortController();
  const renewal = stopping.signal.aborted
    ? Promise.resolve({ kind: 'stopped', lease: acquired.lease } as const)
    : renewLoop({ ...deps, provenUntil }, acquired.lease, acquired.sentAtMs);
  let renewalEnded = false;
  void renewal.finally(() => {
    renewalEnded = true;
    renewing.abort();
  });
  void keeper.run(
    () => metrics.lastProofSentAtMs ?? acquired.sentAtMs,
    AbortSignal.any([renewing.signal, stopping.signal]),
  );
  if (acquired.previous) {
    // The previous holder did not release and may serve on its witnesses' promises: our
    // server starts only once a majority of its set cleared us (the lease is renewed meanwhile).
    health.enter('clearing');
    log.info(
      { previous: acquired.previous.holder, witnesses: acquired.previous.witnesses },
      "waiting for clearances from a majority of the previous holder's witnesses before serving",
    );
    const cleared = await awaitClearance(
      { config, clock, log, metrics },
      acquired.previous,
      acquired.sentAtMs,
      AbortSignal.any([renewing.signal, stopping.signal]),
    );
    if (cleared.kind === 'cleared')
      log.info({ by: cleared.by }, 'cleared by a majority of the witnesses: serving');
    if (cleared.kind === 'cap-passed')
      log.warn(
        { capMs: acquired.previous.serveWithoutApiMs },
        "no majority of the previous holder's witnesses cleared us, but its cap on serving without the API has passed: serving",
      );
  }
  if (!renewalEnded && !stopping.signal.aborted) health.enter('holding');
  const end = await renewal;
  if (end.kind !== 'stopped') {
    return finish(log, endpoints, await fence({ reason: end.kind, detail: end }));
  }
  health.enter('releasing');
  const released = await releaseLease(store, end.lease, config.podName, config.releaseTimeoutMs, clock);
  if (released.kind === 'failed') {
    log.error({ release: released }, 'could not release the lease; it will expire for the manager');
    return finish(log, endpoints, EXIT_FENCED);
  }
  health.enter('stopped');
  log.info({ release: released }, 'lease released');
  return finish(log, endpoints, EXIT_RELEASED);
}

async function finish(log: Logger, endpoints: Endpoints, code: number, message?: string): Promise<number> {
  if (message) log.info(message);
  await endpoints.close();
  return code;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`leasehold agent: unexpected error: ${String((err as Error)?.stack ?? err)}\n`);
    process.exit(EXIT_FENCED);
  },
);
