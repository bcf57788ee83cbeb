/**
 * The agent's Prometheus metrics (prefix leasehold_agent_), plus the default process
 * metrics from lib/metrics.ts. Failure reasons are a small closed set so that the
 * label never grows without bound.
 *
 *   leasehold_agent_renewals_total                     successful renewals
 *   leasehold_agent_renew_failures_total{reason}       failed attempts: timeout, unreachable,
 *                                                      conflict, http_<status>, server_check
 *   leasehold_agent_renew_duration_seconds             latency of successful renewal requests
 *   leasehold_agent_seconds_since_last_renewal         age of the last successful renewal (by send time)
 *   leasehold_agent_lease_held                         1 while the lease is held
 *   leasehold_agent_fenced                             1 once the agent has fenced
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { Clock } from '../lib/clock.ts';
import { KubeApiError } from '../lib/errors.ts';

export type FailureReason = 'timeout' | 'unreachable' | 'conflict' | 'server_check' | `http_${number}`;

export class AgentMetrics {
  readonly registry: Registry;
  private readonly renewals: Counter;
  private readonly failures: Counter<'reason'>;
  private readonly latency: Histogram;
  private readonly held: Gauge;
  private readonly fenced: Gauge;
  private lastSuccessSentAtMs: number | undefined;

  constructor(private readonly clock: Clock) {
    // NB: not lib/metrics.ts createRegistry(): its default event-loop monitor samples every
    // 10 ms, which alone costs ~0.45 % of a core, the agent's whole CPU budget. Sampling
    // once a second costs nothing measurable and still shows a stuck loop.
    this.registry = new Registry();
    collectDefaultMetrics({
      register: this.registry,
      prefix: 'leasehold_agent_',
      eventLoopMonitoringPrecision: 1000,
    });
    const registers = [this.registry];
    this.renewals = new Counter({
      name: 'leasehold_agent_renewals_total',
      help: 'Successful lease renewals',
      registers,
    });
    this.failures = new Counter({
      name: 'leasehold_agent_renew_failures_total',
      help: 'Failed renewal attempts by reason',
      labelNames: ['reason'],
      registers,
    });
    this.latency = new Histogram({
      name: 'leasehold_agent_renew_duration_seconds',
      help: 'Latency of successful renewal requests',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4],
      registers,
    });
    const self = this;
    new Gauge({
      name: 'leasehold_agent_seconds_since_last_renewal',
      help: 'Seconds since the last successful renewal was sent (-1 before the first)',
      registers,
      collect() {
        this.set(self.secondsSinceLastRenewal());
      },
    });
    this.held = new Gauge({
      name: 'leasehold_agent_lease_held',
      help: '1 while this agent holds the lease',
      registers,
    });
    this.fenced = new Gauge({
      name: 'leasehold_agent_fenced',
      help: '1 once this agent has fenced',
      registers,
    });
  }

  /** A successful acquisition or renewal whose request was sent at `sentAtMs`. */
  renewed(sentAtMs: number, latencyMs: number, isRenewal: boolean): void {
    this.lastSuccessSentAtMs = sentAtMs;
    if (isRenewal) {
      this.renewals.inc();
      this.latency.observe(latencyMs / 1000);
    }
  }

  failed(reason: FailureReason): void {
    this.failures.inc({ reason });
  }

  setHeld(held: boolean): void {
    this.held.set(held ? 1 : 0);
  }

  setFenced(): void {
    this.fenced.set(1);
  }

  secondsSinceLastRenewal(): number {
    return this.lastSuccessSentAtMs === undefined ? -1 : (this.clock.now() - this.lastSuccessSentAtMs) / 1000;
  }
}

/** The metric label for a failed request. */
export function failureReason(err: unknown): FailureReason {
  // NB: lib statusOf() also reports a DOMException code (23 = TIMEOUT_ERR) as a status;
  // only 100-599 is an HTTP answer.
  const status = err instanceof KubeApiError ? err.status : undefined;
  if (status !== undefined && status >= 100 && status < 600)
    return status === 409 ? 'conflict' : `http_${status}`;
  return isTimeout(err) ? 'timeout' : 'unreachable';
}

function isTimeout(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 6; e = e.cause, depth++) {
    if (e.name === 'TimeoutError' || e.name === 'AbortError') return true;
  }
  return false;
}
