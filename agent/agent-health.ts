/**
 * What /readyz and /healthz report, from the loop's own state (STYLE rule 11):
 *  - /readyz: 200 only while the lease is held (the pod's startup probe gates the
 *    server container on it; dropping it is part of every fence).
 *  - /healthz: 200 unless the agent has fenced, or holds the lease but its last
 *    successful renewal is older than the renew deadline (the loop is stuck).
 */
import type { Check } from '../lib/http-endpoints.ts';
import type { AgentMetrics } from './agent-metrics.ts';

export type Phase = 'starting' | 'acquiring' | 'holding' | 'releasing' | 'fenced' | 'stopped';

export class AgentHealth {
  private phase: Phase = 'starting';

  constructor(
    private readonly metrics: AgentMetrics,
    private readonly renewDeadlineMs: number,
  ) {}

  enter(phase: Phase): void {
    this.phase = phase;
    this.metrics.setHeld(phase === 'holding');
    if (phase === 'fenced') this.metrics.setFenced();
  }

  get current(): Phase {
    return this.phase;
  }

  readyz = (): Check =>
    this.phase === 'holding'
      ? { ok: true, detail: 'lease held' }
      : { ok: false, detail: `lease not held (${this.phase})` };

  healthz = (): Check => {
    if (this.phase === 'fenced') return { ok: false, detail: 'fenced' };
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
