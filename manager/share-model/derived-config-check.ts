/**
 * One set of rules (issue 27 item 8): a ShareManager is refused when the agent or the
 * shipped NFS server would refuse, at start, the env the manager derives for them. The
 * manager does not restate their rules: it runs their own readers (agent/config.ts
 * readAgentConfig, server/nfs-ganesha/config.ts readNfsServerConfig) over each
 * container's env exactly as built for the pod, so a spec that passes here starts, and
 * a rule added to either reader applies to the manager at once. Pure: no I/O.
 *
 * The downward-API values a kubelet fills in (the pod's name and namespace, its node)
 * are replaced by valid stand-ins. Each problem names the spec field that set the
 * variable, with what the user wrote (or that the manager's default was used), then the
 * reader's own words. A user's own server (`spec.server`) is checked for its agent only:
 * its env is the user's.
 *
 * Not checked here: what the API server refuses in the pod or Service (that is a
 * server-side dry run, share-manager-controller.ts), and the file system (volume.ts).
 */
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { readAgentConfig } from '../../agent/config.ts';
import { ConfigError } from '../../lib/errors.ts';
import { readNfsServerConfig } from '../../server/nfs-ganesha/config.ts';
import type { ShareManager } from './share-manager-spec.ts';

/** The spec field (dotted, under the ShareManager) each derived env var comes from. */
const ENV_FIELDS: Readonly<Record<string, string>> = {
  LEASEHOLD_LEASE_DURATION: 'spec.lease.duration',
  LEASEHOLD_RENEW_INTERVAL: 'spec.lease.renewInterval',
  LEASEHOLD_RENEW_DEADLINE: 'spec.lease.renewDeadline',
  LEASEHOLD_RETRY_PERIOD: 'spec.lease.retryPeriod',
  LEASEHOLD_FENCE_ACTION: 'spec.fence.action',
  LEASEHOLD_FENCE_PROCESS: 'spec.fence.process',
  LEASEHOLD_FENCE_SIGNAL: 'spec.fence.signal',
  LEASEHOLD_FENCE_COMMAND: 'spec.fence.command',
  LEASEHOLD_FENCE_GRACE: 'spec.fence.grace',
  LEASEHOLD_FENCE_TIMEOUT: 'spec.fence.timeout',
  LEASEHOLD_SERVER_CHECK: 'spec.serverCheck.target',
  LEASEHOLD_SERVER_CHECK_TIMEOUT: 'spec.serverCheck.timeout',
  LEASEHOLD_SERVER_CHECK_FAILURES: 'spec.serverCheck.failures',
  LEASEHOLD_NFS_EXPORT_PATH: 'spec.volume.mountPath',
  LEASEHOLD_NFS_PSEUDO_PATH: 'spec.volume.mountPath',
  LEASEHOLD_NFS_VERSIONS: 'spec.nfs.versions',
  LEASEHOLD_NFS_GRACE_PERIOD: 'spec.nfs.gracePeriod',
  LEASEHOLD_NFS_LEASE_LIFETIME: 'spec.nfs.leaseLifetime',
  LEASEHOLD_NFS_CLIENTS: 'spec.nfs.clients',
  LEASEHOLD_NFS_SQUASH: 'spec.nfs.squash',
  LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE: 'spec.lease.duration minus spec.lease.renewDeadline',
};

/** Stand-ins for what the kubelet fills in from the downward API. */
function fieldRefValue(path: string, sm: ShareManager): string {
  switch (path) {
    case 'metadata.namespace':
      return sm.metadata.namespace ?? 'default';
    case 'metadata.name':
      return `${sm.metadata.name ?? 'share'}-abcde`.slice(0, 253);
    case 'spec.nodeName':
      return 'node-a';
    default:
      return 'x';
  }
}

/** The env a container would see (values from other sources, secrets say, are left out). */
function containerEnv(container: V1Container, sm: ShareManager): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of container.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef) env[e.name] = fieldRefValue(e.valueFrom.fieldRef.fieldPath, sm);
  }
  return env;
}

/** The value the user wrote at a dotted spec path, as JSON; undefined when unset. */
function written(sm: ShareManager, field: string): string | undefined {
  if (!field.startsWith('spec.') || field.includes(' ')) return undefined;
  let at: unknown = sm;
  for (const key of field.split('.')) {
    if (at === null || typeof at !== 'object') return undefined;
    at = (at as Record<string, unknown>)[key];
  }
  return at === undefined ? undefined : JSON.stringify(at);
}

/** `problem` (the reader's words, naming env vars) with the spec fields behind them first. */
function inSpecTerms(problem: string, sm: ShareManager, who: string): string {
  const vars = [...new Set(problem.match(/LEASEHOLD_[A-Z0-9_]+/g) ?? [])];
  const fields = [...new Set(vars.map((v) => ENV_FIELDS[v]).filter((f): f is string => f !== undefined))];
  const named = fields.map((f) => {
    const value = written(sm, f);
    return value === undefined
      ? f.includes(' ')
        ? f
        : `${f} (unset: the manager's default)`
      : `${f}=${value}`;
  });
  return `${named.length > 0 ? named.join(', ') : 'the derived configuration'}: ${who} would refuse it at start: ${problem}`;
}

/** What the pod's agent and (shipped) server would refuse in the env built for them; [] when nothing. */
export function derivedConfigProblems(pod: V1Pod, sm: ShareManager): string[] {
  const problems: string[] = [];
  const check = (
    container: V1Container | undefined,
    who: string,
    read: (env: Record<string, string>) => unknown,
  ) => {
    if (!container) return;
    try {
      read(containerEnv(container, sm));
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      problems.push(...err.problems.map((p) => inSpecTerms(p, sm, who)));
    }
  };
  check(
    pod.spec?.initContainers?.find((c) => c.name === 'agent'),
    'the agent',
    readAgentConfig,
  );
  if (sm.spec.server === undefined)
    check(
      pod.spec?.containers.find((c) => c.name === 'server'),
      'the shipped NFS server',
      readNfsServerConfig,
    );
  return problems;
}
