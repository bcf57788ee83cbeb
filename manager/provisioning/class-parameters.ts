/**
 * A leasehold StorageClass's `parameters` (pure): read into the ShareManager spec a claim
 * of the class gets, or refused with every problem named by parameter and rule.
 *
 * Guarantees:
 *  - An unknown parameter is an error, never ignored: a typo ("nfsVersion") would
 *    otherwise silently give the default.
 *  - The spec built is checked by the ShareManager's own rules (resolveSpec: timings,
 *    the shipped server's NFS settings reader), so a class the manager accepts gives a
 *    ShareManager the manager accepts; the messages name the parameter, not the spec
 *    field ("leaseDuration=3s (spec.lease.duration): ...").
 *  - Parameters of a StorageClass are immutable (the API refuses updates), so a class
 *    refused once is refused for every claim: the caller reports it on each claim
 *    (ProvisioningFailed) and creates nothing.
 * Not checked here: that `backingStorageClass` exists (a missing class leaves the backing
 * claim Pending; the caller reports that) or that tolerations are well formed beyond
 * being a JSON array of objects (the API server's dry run of the pod checks them, see
 * execute-reconcile.ts).
 */
import type { V1Affinity, V1Toleration } from '@kubernetes/client-node';
import type { LeaseTimings } from '../config.ts';
import type { NfsSettings } from '../share-model/nfs-server-preset.ts';
import { resolveSpec, type ShareManagerSpec } from '../share-model/share-manager-spec.ts';

/** The provisioner name of leasehold's StorageClasses (StorageClass.provisioner). */
export const PROVISIONER_NAME = 'leasehold.dev/nfs';
/** Where the shipped server exports the backing volume in provisioned shares. */
export const PROVISIONED_MOUNT_PATH = '/export';

/** Each parameter: the spec field it sets (for messages) and a one-line rule. */
export const CLASS_PARAMETERS = {
  backingStorageClass: { field: 'the backing claim storageClassName', rule: 'a StorageClass name' },
  backingNamespace: {
    field: 'the namespace of the backing claim and ShareManager',
    rule: 'a namespace name',
  },
  nfsVersions: { field: 'spec.nfs.versions', rule: 'a comma-separated list of 3, 4.1, 4.2' },
  nfsClients: { field: 'spec.nfs.clients', rule: 'a comma-separated list of client addresses or CIDRs' },
  squash: { field: 'spec.nfs.squash', rule: 'one of the server squash modes' },
  anonymousUid: { field: 'spec.nfs.anonymousUid', rule: 'a numeric uid' },
  anonymousGid: { field: 'spec.nfs.anonymousGid', rule: 'a numeric gid' },
  exportUid: { field: 'spec.nfs.exportUid', rule: 'a numeric uid' },
  exportGid: { field: 'spec.nfs.exportGid', rule: 'a numeric gid' },
  exportMode: { field: 'spec.nfs.exportMode', rule: 'an octal mode such as 0775' },
  nfsGracePeriod: { field: 'spec.nfs.gracePeriod', rule: 'a duration' },
  nfsLeaseLifetime: { field: 'spec.nfs.leaseLifetime', rule: 'a duration' },
  nodeSelector: { field: 'spec.scheduling.nodeSelector', rule: 'key=value pairs separated by commas' },
  tolerations: { field: 'spec.scheduling.tolerations', rule: 'a JSON array of tolerations' },
  affinity: { field: 'spec.scheduling.affinity', rule: 'a JSON object as a pod spec affinity' },
  priorityClassName: { field: 'spec.scheduling.priorityClassName', rule: 'a PriorityClass name' },
  serverCpuRequest: { field: 'spec.resources.server.requests.cpu', rule: 'a quantity' },
  serverMemoryRequest: { field: 'spec.resources.server.requests.memory', rule: 'a quantity' },
  serverCpuLimit: { field: 'spec.resources.server.limits.cpu', rule: 'a quantity' },
  serverMemoryLimit: { field: 'spec.resources.server.limits.memory', rule: 'a quantity' },
  agentCpuRequest: { field: 'spec.resources.agent.requests.cpu', rule: 'a quantity' },
  agentMemoryRequest: { field: 'spec.resources.agent.requests.memory', rule: 'a quantity' },
  agentCpuLimit: { field: 'spec.resources.agent.limits.cpu', rule: 'a quantity' },
  agentMemoryLimit: { field: 'spec.resources.agent.limits.memory', rule: 'a quantity' },
  leaseDuration: { field: 'spec.lease.duration', rule: 'a duration' },
  renewInterval: { field: 'spec.lease.renewInterval', rule: 'a duration' },
  renewDeadline: { field: 'spec.lease.renewDeadline', rule: 'a duration' },
  retryPeriod: { field: 'spec.lease.retryPeriod', rule: 'a duration' },
} as const;
export type ClassParameter = keyof typeof CLASS_PARAMETERS;

export interface ProvisionSettings {
  /** undefined: the cluster's default StorageClass (storageClassName left unset). */
  backingStorageClass: string | undefined;
  backingNamespace: string;
  /** The ShareManager spec but `volume` (the backing claim, named per claim). */
  share: Omit<ShareManagerSpec, 'volume'>;
}

export type ParsedParameters = { ok: true; settings: ProvisionSettings } | { ok: false; message: string };

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
/** Kubernetes' resource.Quantity syntax. */
const QUANTITY = /^[+]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+|[KMGTPE]i|[numkMGTPE])?$/;

/**
 * Reads `parameters` of StorageClass `className`. `defaultNamespace`: where backing
 * claims go without `backingNamespace` (the manager's LEASEHOLD_PROVISIONER_NAMESPACE);
 * `onlyNamespace`: the manager's watch namespace, if it has one (a share elsewhere would
 * never be reconciled); `defaults`: the manager's lease timings, for the cross-field rules.
 */
export function parseClassParameters(
  className: string,
  parameters: Record<string, string> | undefined,
  context: { defaultNamespace: string; onlyNamespace: string | undefined; defaults: LeaseTimings },
): ParsedParameters {
  const p = parameters ?? {};
  const problems: string[] = [];
  const named = (key: ClassParameter) => `${key}=${JSON.stringify(p[key])}`;
  for (const key of Object.keys(p))
    if (!(key in CLASS_PARAMETERS))
      problems.push(`${key}: unknown parameter (known: ${Object.keys(CLASS_PARAMETERS).join(', ')})`);
  const list = (key: ClassParameter) =>
    p[key]
      ?.split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '');

  const backingStorageClass = p.backingStorageClass?.trim() || undefined;
  if (backingStorageClass !== undefined && !DNS_SUBDOMAIN.test(backingStorageClass))
    problems.push(`${named('backingStorageClass')}: must be a StorageClass name (a DNS subdomain)`);
  const backingNamespace = p.backingNamespace?.trim() || context.defaultNamespace;
  if (!DNS_LABEL.test(backingNamespace))
    problems.push(`${named('backingNamespace')}: must be a namespace name (a DNS label)`);
  else if (context.onlyNamespace !== undefined && backingNamespace !== context.onlyNamespace)
    problems.push(
      `backingNamespace ${JSON.stringify(backingNamespace)}: the manager watches only namespace ${JSON.stringify(context.onlyNamespace)} (LEASEHOLD_WATCH_NAMESPACE), so a share elsewhere would never run`,
    );

  const nfs: NfsSettings = {};
  const versions = list('nfsVersions');
  if (versions) nfs.versions = versions as NfsSettings['versions'];
  const clients = list('nfsClients');
  if (clients) nfs.clients = clients;
  if (p.squash !== undefined) nfs.squash = p.squash.trim() as NfsSettings['squash'];
  for (const key of ['anonymousUid', 'anonymousGid', 'exportUid', 'exportGid'] as const) {
    const text = p[key]?.trim();
    if (text === undefined) continue;
    if (!/^\d{1,10}$/.test(text) || Number(text) > 4_294_967_294)
      problems.push(`${named(key)}: must be a numeric id from 0 to 4294967294`);
    else nfs[key] = Number(text);
  }
  if (p.exportMode !== undefined) nfs.exportMode = p.exportMode.trim();
  if (p.nfsGracePeriod !== undefined) nfs.gracePeriod = p.nfsGracePeriod.trim();
  if (p.nfsLeaseLifetime !== undefined) nfs.leaseLifetime = p.nfsLeaseLifetime.trim();

  const scheduling: NonNullable<ShareManagerSpec['scheduling']> = {};
  const pairs = list('nodeSelector');
  if (pairs) {
    const selector: Record<string, string> = {};
    for (const pair of pairs) {
      const at = pair.indexOf('=');
      if (at <= 0) problems.push(`${named('nodeSelector')}: ${JSON.stringify(pair)} is not key=value`);
      else selector[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
    }
    scheduling.nodeSelector = selector;
  }
  if (p.tolerations !== undefined) {
    const tolerations = parseJson(p.tolerations);
    if (!Array.isArray(tolerations) || tolerations.some((t) => typeof t !== 'object' || t === null))
      problems.push(`${named('tolerations')}: must be a JSON array of toleration objects`);
    else scheduling.tolerations = tolerations as V1Toleration[];
  }

  if (p.affinity !== undefined) {
    const affinity = parseJson(p.affinity);
    if (typeof affinity !== 'object' || affinity === null || Array.isArray(affinity))
      problems.push(
        `${named('affinity')}: must be a JSON object (nodeAffinity, podAffinity, podAntiAffinity)`,
      );
    else scheduling.affinity = affinity as V1Affinity;
  }
  const priorityClassName = p.priorityClassName?.trim();
  if (priorityClassName !== undefined) {
    if (!DNS_SUBDOMAIN.test(priorityClassName))
      problems.push(`${named('priorityClassName')}: must be a PriorityClass name (a DNS subdomain)`);
    else scheduling.priorityClassName = priorityClassName;
  }

  const resources: NonNullable<ShareManagerSpec['resources']> = {};
  for (const container of ['server', 'agent'] as const)
    for (const [kind, suffix] of [
      ['requests', 'Request'],
      ['limits', 'Limit'],
    ] as const)
      for (const [resource, infix] of [
        ['cpu', 'Cpu'],
        ['memory', 'Memory'],
      ] as const) {
        const key = `${container}${infix}${suffix}` as ClassParameter;
        const text = p[key]?.trim();
        if (text === undefined) continue;
        if (!QUANTITY.test(text)) {
          problems.push(`${named(key)}: must be a quantity such as 100m, 0.5, 64Mi or 1Gi`);
          continue;
        }
        const requirements = resources[container] ?? {};
        requirements[kind] = { ...requirements[kind], [resource]: text };
        resources[container] = requirements;
      }

  const lease: NonNullable<ShareManagerSpec['lease']> = {};
  if (p.leaseDuration !== undefined) lease.duration = p.leaseDuration.trim();
  if (p.renewInterval !== undefined) lease.renewInterval = p.renewInterval.trim();
  if (p.renewDeadline !== undefined) lease.renewDeadline = p.renewDeadline.trim();
  if (p.retryPeriod !== undefined) lease.retryPeriod = p.retryPeriod.trim();

  const share: Omit<ShareManagerSpec, 'volume'> = {
    ...(Object.keys(nfs).length > 0 ? { nfs } : {}),
    ...(Object.keys(scheduling).length > 0 ? { scheduling } : {}),
    ...(Object.keys(lease).length > 0 ? { lease } : {}),
    ...(Object.keys(resources).length > 0 ? { resources } : {}),
  };
  // The ShareManager's own rules over the spec this class gives (a placeholder claim name).
  const resolved = resolveSpec(
    { ...share, volume: { pvc: 'backing', mountPath: PROVISIONED_MOUNT_PATH } },
    context.defaults,
  );
  if (!resolved.ok) problems.push(...resolved.message.split('; ').map(inParameterTerms));
  if (problems.length > 0) return { ok: false, message: `StorageClass ${className}: ${problems.join('; ')}` };
  return { ok: true, settings: { backingStorageClass, backingNamespace, share } };
}

/** "spec.lease.duration=..." -> "leaseDuration (spec.lease.duration): ..." where a parameter sets the field. */
function inParameterTerms(problem: string): string {
  for (const [key, { field }] of Object.entries(CLASS_PARAMETERS))
    if (field.startsWith('spec.') && problem.startsWith(field)) return `parameter ${key} (${problem})`;
  return problem;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
