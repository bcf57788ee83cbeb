/**
 * Which manager provisions: the holder of one Lease (`leasehold-provisioner` in the
 * provisioner namespace), as client-go's leaderelection and Kubernetes' external-
 * provisioner do. Every manager of the DaemonSet runs the same code; one acts.
 *
 * Why a leader, when every provisioning step is idempotent (decide-provisioning.ts):
 * not for safety (two managers acting at once only meet conflicts and 404s), but so
 * that N managers do not each send every request and event for every claim.
 *
 * The rule (decideLeadership, pure): a Lease held by someone else is taken only after
 * its resourceVersion stayed the same for the lease duration by OUR clock (observed
 * time, as the share leases are judged: immune to clock skew); every write is a
 * compare-and-swap. We count as leader only while our last successful write is younger
 * than the renew deadline (2/3 of the duration), so that a leader cut off stops acting
 * before anyone may take over.
 * Not guaranteed: a leader stalled (GC pause, frozen) past the duration may still finish
 * one step after another took over: harmless, see above.
 */
import type { Clock } from '../../lib/clock.ts';
import { failureGist } from '../../lib/errors.ts';
import { type LeaseRecord, newLeaseRecord } from '../../lib/lease-record.ts';
import type { LeaseStore } from '../../lib/lease-store.ts';
import type { Logger } from '../../lib/logger.ts';

export const PROVISIONER_LEASE = 'leasehold-provisioner';

export type LeadershipStep = 'create' | 'renew' | 'take' | 'follow';

/** What to do with the leadership Lease as read now. `seen`: when we first saw its current resourceVersion. */
export function decideLeadership(
  identity: string,
  lease: Pick<LeaseRecord, 'holder' | 'resourceVersion'> | undefined,
  seen: { resourceVersion: string; at: number } | undefined,
  now: number,
  durationMs: number,
): LeadershipStep {
  if (!lease) return 'create';
  if (lease.holder === identity) return 'renew';
  if (lease.holder === '') return 'take';
  if (seen?.resourceVersion === lease.resourceVersion && now - seen.at >= durationMs) return 'take';
  return 'follow';
}

export class ProvisionerLeadership {
  private seen: { resourceVersion: string; at: number } | undefined;
  private lastWriteAt: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private wasLeader = false;

  constructor(
    private readonly opts: {
      identity: string;
      namespace: string;
      durationMs: number;
      requestTimeoutMs: number;
      store: LeaseStore;
      clock: Clock;
      log: Logger;
      /** Called when we become leader (true) or stop being it (false). */
      onChange: (leader: boolean) => void;
    },
  ) {}

  get leader(): boolean {
    const at = this.lastWriteAt;
    return at !== undefined && this.opts.clock.now() - at < (this.opts.durationMs * 2) / 3;
  }

  start(): void {
    void this.round();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
  }

  private async round(): Promise<void> {
    const { clock, store, namespace, identity, durationMs, requestTimeoutMs, log } = this.opts;
    try {
      const lease = await store.get(namespace, PROVISIONER_LEASE, requestTimeoutMs);
      const now = clock.now();
      if (lease && lease.resourceVersion !== this.seen?.resourceVersion)
        this.seen = { resourceVersion: lease.resourceVersion, at: now };
      const step = decideLeadership(identity, lease, this.seen, now, durationMs);
      if (step !== 'follow') {
        const record = leaseRecord(namespace, identity, durationMs, lease, step);
        const written = lease
          ? await store.update(record, requestTimeoutMs)
          : await store.create(record, requestTimeoutMs);
        if (written.kind === 'written') {
          this.lastWriteAt = now;
          this.seen = { resourceVersion: written.lease.resourceVersion, at: now };
          if (step !== 'renew') log.info({ step }, 'provisioner leadership taken');
        }
      }
    } catch (err) {
      log.warn({ err: failureGist(err) }, 'provisioner leadership: lease round failed');
    }
    this.report();
    if (!this.stopped) this.timer = setTimeout(() => void this.round(), durationMs / 6);
  }

  private report(): void {
    const leader = this.leader;
    if (leader !== this.wasLeader) {
      this.wasLeader = leader;
      this.opts.log.info({ leader }, leader ? 'provisioning (leader)' : 'not provisioning (follower)');
      this.opts.onChange(leader);
    }
  }
}

function leaseRecord(
  namespace: string,
  identity: string,
  durationMs: number,
  current: LeaseRecord | undefined,
  step: LeadershipStep,
): LeaseRecord {
  const now = new Date();
  const base = current ?? newLeaseRecord(namespace, PROVISIONER_LEASE, Math.ceil(durationMs / 1000));
  return {
    ...base,
    holder: identity,
    holderNode: '',
    durationSeconds: Math.ceil(durationMs / 1000),
    acquireTime: step === 'renew' ? base.acquireTime : now,
    renewTime: now,
    transitions: base.transitions + (step === 'take' ? 1 : 0),
  };
}
