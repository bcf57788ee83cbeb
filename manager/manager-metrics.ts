/**
 * The manager's Prometheus metrics (prefix leasehold_manager_). One object, created
 * once in main and handed to the parts that observe something.
 *
 * Guarantee: every series of a closed label set (each failover result, each phase) is
 * exported from the start, at 0. Prometheus' increase() and rate() cannot see a series'
 * first step, so an alert on `increase(...{result="replacement_lost"}[15m]) > 0` would
 * miss the first lost replacement of a manager's life if the series appeared only then
 * (and the chart's rule tests read the label values they use from a fresh /metrics).
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export const FAILOVER_RESULTS = [
  'completed',
  'observe_only',
  'stood_down',
  'abandoned',
  'replacement_lost',
] as const;
export type FailoverResult = (typeof FAILOVER_RESULTS)[number];
export const FAILOVER_PHASES = ['mark', 'pod_delete', 'detach', 'replace', 'acquire', 'total'] as const;
export type FailoverPhaseName = (typeof FAILOVER_PHASES)[number];

export interface ManagerMetrics {
  leasesTracked: Gauge;
  staleDetected: Counter;
  markConflicts: Counter;
  failovers: Counter<'result'>;
  phaseSeconds: Histogram<'phase'>;
  detectionLagSeconds: Histogram;
  confirmSeconds: Histogram;
  stormGuardActive: Gauge;
  awaitingNodeDown: Gauge;
  watchRestarts: Counter<'resource'>;
  watchHealthy: Gauge<'resource'>;
  agentFences: Counter;
  witnessAnswers: Counter<'request' | 'answer'>;
}

export function createManagerMetrics(registry: Registry): ManagerMetrics {
  const prefix = 'leasehold_manager_';
  const metrics: ManagerMetrics = {
    witnessAnswers: new Counter({
      name: `${prefix}witness_answers_total`,
      help: 'Witness answers: request promise|clearance, answer promised|cleared|wait|refused_<reason>|bad_request',
      labelNames: ['request', 'answer'],
      registers: [registry],
    }),
    leasesTracked: new Gauge({
      name: `${prefix}leases_tracked`,
      help: 'Share-manager Leases this manager watches',
      registers: [registry],
    }),
    staleDetected: new Counter({
      name: `${prefix}stale_detected_total`,
      help: 'Stale verdicts (a held lease unchanged for its duration by our observation)',
      registers: [registry],
    }),
    markConflicts: new Counter({
      name: `${prefix}mark_conflicts_total`,
      help: 'Delinquent marks refused with 409: the lease moved since our last observation',
      registers: [registry],
    }),
    failovers: new Counter({
      name: `${prefix}failovers_total`,
      help: 'Failovers run by this manager, by result',
      labelNames: ['result'],
      registers: [registry],
    }),
    phaseSeconds: new Histogram({
      name: `${prefix}failover_phase_duration_seconds`,
      help: 'Duration of each failover phase (mark, pod_delete, detach, replace, acquire) and the total from detection',
      labelNames: ['phase'],
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers: [registry],
    }),
    detectionLagSeconds: new Histogram({
      name: `${prefix}detection_lag_seconds`,
      help: 'Verdict time minus (observed renewal + lease duration): how late the timer fired',
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    confirmSeconds: new Histogram({
      name: `${prefix}stale_confirm_duration_seconds`,
      help: 'Duration of the quorum read that confirms a stale verdict before anything acts on it',
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    stormGuardActive: new Gauge({
      name: `${prefix}storm_guard_active`,
      help: '1 while new failovers are paused because too many leases went stale on healthy nodes',
      registers: [registry],
    }),
    awaitingNodeDown: new Gauge({
      name: `${prefix}shares_awaiting_node_down`,
      help: 'Shares whose failover waits (serving nowhere) for evidence that their lost node is down: storage that cannot fence, LEASEHOLD_NONFENCING_STORAGE=require-node-down',
      registers: [registry],
    }),
    watchRestarts: new Counter({
      name: `${prefix}watch_restarts_total`,
      help: 'Re-watches after a watch error, end, 410 Gone or quiet timeout, by resource',
      labelNames: ['resource'],
      registers: [registry],
    }),
    watchHealthy: new Gauge({
      name: `${prefix}watch_healthy`,
      help: '1 while the watch stream of the resource is open (0 from the start until it first opens)',
      labelNames: ['resource'],
      registers: [registry],
    }),
    agentFences: new Counter({
      name: `${prefix}agent_fences_total`,
      help: 'Share-manager pods whose agent ended fenced (exit code 1), as this manager saw their status change',
      registers: [registry],
    }),
  };
  for (const result of FAILOVER_RESULTS) metrics.failovers.inc({ result }, 0);
  for (const phase of FAILOVER_PHASES) metrics.phaseSeconds.zero({ phase });
  return metrics;
}
