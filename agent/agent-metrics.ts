/**
 * The agent's Prometheus metrics (prefix leasehold_agent_), plus the default process
 * metrics (process-metrics.ts). Failure reasons are a small closed set so that the
 * label never grows without bound; the fixed ones (all but http_<status>) are exported at
 * 0 from the start, because Prometheus' increase() cannot see a series' first step: an
 * alert or panel on their rate would otherwise miss the first timeout of a pod's life.
 *
 *   leasehold_agent_renewals_total                     successful renewals
 *   leasehold_agent_renew_failures_total{reason}       failed attempts: timeout, unreachable,
 *                                                      conflict, http_<status>, server_check
 *   leasehold_agent_renew_duration_seconds             latency of successful renewal requests
 *   leasehold_agent_renew_hedges_total                 hedges sent: a second request of a renewal
 *                                                      (or of the read after a 409) on a fresh
 *                                                      connection while the first was in flight
 *   leasehold_agent_renew_hedge_wins_total             renewals proven by a hedge's write
 *   leasehold_agent_seconds_since_last_renewal         age of the last successful renewal (by send time)
 *   leasehold_agent_lease_held                         1 while the lease is held
 *   leasehold_agent_fenced                             1 once the agent has fenced
 *   leasehold_agent_serving_on_promises                1 while the lease is proven by witness
 *                                                      promises only (its last renewal is older than T)
 *   leasehold_agent_witness_answers_total{request,answer}  answers of witnesses: request promise|clearance,
 *                                                      answer promised|cleared|wait|refused_<reason>|failed
 *
 * Names, types, HELP texts and labels are those the agent exposed through prom-client
 * before; the exposition is written by hand (prom-text.ts says why: ~12 MB of RSS).
 * `registry` is what lib/http-endpoints.ts serves at /metrics.
 */
import type { Clock } from '../lib/clock.ts';
import { KubeApiError } from '../lib/errors.ts';
import type { MetricsSource } from '../lib/http-endpoints.ts';
import { CONTENT_TYPE, type Family, Histogram, renderFamilies } from '../lib/prom-text.ts';
import { ProcessMetrics } from './process-metrics.ts';

export type FailureReason = 'timeout' | 'unreachable' | 'conflict' | 'server_check' | `http_${number}`;
const FIXED_REASONS: readonly FailureReason[] = ['timeout', 'unreachable', 'conflict', 'server_check'];

const PREFIX = 'leasehold_agent_';
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4];

export class AgentMetrics {
  readonly registry: MetricsSource;
  private readonly process = new ProcessMetrics(PREFIX);
  private renewals = 0;
  /** By reason: the fixed ones first, then http_<status> in first-seen order. */
  private readonly failures = new Map<FailureReason, number>(FIXED_REASONS.map((r) => [r, 0]));
  private readonly latency = new Histogram(LATENCY_BUCKETS);
  private hedges = 0;
  private hedgeWins = 0;
  private held = 0;
  private fenced = 0;
  private lastSuccessSentAtMs: number | undefined;
  private readonly witnessAnswers = new Map<string, number>();
  private renewDeadlineMs = Number.POSITIVE_INFINITY;
  private provenUntil: (() => number) | undefined;

  constructor(private readonly clock: Clock) {
    this.registry = { contentType: CONTENT_TYPE, metrics: async () => this.render() };
  }

  /** A successful acquisition or renewal whose request was sent at `sentAtMs`. */
  renewed(sentAtMs: number, latencyMs: number, isRenewal: boolean): void {
    this.lastSuccessSentAtMs = sentAtMs;
    if (isRenewal) {
      this.renewals += 1;
      this.latency.observe(latencyMs / 1000);
    }
  }

  failed(reason: FailureReason): void {
    this.failures.set(reason, (this.failures.get(reason) ?? 0) + 1);
  }

  /** A hedge was sent (renew-round.ts). */
  hedged(): void {
    this.hedges += 1;
  }

  /** The renewal just recorded with renewed() was a hedge's write. */
  hedgeWon(): void {
    this.hedgeWins += 1;
  }

  setHeld(held: boolean): void {
    this.held = held ? 1 : 0;
  }

  setFenced(): void {
    this.fenced = 1;
  }

  /** How the serving deadline is read (promise-keeper.ts), for serving_on_promises. */
  setProof(renewDeadlineMs: number, provenUntil: () => number): void {
    this.renewDeadlineMs = renewDeadlineMs;
    this.provenUntil = provenUntil;
  }

  witnessAnswered(request: 'promise' | 'clearance', answer: string): void {
    const key = `${request}|${answer}`;
    this.witnessAnswers.set(key, (this.witnessAnswers.get(key) ?? 0) + 1);
  }

  /** The send time of the last successful acquisition or renewal (monotonic ms). */
  get lastProofSentAtMs(): number | undefined {
    return this.lastSuccessSentAtMs;
  }

  servingOnPromises(): boolean {
    if (this.held === 0 || this.lastSuccessSentAtMs === undefined || this.provenUntil === undefined)
      return false;
    const now = this.clock.now();
    return now > this.lastSuccessSentAtMs + this.renewDeadlineMs && now < this.provenUntil();
  }

  secondsSinceLastRenewal(): number {
    return this.lastSuccessSentAtMs === undefined ? -1 : (this.clock.now() - this.lastSuccessSentAtMs) / 1000;
  }

  /** The whole exposition, read now. */
  render(): string {
    const own: Family[] = [
      {
        name: `${PREFIX}renewals_total`,
        help: 'Successful lease renewals',
        type: 'counter',
        samples: [{ value: this.renewals }],
      },
      {
        name: `${PREFIX}renew_failures_total`,
        help: 'Failed renewal attempts by reason',
        type: 'counter',
        samples: [...this.failures].map(([reason, value]) => ({ labels: { reason }, value })),
      },
      {
        name: `${PREFIX}renew_duration_seconds`,
        help: 'Latency of successful renewal requests',
        type: 'histogram',
        samples: this.latency.samples({}),
      },
      {
        name: `${PREFIX}renew_hedges_total`,
        help: 'Hedged requests sent: a second renewal request on a fresh connection while the first was in flight',
        type: 'counter',
        samples: [{ value: this.hedges }],
      },
      {
        name: `${PREFIX}renew_hedge_wins_total`,
        help: 'Renewals proven by a hedged request',
        type: 'counter',
        samples: [{ value: this.hedgeWins }],
      },
      {
        name: `${PREFIX}seconds_since_last_renewal`,
        help: 'Seconds since the last successful renewal was sent (-1 before the first)',
        type: 'gauge',
        samples: [{ value: this.secondsSinceLastRenewal() }],
      },
      {
        name: `${PREFIX}lease_held`,
        help: '1 while this agent holds the lease',
        type: 'gauge',
        samples: [{ value: this.held }],
      },
      {
        name: `${PREFIX}fenced`,
        help: '1 once this agent has fenced',
        type: 'gauge',
        samples: [{ value: this.fenced }],
      },
      {
        name: `${PREFIX}serving_on_promises`,
        help: '1 while the lease is proven by witness promises only (the last renewal is older than T)',
        type: 'gauge',
        samples: [{ value: this.servingOnPromises() ? 1 : 0 }],
      },
      {
        name: `${PREFIX}witness_answers_total`,
        help: 'Answers of witnesses, by request (promise, clearance) and answer',
        type: 'counter',
        samples: [...this.witnessAnswers].map(([key, value]) => {
          const [request = '', answer = ''] = key.split('|');
          return { labels: { request, answer }, value };
        }),
      },
    ];
    return renderFamilies([...this.process.families(), ...own]);
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
