/**
 * Says so when a share-manager Lease leaves the manager's watch because its
 * `leasehold.dev/share-manager` label was removed (by hand, a buggy tool).
 *
 * Why: the Lease watch selects on that label, so the API server reports a removed label
 * as a deletion (with the previous content). The manager then forgets the lease: no
 * staleness verdict for it until the label is back — the safe answer (nothing is
 * declared dead on a lease nobody watches), but it must not be silent, and it must not
 * last: the reconciler, finding the ShareManager's Lease "missing" but present, puts the
 * label back by CAS (execute-reconcile.ts).
 *
 * Guarantees:
 *  - One read of the Lease per deletion seen by the watch; a Lease that still exists
 *    without the label gets one warn line (per lease, until it is seen labelled again).
 *  - A Lease really deleted (404) or labelled again by the time of the read says nothing.
 *  - A failed read is logged at debug and not retried: it concerns only the log line.
 */
import { LABEL_SHARE_MANAGER, type LeaseRecord } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';

export interface LeaseReader {
  readLease(namespace: string, name: string): Promise<LeaseRecord | undefined>;
}

export class LeaseLabelCheck {
  private readonly reported = new Set<string>();

  constructor(
    private readonly reader: LeaseReader,
    private readonly log: Logger,
  ) {}

  /** The watch delivered the lease (labelled): a later removal is news again. */
  leaseSeen(namespace: string, name: string): void {
    this.reported.delete(`${namespace}/${name}`);
  }

  /** The watch reported the lease deleted: find out whether only its label went. */
  leaseLeft(namespace: string, name: string): Promise<void> {
    const key = `${namespace}/${name}`;
    return this.reader.readLease(namespace, name).then(
      (lease) => {
        if (!lease) {
          this.reported.delete(key);
          return;
        }
        const labels = lease.wire.metadata?.labels ?? {};
        if (LABEL_SHARE_MANAGER in labels || this.reported.has(key)) return;
        this.reported.add(key);
        const field = `metadata.labels[${LABEL_SHARE_MANAGER}]`;
        const instead =
          'removed: the Lease left the manager watch (label selector); no staleness verdict for it until the label is back (the reconciler restores it)';
        this.log.warn(
          { lease: key, field, value: '(missing)', instead },
          `lease ${key}: ${field} = (missing): ${instead}`,
        );
      },
      (err: unknown) =>
        this.log.debug({ lease: key, err: String(err) }, 'cannot read a lease the watch reported deleted'),
    );
  }
}
