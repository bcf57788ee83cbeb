/**
 * The test playing a share-manager pod's agent on its Lease (no simulated node runs the
 * real agent in these tests): acquire by CAS, renew by CAS, stop when told or when the
 * lease is lost.
 */
import type * as k8s from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { type LeaseRecord, newLeaseRecord } from '../../lib/lease-record.ts';
import { KubeLeaseStore } from '../../lib/lease-store.ts';

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

  /** It has gone the lease duration without a renewal, in the past or up to `now`. */
  hasLapsed(now = Date.now()): boolean {
    return (
      this.lapses.length > 0 ||
      (this.renewals > 0 && now - this.lastRenewalSentAt >= this.durationSeconds * 1000)
    );
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
      try {
        await this.tick();
        const returnedAt = Date.now();
        if (this.renewals > 0 && returnedAt - this.lastRenewalSentAt >= this.durationSeconds * 1000)
          this.lapses.push({ from: this.lastRenewalSentAt, to: returnedAt });
        this.lastRenewalSentAt = sentAt;
        this.lastRenewalAt = returnedAt;
        this.renewals += 1;
      } catch {
        this.lease = undefined; // re-read next time
      }
      const wait = this.renewMs - (Date.now() - sentAt);
      if (wait > 0 && !this.stopped) await sleep(wait);
    }
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
    const outcome = await this.store.update(next, 1000);
    if (outcome.kind === 'conflict') {
      this.lease = undefined;
      throw new Error('conflict');
    }
    this.lease = outcome.lease;
  }
}
