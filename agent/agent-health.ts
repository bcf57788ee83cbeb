/**
 * What /readyz and /healthz report, from the loop's own state (STYLE rule 11):
 *  - /readyz: 200 only while the lease is held AND proven: its last successful renewal
 *    was sent at most the renew deadline T ago, or (witnesses configured) a majority of
 *    witness promises still holds (witness-promises.ts). It is the proof the server may serve: the server
 *    starts only on it (the agent's startup probe gates a user's server container; the
 *    shipped NFS server's entrypoint asks it itself and insists on exactly 200 `ok:
 *    lease held`, server/nfs-ganesha/lease-gate.ts), and the server container's
 *    liveness probe is this endpoint too, so the kubelet stops the server once the
 *    proof lapses even when the agent cannot (hung, dead, unable to signal) and even
 *    while the node is cut off from the API server (manager/share-model/pod-spec.ts).
 *  - /healthz: 200 unless the agent has fenced, cannot fence (see fence-targets.ts), or
 *    holds the lease but its last successful renewal is older than T (the loop is stuck).
 */
import type { Check } from '../lib/http-endpoints.ts';
import type { AgentMetrics } from './agent-metrics.ts';

export type Phase =
  | 'starting'
  | 'cannot-fence'
  | 'acquiring'
  /** Lease acquired and renewed; the server waits for witness clearances (witness-promises.ts). */
  | 'clearing'
  | 'holding'
  | 'releasing'
  | 'fenced'
  | 'stopped';

export class AgentHealth {
  private phase: Phase = 'starting';
  private why: string | undefined;

  /**
   * `provenUntil`: the serving deadline (monotonic ms) for a lease last proven by a
   * renewal sent at the given time; default that time + T.
   */
  constructor(
    private readonly metrics: AgentMetrics,
    private readonly renewDeadlineMs: number,
    private readonly clock?: { now(): number },
    private readonly provenUntil?: (proofSentAtMs: number) => number,
  ) {}

  /** Whether the lease is proven now: by a renewal within T, or by promises. */
  private proven(): boolean {
    const age = this.metrics.secondsSinceLastRenewal();
    if (age >= 0 && age * 1000 <= this.renewDeadlineMs) return true;
    const proof = this.metrics.lastProofSentAtMs;
    if (!this.clock || !this.provenUntil || proof === undefined) return false;
    return this.clock.now() < this.provenUntil(proof);
  }

  /** `why`: shown by /readyz and /healthz in the `cannot-fence` phase. */
  enter(phase: Phase, why?: string): void {
    this.phase = phase;
    this.why = why;
    this.metrics.setHeld(phase === 'holding' || phase === 'clearing');
    if (phase === 'fenced') this.metrics.setFenced();
  }

  get current(): Phase {
    return this.phase;
  }

  readyz = (): Check => {
    if (this.phase === 'cannot-fence') return { ok: false, detail: this.why ?? 'cannot fence' };
    if (this.phase === 'clearing')
      return { ok: false, detail: "lease held; waiting for clearances from the previous holder's witnesses" };
    if (this.phase !== 'holding') return { ok: false, detail: `lease not held (${this.phase})` };
    const age = this.metrics.secondsSinceLastRenewal();
    if (age * 1000 <= this.renewDeadlineMs) return { ok: true, detail: 'lease held' };
    // NB: the same `lease held` text: the NFS entrypoint's gate insists on it.
    return this.proven()
      ? { ok: true, detail: 'lease held' }
      : { ok: false, detail: `lease not proven: last successful renewal sent ${age.toFixed(1)}s ago` };
  };

  healthz = (): Check => {
    if (this.phase === 'fenced') return { ok: false, detail: 'fenced' };
    if (this.phase === 'cannot-fence') return { ok: false, detail: this.why ?? 'cannot fence' };
    const age = this.metrics.secondsSinceLastRenewal();
    if (this.phase === 'holding' && !this.proven()) {
      return { ok: false, detail: `last successful renewal ${age.toFixed(1)}s ago` };
    }
    return {
      ok: true,
      detail: this.phase === 'holding' ? `last renewal ${age.toFixed(1)}s ago` : this.phase,
    };
  };
}
