/**
 * What /readyz and /healthz report, from the loop's own state (STYLE rule 11):
 *  - /readyz: 200 only while the lease is held AND its last successful renewal was sent
 *    at most the renew deadline T ago. It is the proof the server may serve: the server
 *    starts only on it (the agent's startup probe gates a user's server container; the
 *    shipped NFS server's entrypoint asks it itself and insists on exactly 200 `ok:
 *    lease held`, server/nfs-ganesha/lease-gate.ts), and the server container's
 *    liveness probe is this endpoint too, so the kubelet stops the server once the
 *    proof lapses even when the agent cannot (hung, dead, unable to signal) and even
 *    while the node is cut off from the API server (manager/reconciliation/pod-spec.ts).
 *  - /healthz: 200 unless the agent has fenced, cannot fence (see fence-targets.ts), or
 *    holds the lease but its last successful renewal is older than T (the loop is stuck).
 */
import type { Check } from '../lib/http-endpoints.ts';
import type { AgentMetrics } from './agent-metrics.ts';

export type Phase =
  | 'starting'
  | 'cannot-fence'
  | 'acquiring'
  | 'holding'
  | 'releasing'
  | 'fenced'
  | 'stopped';

export class AgentHealth {
  private phase: Phase = 'starting';
  private why: string | undefined;

  constructor(
    private readonly metrics: AgentMetrics,
    private readonly renewDeadlineMs: number,
  ) {}

  /** `why`: shown by /readyz and /healthz in the `cannot-fence` phase. */
  enter(phase: Phase, why?: string): void {
    this.phase = phase;
    this.why = why;
    this.metrics.setHeld(phase === 'holding');
    if (phase === 'fenced') this.metrics.setFenced();
  }

  get current(): Phase {
    return this.phase;
  }

  readyz = (): Check => {
    if (this.phase === 'cannot-fence') return { ok: false, detail: this.why ?? 'cannot fence' };
    if (this.phase !== 'holding') return { ok: false, detail: `lease not held (${this.phase})` };
    const age = this.metrics.secondsSinceLastRenewal();
    return age * 1000 > this.renewDeadlineMs
      ? { ok: false, detail: `lease not proven: last successful renewal sent ${age.toFixed(1)}s ago` }
      : { ok: true, detail: 'lease held' };
  };

  healthz = (): Check => {
    if (this.phase === 'fenced') return { ok: false, detail: 'fenced' };
    if (this.phase === 'cannot-fence') return { ok: false, detail: this.why ?? 'cannot fence' };
    const age = this.metrics.secondsSinceLastRenewal();
    if (this.phase === 'holding' && age * 1000 > this.renewDeadlineMs) {
      return { ok: false, detail: `last successful renewal ${age.toFixed(1)}s ago` };
    }
    return {
      ok: true,
      detail: this.phase === 'holding' ? `last renewal ${age.toFixed(1)}s ago` : this.phase,
    };
  };
}
