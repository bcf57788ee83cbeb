/**
 * What `kubectl leasehold` knows of a share at one moment (read by cluster-reads.ts),
 * and the pure questions every command asks of it: which share a name on the command
 * line means, which claim a share serves.
 *
 * A share is found by its ShareManager's name first, else by the claim it serves (the
 * claim of a leasehold StorageClass it was provisioned for, annotation
 * leasehold.dev/provisioned-claim, or spec.consumer's claim): the name a user knows.
 * A name that fits several shares is refused with every candidate named, never guessed.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { LeaseRecord } from '../lib/lease-record.ts';
import { ANNOTATION_PROVISIONED_CLAIM } from '../manager/provisioning/provisioned-objects.ts';
import type { ShareManager } from '../manager/share-model/share-manager-spec.ts';

export interface ShareSnapshot {
  sm: ShareManager;
  /** The share's Lease (same namespace and name); undefined when it does not exist. */
  lease: LeaseRecord | undefined;
  /** The share's pods (label leasehold.dev/share-manager=<name>). */
  pods: readonly V1Pod[];
}

export function shareKey(sm: ShareManager): string {
  return `${sm.metadata.namespace ?? ''}/${sm.metadata.name ?? ''}`;
}

/** `namespace/name` of the claim the share serves, or undefined when it serves none. */
export function claimOf(sm: ShareManager): string | undefined {
  const provisioned = sm.metadata.annotations?.[ANNOTATION_PROVISIONED_CLAIM];
  if (provisioned) return provisioned;
  const consumer = sm.spec?.consumer?.claimName;
  return consumer ? `${sm.metadata.namespace ?? ''}/${consumer}` : undefined;
}

export type ShareLookup =
  | { kind: 'found'; sm: ShareManager }
  | { kind: 'missing' | 'ambiguous'; message: string };

/**
 * The share `name` names among `sms` (all of one namespace, or of every namespace when
 * `namespace` is undefined). With a namespace, a claim counts when it is in it.
 */
export function findShare(sms: readonly ShareManager[], name: string, namespace?: string): ShareLookup {
  const where = namespace === undefined ? 'in any namespace' : `in namespace ${namespace}`;
  const byName = sms.filter(
    (sm) => sm.metadata.name === name && (namespace === undefined || sm.metadata.namespace === namespace),
  );
  const candidates =
    byName.length > 0
      ? byName
      : sms.filter((sm) => {
          const claim = claimOf(sm);
          if (!claim) return false;
          const [claimNamespace, claimName] = claim.split('/');
          return claimName === name && (namespace === undefined || claimNamespace === namespace);
        });
  const [first, ...others] = candidates;
  if (!first)
    return {
      kind: 'missing',
      message: `share ${JSON.stringify(name)}: no ShareManager of that name, and none serving a claim of that name, ${where}`,
    };
  if (others.length > 0)
    return {
      kind: 'ambiguous',
      message: `share ${JSON.stringify(name)} fits ${candidates.length} shares (${candidates
        .map((sm) => `${shareKey(sm)}${byName.length > 0 ? '' : ` serving claim ${claimOf(sm)}`}`)
        .join(', ')}): give -n NAMESPACE`,
    };
  return { kind: 'found', sm: first };
}
