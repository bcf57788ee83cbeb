/**
 * Strict reading of a share-manager Lease's fields for the manager, pure. Anybody with
 * write access can put anything in a Lease (by hand, a buggy tool): no value may crash,
 * spin or mislead the manager. `inspectLease` returns the record the manager acts on
 * and one `OddField` per value it does not take as written, saying what it does instead.
 *
 * The rules (each odd value -> what the manager does):
 *  - spec.leaseDurationSeconds not a positive int32 (missing, 0, negative, fractional,
 *    not a number): judged by the floor (lease-duration.ts); never written back (0 in
 *    the record, which toWire omits). Valid but shorter than the floor: judged by the
 *    floor. Longer than any ShareManager may ask (600 s): honoured, but said.
 *  - spec.holderIdentity not a pod name: judged as held (a holder that stops renewing
 *    still fails over), but no pod is deleted for it (no pod can have that name).
 *  - leasehold.dev/holder-node missing or not a node name (while held): '' — the node is
 *    then taken from the holder pod's spec.nodeName when that pod is known; when it is
 *    not, the storm guard never explains that lease by a node failure.
 *  - leasehold.dev/delinquent not an RFC 3339 time: still delinquent, as the agents read
 *    it (any non-empty value), so manager and agents agree.
 *  - leasehold.dev/failover-by, while delinquent, missing or not a pod name: nobody runs
 *    that failover; undefined in the record, and a manager takes it over at once by CAS.
 *    Not a pod name while not delinquent: dropped (it is only read while delinquent).
 *  - leasehold.dev/failover-by-node not `<that manager>@<node name>`: the owner's node is
 *    unknown (undefined), so only the takeover timeout can end a stalled failover.
 *  - spec.renewTime / acquireTime not a time: undefined in the record (staleness never
 *    reads them; a change of the raw value still counts as a renewal).
 *  - spec.leaseTransitions not a non-negative integer: 0 in the record (a change of the
 *    raw value still counts as a renewal).
 *
 * `OddFieldMemory` keeps which (lease, field, value) was reported, so each odd value is
 * logged once per lease, not per event or per pass.
 */
import { formatDuration, isObjectName } from '../../lib/env-config.ts';
import {
  ANNOTATION_DELINQUENT,
  ANNOTATION_FAILOVER_BY,
  ANNOTATION_FAILOVER_BY_NODE,
  ANNOTATION_HOLDER_NODE,
  type LeaseRecord,
} from '../../lib/lease-record.ts';
import { validLeaseSeconds } from './lease-duration.ts';

export interface OddField {
  /** The field as a path, e.g. spec.leaseDurationSeconds or metadata.annotations[leasehold.dev/delinquent]. */
  field: string;
  /** The value as found (JSON, cut to 120 characters). */
  value: string;
  /** What the manager does instead. */
  instead: string;
}

/** The longest lease duration a ShareManager may ask for (manager config's upper bound). */
const LONGEST_SANE_SECONDS = 600;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

function shown(value: unknown): string {
  let text: string;
  if (value instanceof Date) text = Number.isNaN(value.getTime()) ? 'Invalid Date' : value.toISOString();
  else if (value === undefined) text = '(missing)';
  else text = JSON.stringify(value) ?? String(value);
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

const annotation = (name: string) => `metadata.annotations[${name}]`;

function validTime(value: Date | undefined): Date | undefined {
  return value instanceof Date && !Number.isNaN(value.getTime()) ? value : undefined;
}

/**
 * The record the manager acts on, and the odd values found. `floorMs` is the duration
 * floor for this lease (lease-duration.ts), for the message about a short duration.
 */
export function inspectLease(lease: LeaseRecord, floorMs: number): { lease: LeaseRecord; odd: OddField[] } {
  const odd: OddField[] = [];
  const spec = lease.wire.spec ?? {};
  const annotations = lease.wire.metadata?.annotations ?? {};
  const floor = formatDuration(floorMs);

  // Duration.
  const rawDuration = 'leaseDurationSeconds' in spec ? spec.leaseDurationSeconds : lease.durationSeconds;
  const seconds = validLeaseSeconds(rawDuration);
  if (seconds === undefined) {
    odd.push({
      field: 'spec.leaseDurationSeconds',
      value: shown(rawDuration),
      instead: `not a positive whole number of seconds: judged by the ShareManager's lease duration ${floor}`,
    });
  } else if (seconds * 1000 < floorMs) {
    odd.push({
      field: 'spec.leaseDurationSeconds',
      value: shown(rawDuration),
      instead: `shorter than the ShareManager's lease duration ${floor} (the holder's agent fences only after its renew deadline): judged by ${floor}`,
    });
  } else if (seconds > LONGEST_SANE_SECONDS) {
    odd.push({
      field: 'spec.leaseDurationSeconds',
      value: shown(rawDuration),
      instead: `longer than any ShareManager may ask (${LONGEST_SANE_SECONDS}s): honoured as written, so a holder that stops renewing fails over only after ${seconds}s`,
    });
  }

  // Holder.
  const rawHolder: unknown = lease.holder;
  let holder = '';
  if (typeof rawHolder === 'string') holder = rawHolder;
  // NB: never a usable pod name, so no pod is ever deleted for it.
  else if (rawHolder !== undefined && rawHolder !== null) holder = `(not a string) ${shown(rawHolder)}`;
  if (holder !== '' && !isObjectName(holder)) {
    odd.push({
      field: 'spec.holderIdentity',
      value: shown(rawHolder),
      instead: 'not a pod name: judged as held, but a failover deletes no pod for it',
    });
  }

  // Holder node (only meaningful while held).
  const rawNode: unknown = annotations[ANNOTATION_HOLDER_NODE] ?? lease.holderNode;
  const holderNode = isObjectName(rawNode) ? rawNode : '';
  if (holder !== '' && holderNode === '') {
    const missing = rawNode === undefined || rawNode === '';
    odd.push({
      field: annotation(ANNOTATION_HOLDER_NODE),
      value: shown(missing ? undefined : rawNode),
      instead: `${missing ? 'missing' : 'not a node name'}: the holder's node is taken from its pod when known, else unknown (and then the storm guard never explains this lease by a node failure)`,
    });
  }

  // Delinquent mark (presence is what counts, for the agents too).
  const delinquentSince =
    typeof lease.delinquentSince === 'string' && lease.delinquentSince !== ''
      ? lease.delinquentSince
      : undefined;
  if (
    delinquentSince !== undefined &&
    !(RFC3339.test(delinquentSince) && !Number.isNaN(Date.parse(delinquentSince)))
  ) {
    odd.push({
      field: annotation(ANNOTATION_DELINQUENT),
      value: shown(delinquentSince),
      instead: 'not an RFC 3339 time: treated as delinquent all the same (as the agents read it)',
    });
  }

  // Who runs the failover.
  let failoverBy =
    typeof lease.failoverBy === 'string' && lease.failoverBy !== '' ? lease.failoverBy : undefined;
  if (delinquentSince !== undefined && !isObjectName(failoverBy)) {
    odd.push({
      field: annotation(ANNOTATION_FAILOVER_BY),
      value: shown(annotations[ANNOTATION_FAILOVER_BY]),
      instead:
        'names no manager while the lease is delinquent: nobody runs this failover; a manager takes it over at once (by CAS)',
    });
    failoverBy = undefined;
  } else if (failoverBy !== undefined && !isObjectName(failoverBy)) {
    odd.push({
      field: annotation(ANNOTATION_FAILOVER_BY),
      value: shown(failoverBy),
      instead: 'not a manager name (and the lease is not delinquent): ignored',
    });
    failoverBy = undefined;
  }

  // Where that manager runs (owner-lost.ts): only a node name counts; only with failoverBy.
  let failoverByNode = failoverBy !== undefined ? lease.failoverByNode : undefined;
  if (failoverByNode !== undefined && !isObjectName(failoverByNode)) {
    odd.push({
      field: annotation(ANNOTATION_FAILOVER_BY_NODE),
      value: shown(annotations[ANNOTATION_FAILOVER_BY_NODE]),
      instead: "not a node name: the owner's node is unknown (a takeover waits for the timeout)",
    });
    failoverByNode = undefined;
  }

  // Times and transitions: informational, but they must not break a write back.
  const acquireTime = validTime(lease.acquireTime);
  if (lease.acquireTime !== undefined && acquireTime === undefined)
    odd.push({
      field: 'spec.acquireTime',
      value: shown(spec.acquireTime ?? lease.acquireTime),
      instead: 'not a time: ignored',
    });
  const renewTime = validTime(lease.renewTime);
  if (lease.renewTime !== undefined && renewTime === undefined)
    odd.push({
      field: 'spec.renewTime',
      value: shown(spec.renewTime ?? lease.renewTime),
      instead: 'not a time: ignored (staleness never reads it; a change still counts as a renewal)',
    });
  const transitions =
    typeof lease.transitions === 'number' && Number.isSafeInteger(lease.transitions) && lease.transitions >= 0
      ? lease.transitions
      : 0;
  if (transitions !== lease.transitions)
    odd.push({
      field: 'spec.leaseTransitions',
      value: shown(lease.transitions),
      instead: 'not a non-negative integer: taken as 0 (a change still counts as a renewal)',
    });

  return {
    lease: {
      ...lease,
      holder,
      holderNode,
      durationSeconds: seconds ?? 0,
      acquireTime,
      renewTime,
      transitions,
      delinquentSince,
      failoverBy,
      failoverByNode,
    },
    odd,
  };
}

/** Remembers the odd values already reported, per lease, so each is logged once. */
export class OddFieldMemory {
  private readonly reported = new Map<string, Set<string>>();

  /** At most this many distinct odd values are reported per lease (then one line says so). */
  static readonly LIMIT = 16;

  /** The odd values of `key` not reported before; marks them reported. */
  fresh(key: string, odd: readonly OddField[]): OddField[] {
    if (odd.length === 0) return [];
    let seen = this.reported.get(key);
    if (!seen) {
      seen = new Set();
      this.reported.set(key, seen);
    }
    const out: OddField[] = [];
    for (const o of odd) {
      const id = `${o.field}=${o.value}`;
      if (seen.has(id) || seen.size > OddFieldMemory.LIMIT) continue;
      seen.add(id);
      if (seen.size > OddFieldMemory.LIMIT) {
        out.push({
          field: '(any)',
          value: '(more)',
          instead: 'further odd values of this lease are not logged',
        });
        break;
      }
      out.push(o);
    }
    return out;
  }

  forget(key: string): void {
    this.reported.delete(key);
  }
}
