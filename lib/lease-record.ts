/**
 * The per-volume Lease as this project sees it, with pure converters to and from the
 * coordination.k8s.io/v1 wire object. See docs/design.md, "Objects".
 *
 * Invariants:
 *  - `holder` is a pod name (one incarnation); '' means free.
 *  - `transitions` is the fencing token: it grows on every change of holder.
 *  - acquireTime/renewTime are informational. Nobody compares them with a local clock;
 *    freshness is judged from when a change was *observed* (see manager/staleness).
 *  - Every write is a compare-and-swap on `resourceVersion` (see lease-store.ts).
 */
import type { V1Lease } from '@kubernetes/client-node';

export const GROUP = 'leasehold.dev';
export const LABEL_SHARE_MANAGER = `${GROUP}/share-manager`;
export const ANNOTATION_HOLDER_NODE = `${GROUP}/holder-node`;
export const ANNOTATION_DELINQUENT = `${GROUP}/delinquent`;
export const ANNOTATION_FAILOVER_BY = `${GROUP}/failover-by`;
/** The witness set the holder counts promises against (`a,b,c`): its replacement asks them for clearances. */
export const ANNOTATION_WITNESSES = `${GROUP}/witnesses`;
/** The holder's cap on serving without the API (ms); absent: none. Its replacement may open after it without clearances. */
export const ANNOTATION_SERVE_WITHOUT_API = `${GROUP}/serve-without-api-ms`;
/** `<from>/<to>` (RFC 3339): the holder's last period of serving on witness promises, written at its first renewal after it. */
export const ANNOTATION_SERVED_ON_PROMISES = `${GROUP}/served-on-promises`;
/** `<manager pod>@<node>`: the node of the manager named in failover-by, as that manager wrote it. */
export const ANNOTATION_FAILOVER_BY_NODE = `${GROUP}/failover-by-node`;

export interface LeaseRecord {
  namespace: string;
  name: string;
  holder: string;
  holderNode: string;
  durationSeconds: number;
  acquireTime: Date | undefined;
  renewTime: Date | undefined;
  transitions: number;
  /** RFC 3339 time a manager declared the holder dead; undefined when not delinquent. */
  delinquentSince: string | undefined;
  /** Identity of the manager that won the right to run the current failover. */
  failoverBy: string | undefined;
  /**
   * The node that manager runs on; undefined when not written, or written for another
   * manager than failoverBy (an older manager's mark leaves an earlier value behind).
   */
  failoverByNode: string | undefined;
  /** Written by the agent that acquired: its witness set (names), empty when it has none. */
  witnesses?: string[];
  /** Written by the agent that acquired: its cap on serving on promises, ms; undefined = none. */
  serveWithoutApiMs?: number | undefined;
  /** `<from>/<to>`: the holder's last period on witness promises; '' removes it (a new holder). */
  servedOnPromises?: string | undefined;
  resourceVersion: string;
  /** The object as read, so that a write keeps every field this code does not own. */
  wire: V1Lease;
}

export function leaseKey(lease: { namespace: string; name: string }): string {
  return `${lease.namespace}/${lease.name}`;
}

export function fromWire(wire: V1Lease): LeaseRecord {
  const annotations = wire.metadata?.annotations ?? {};
  return {
    namespace: wire.metadata?.namespace ?? '',
    name: wire.metadata?.name ?? '',
    holder: wire.spec?.holderIdentity ?? '',
    holderNode: annotations[ANNOTATION_HOLDER_NODE] ?? '',
    durationSeconds: wire.spec?.leaseDurationSeconds ?? 0,
    acquireTime: wire.spec?.acquireTime ? new Date(wire.spec.acquireTime) : undefined,
    renewTime: wire.spec?.renewTime ? new Date(wire.spec.renewTime) : undefined,
    transitions: wire.spec?.leaseTransitions ?? 0,
    delinquentSince: annotations[ANNOTATION_DELINQUENT] || undefined,
    failoverBy: annotations[ANNOTATION_FAILOVER_BY] || undefined,
    failoverByNode: ownerNode(annotations[ANNOTATION_FAILOVER_BY_NODE], annotations[ANNOTATION_FAILOVER_BY]),
    witnesses: (annotations[ANNOTATION_WITNESSES] ?? '')
      .split(',')
      .map((w) => w.trim())
      .filter((w) => w !== ''),
    serveWithoutApiMs: positiveInteger(annotations[ANNOTATION_SERVE_WITHOUT_API]),
    servedOnPromises: annotations[ANNOTATION_SERVED_ON_PROMISES] || undefined,
    resourceVersion: wire.metadata?.resourceVersion ?? '',
    wire,
  };
}

/** The wire object for `record`, keeping every field of `record.wire` it does not own. */
export function toWire(record: LeaseRecord): V1Lease {
  const annotations: Record<string, string> = { ...(record.wire.metadata?.annotations ?? {}) };
  setOrDelete(annotations, ANNOTATION_HOLDER_NODE, record.holderNode);
  setOrDelete(annotations, ANNOTATION_DELINQUENT, record.delinquentSince);
  setOrDelete(annotations, ANNOTATION_FAILOVER_BY, record.failoverBy);
  setOrDelete(
    annotations,
    ANNOTATION_FAILOVER_BY_NODE,
    record.failoverBy && record.failoverByNode ? `${record.failoverBy}@${record.failoverByNode}` : undefined,
  );
  if (record.witnesses !== undefined)
    setOrDelete(annotations, ANNOTATION_WITNESSES, record.witnesses.join(',') || undefined);
  if (record.servedOnPromises !== undefined)
    setOrDelete(annotations, ANNOTATION_SERVED_ON_PROMISES, record.servedOnPromises || undefined);
  if (record.witnesses !== undefined)
    setOrDelete(
      annotations,
      ANNOTATION_SERVE_WITHOUT_API,
      record.serveWithoutApiMs === undefined ? undefined : String(record.serveWithoutApiMs),
    );
  return {
    ...record.wire,
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: {
      ...record.wire.metadata,
      namespace: record.namespace,
      name: record.name,
      annotations,
      ...(record.resourceVersion ? { resourceVersion: record.resourceVersion } : {}),
    },
    spec: {
      ...record.wire.spec,
      holderIdentity: record.holder,
      // NB: the API rejects 0, negatives and non-integers; a Lease read without one keeps none.
      leaseDurationSeconds:
        Number.isInteger(record.durationSeconds) && record.durationSeconds > 0
          ? record.durationSeconds
          : undefined,
      acquireTime: microTime(record.acquireTime),
      renewTime: microTime(record.renewTime),
      leaseTransitions: record.transitions,
    },
  };
}

function positiveInteger(text: string | undefined): number | undefined {
  const n = Number(text);
  return text !== undefined && Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/** The node part of `<manager pod>@<node>` when the pod part is `failoverBy`. */
function ownerNode(value: string | undefined, failoverBy: string | undefined): string | undefined {
  const at = value?.lastIndexOf('@') ?? -1;
  if (!value || !failoverBy || at <= 0 || value.slice(0, at) !== failoverBy) return undefined;
  return value.slice(at + 1) || undefined;
}

/** A blank record for a Lease that does not exist yet. */
export function newLeaseRecord(
  namespace: string,
  name: string,
  durationSeconds: number,
  labels: Record<string, string> = {},
): LeaseRecord {
  return {
    namespace,
    name,
    holder: '',
    holderNode: '',
    durationSeconds,
    acquireTime: undefined,
    renewTime: undefined,
    transitions: 0,
    delinquentSince: undefined,
    failoverBy: undefined,
    failoverByNode: undefined,
    resourceVersion: '',
    wire: { metadata: { namespace, name, labels } },
  };
}

/**
 * NB: the API rejects millisecond RFC 3339 times in MicroTime fields; this serialises
 * with microseconds. (client-node's V1MicroTime does the same, but importing it loads
 * all of client-node, ~80 MB of RSS the agent does not otherwise need.)
 */
export class MicroTime extends Date {
  override toISOString(): string {
    return `${super.toISOString().slice(0, -1)}000Z`;
  }
}

function microTime(date: Date | undefined): MicroTime | undefined {
  // NB: an Invalid Date would throw at serialisation; it is dropped instead.
  return date === undefined || Number.isNaN(date.getTime()) ? undefined : new MicroTime(date.getTime());
}

function setOrDelete(map: Record<string, string>, key: string, value: string | undefined): void {
  if (value) map[key] = value;
  else delete map[key];
}
