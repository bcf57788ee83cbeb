/**
 * The test playing a share-manager pod's agent on its Lease (no node runs the real
 * agent in these tests): acquire by CAS, renew by CAS, stop when told or when the
 * lease is lost.
 * Its own record of lapses is kept on CLOCK_MONOTONIC (the clock the manager judges by),
 * so a step of the wall clock cannot hide or invent one; the wall-clock fields are for
 * comparing with the manager's log times. `attempts` keeps the last 40 tries (send and
 * return, outcome, the resourceVersion written) for a failure message to show.
 */
import type * as k8s from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { type LeaseRecord, newLeaseRecord } from '../../lib/lease-record.ts';
import { KubeLeaseStore } from '../../lib/lease-store.ts';

export interface HolderAttempt {
  sent: number;
  returned: number;
  outcome: string;
}

/** CLOCK_MONOTONIC in ms (process.hrtime: the same clock in every process of the host). */
const monotonicMs = () => Number(process.hrtime.bigint() / 1000n) / 1000;

/**
 * Plays a pod's agent: acquires the Lease (free, own, or delinquent) and renews it every
 * `renewMs` by CAS until stopped or until it loses the lease. `renewTimeOffsetMs` skews
 * the renewTime it writes (clock skew). Errors (API down) are retried on the next tick.
 */
export class HolderLoop {
  private stopped = false;
  private done: Promise<void> | undefined;
  lastRenewalAt = 0; // wall ms when the last successful write returned
  lastRenewalSentAt = 0;
  renewals = 0;
  lost = false;
  /**
   * Spans from one successful write's send to the next one's return that were at least
   * the lease duration: the commits in it may be D apart, so the manager may rightly
   * have judged the lease stale there (a loaded machine stalls a test-played holder, not
   * only a real one).
   */
  readonly lapses: { from: number; to: number }[] = [];
  /** The last 40 attempts, oldest first (monotonic ms since this loop started). */
  readonly attempts: HolderAttempt[] = [];
  private lastSentMono = 0;
  private readonly startMono = monotonicMs();
  private lease: LeaseRecord | undefined;
  private readonly store: KubeLeaseStore;

  constructor(
    kc: k8s.KubeConfig,
    readonly namespace: string,
    readonly name: string,
    readonly holder: string,
    readonly node: string,
    private readonly renewMs: number,
    private readonly renewTimeOffsetMs = 0,
    private readonly durationSeconds = 3,
  ) {
    this.store = new KubeLeaseStore(kc);
  }

  /**
   * It has gone the lease duration without a confirmed renewal, in the past or up to now,
   * counted from its first write sent (answered or not: a timed-out acquire may have
   * been committed, and the manager then rightly judges that lease).
   */
  hasLapsed(): boolean {
    return (
      this.lapses.length > 0 ||
      (this.lastSentMono > 0 && monotonicMs() - this.lastSentMono >= this.durationSeconds * 1000)
    );
  }

  /** The attempts and lapses, for a failure message. */
  history(): string {
    return JSON.stringify({ lease: this.name, lapses: this.lapses, attempts: this.attempts });
  }

  start(): this {
    this.done = this.loop();
    return this;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }

  private async loop(): Promise<void> {
    while (!this.stopped && !this.lost) {
      const sentAt = Date.now();
      const sentMono = monotonicMs();
      try {
        await this.tick();
        const returnedAt = Date.now();
        const returnedMono = monotonicMs();
        if (this.lastSentMono > 0 && returnedMono - this.lastSentMono >= this.durationSeconds * 1000)
          this.lapses.push({ from: this.lastRenewalSentAt, to: returnedAt });
        this.lastRenewalSentAt = sentAt;
        this.lastSentMono = sentMono;
        this.lastRenewalAt = returnedAt;
        this.renewals += 1;
        this.note(sentMono, returnedMono, `ok rv ${this.lease?.resourceVersion}`);
      } catch (err) {
        this.lease = undefined; // re-read next time
        this.note(sentMono, monotonicMs(), `failed: ${(err as Error).message}`);
      }
      const wait = this.renewMs - (Date.now() - sentAt);
      if (wait > 0 && !this.stopped) await sleep(wait);
    }
  }

  private note(sentMono: number, returnedMono: number, outcome: string): void {
    this.attempts.push({
      sent: Math.round(sentMono - this.startMono),
      returned: Math.round(returnedMono - this.startMono),
      outcome,
    });
    if (this.attempts.length > 40) this.attempts.shift();
  }

  private async tick(): Promise<void> {
    const time = new Date(Date.now() + this.renewTimeOffsetMs);
    let lease = this.lease ?? (await this.store.get(this.namespace, this.name, 1000));
    if (!lease) {
      const created = await this.store.create(
        newLeaseRecord(this.namespace, this.name, this.durationSeconds, {
          'leasehold.dev/share-manager': this.name,
        }),
        1000,
      );
      if (created.kind === 'conflict') throw new Error('create conflict');
      lease = created.lease;
    }
    const mine = lease.holder === this.holder;
    if (mine && lease.delinquentSince) {
      this.lost = true;
      throw new Error('declared dead');
    }
    if (!mine && lease.holder !== '' && !lease.delinquentSince) {
      if (this.renewals > 0) this.lost = true;
      throw new Error(`held by ${lease.holder}`);
    }
    const next: LeaseRecord = mine
      ? { ...lease, renewTime: time }
      : {
          ...lease,
          holder: this.holder,
          holderNode: this.node,
          acquireTime: time,
          renewTime: time,
          transitions: lease.transitions + 1,
          delinquentSince: undefined,
          failoverBy: undefined,
          durationSeconds: this.durationSeconds,
        };
    // A write whose answer never came (a timeout) may still have been committed: from
    // the first write sent, the lease may be ours, and a lapse counts from then.
    if (this.lastSentMono === 0) this.lastSentMono = monotonicMs();
    const outcome = await this.store.update(next, 1000);
    if (outcome.kind === 'conflict') {
      this.lease = undefined;
      throw new Error('conflict');
    }
    this.lease = outcome.lease;
  }
}
