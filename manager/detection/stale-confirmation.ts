/**
 * Confirms a stale verdict with one quorum read of the Lease before anyone acts on it.
 *
 * Why: a watch can stall while its TCP connection stays open (seen on a real
 * kube-apiserver during graceful shutdown: ~5 s of an open, silent watch). Judged from
 * the watch alone, every lease would look stale. The read settles it:
 *  - the read fails (API unreachable)      -> no verdict; judge again after a pause;
 *  - the lease is gone                     -> forget it;
 *  - its resourceVersion moved             -> record what was read (a renewal makes it
 *                                             fresh; a metadata-only change is judged again);
 *  - same resourceVersion as last observed -> confirmed: the verdict goes on.
 * The confirming CAS of the failover still guards the write; this read only keeps false
 * verdicts out of logs, metrics, observe-only events and the storm guard.
 */
import type { Clock } from '../../lib/clock.ts';
import type { LeaseRecord } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import type { LeaseMonitor, StaleVerdict } from './lease-monitor.ts';

export interface LeaseReader {
  readLease(namespace: string, name: string): Promise<LeaseRecord | undefined>;
}

export class StaleConfirmation {
  private readonly inFlight = new Set<string>();
  private readonly timers = new Set<NodeJS.Timeout>();
  monitor: LeaseMonitor | undefined;

  constructor(
    private readonly reader: LeaseReader,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly retryMs: number,
    private readonly onConfirmed: (verdict: StaleVerdict) => void,
  ) {}

  check(verdict: StaleVerdict): void {
    const { key } = verdict;
    if (this.inFlight.has(key)) return;
    this.inFlight.add(key);
    const [namespace, name] = key.split('/') as [string, string];
    const observed = verdict.observation.lease.resourceVersion;
    this.reader.readLease(namespace, name).then(
      (lease) => {
        this.inFlight.delete(key);
        if (!lease) return this.monitor?.leaseDeleted(namespace, name);
        if (lease.resourceVersion !== observed) {
          this.log.info(
            { lease: key, observed, read: lease.resourceVersion },
            'stale by the watch, but the lease moved: re-observed',
          );
          return this.monitor?.record(lease, true);
        }
        const now = this.clock.now();
        this.onConfirmed({
          ...verdict,
          lagMs: verdict.lagMs + (now - verdict.at),
          at: now,
          confirmMs: now - verdict.at,
        });
      },
      (err: unknown) => {
        this.inFlight.delete(key);
        this.log.debug(
          { lease: key, err: String(err) },
          'cannot confirm a stale lease (API unreachable): no verdict yet',
        );
        const timer = setTimeout(() => {
          this.timers.delete(timer);
          this.monitor?.rejudge(key);
        }, this.retryMs);
        this.timers.add(timer);
      },
    );
  }

  stop(): void {
    for (const timer of this.timers) clearTimeout(timer);
  }
}
