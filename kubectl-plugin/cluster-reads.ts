/**
 * The reads of `kubectl leasehold` (the thin shell): ShareManagers, their Leases, pods,
 * Events and the agent container's log, through the user's kubeconfig. Only get, list
 * and pods/log: nothing here writes (docs/operations.md, "kubectl leasehold", lists the
 * RBAC, and the integration test runs with exactly that).
 *
 * Guarantees: every request has a deadline (REQUEST_DEADLINE_MS), so an API server that
 * accepts the connection and never answers ends in an error, not a hang. A failed read
 * throws lib/errors.ts's KubeApiError naming the operation (plugin-error.ts words it),
 * except the agent log, whose failure is a value (`why` says it and goes on: a pod whose
 * node is gone has no log to give) and a missing Lease (undefined). A 404 on the
 * ShareManager list means the CRD is not installed, said as such.
 */
import * as k8s from '@kubernetes/client-node';
import { apiMessageOf } from '../lib/errors.ts';
import { kubeCall, statusOf, withDeadline } from '../lib/kube-client.ts';
import { fromWire, LABEL_SHARE_MANAGER, type LeaseRecord } from '../lib/lease-record.ts';
import { AGENT_CONTAINER } from '../manager/share-model/pod-spec.ts';
import {
  type ShareManager,
  SM_GROUP,
  SM_PLURAL,
  SM_VERSION,
} from '../manager/share-model/share-manager-spec.ts';
import { PluginError } from './plugin-error.ts';
import type { AgentLog } from './why-verdict.ts';

export const REQUEST_DEADLINE_MS = 15_000;
/** How much of the agent's log `why` reads: the last lines, at most this many bytes. */
export const AGENT_LOG_TAIL_LINES = 200;
const AGENT_LOG_MAX_BYTES = 256 * 1024;

const where = (namespace: string | undefined) =>
  namespace === undefined ? 'in every namespace' : `in namespace ${namespace}`;

export class ClusterReader {
  private readonly custom: k8s.CustomObjectsApi;
  private readonly core: k8s.CoreV1Api;
  private readonly coordination: k8s.CoordinationV1Api;
  private readonly deadline = withDeadline(REQUEST_DEADLINE_MS);

  constructor(kc: k8s.KubeConfig) {
    this.custom = kc.makeApiClient(k8s.CustomObjectsApi);
    this.core = kc.makeApiClient(k8s.CoreV1Api);
    this.coordination = kc.makeApiClient(k8s.CoordinationV1Api);
  }

  /** The ShareManagers of `namespace`, or of every namespace when undefined. */
  async shareManagers(namespace?: string): Promise<ShareManager[]> {
    const resource = { group: SM_GROUP, version: SM_VERSION, plural: SM_PLURAL };
    const operation = `list ${SM_PLURAL}.${SM_GROUP} ${where(namespace)}`;
    try {
      const list = (await kubeCall(operation, () =>
        namespace === undefined
          ? this.custom.listClusterCustomObject(resource, this.deadline)
          : this.custom.listNamespacedCustomObject({ ...resource, namespace }, this.deadline),
      )) as { items?: ShareManager[] };
      return list.items ?? [];
    } catch (err) {
      // NB: a 404 on a list is the resource's absence, but RBAC's 403 comes first, so a
      // user without access to the CRD is told about access, not about the CRD.
      if (statusOf(err) === 404)
        throw new PluginError(
          'E_NO_CRD',
          `the ShareManager CRD (${SM_PLURAL}.${SM_GROUP}/${SM_VERSION}) is not installed on this cluster: ${operation} answered 404`,
          1,
          { cause: err },
        );
      throw err;
    }
  }

  /** The share Leases (label leasehold.dev/share-manager) of `namespace`, or of every namespace. */
  async leases(namespace?: string): Promise<LeaseRecord[]> {
    const labelSelector = LABEL_SHARE_MANAGER;
    const list = await kubeCall(`list leases.coordination.k8s.io ${where(namespace)}`, () =>
      namespace === undefined
        ? this.coordination.listLeaseForAllNamespaces({ labelSelector }, this.deadline)
        : this.coordination.listNamespacedLease({ namespace, labelSelector }, this.deadline),
    );
    return list.items.map(fromWire);
  }

  /** The Lease of one share; undefined when it does not exist. */
  async lease(namespace: string, name: string): Promise<LeaseRecord | undefined> {
    try {
      return fromWire(
        await kubeCall(`get lease ${namespace}/${name}`, () =>
          this.coordination.readNamespacedLease({ namespace, name }, this.deadline),
        ),
      );
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw err;
    }
  }

  /** Share-manager pods of `namespace` (or every namespace); of one share when `share` is given. */
  async pods(namespace?: string, share?: string): Promise<k8s.V1Pod[]> {
    const labelSelector = share === undefined ? LABEL_SHARE_MANAGER : `${LABEL_SHARE_MANAGER}=${share}`;
    const list = await kubeCall(`list pods ${where(namespace)} (label ${labelSelector})`, () =>
      namespace === undefined
        ? this.core.listPodForAllNamespaces({ labelSelector }, this.deadline)
        : this.core.listNamespacedPod({ namespace, labelSelector }, this.deadline),
    );
    return list.items;
  }

  /** The Events about the objects named `names` in `namespace` (a ShareManager and its pods). */
  async events(namespace: string, names: readonly string[]): Promise<k8s.CoreV1Event[]> {
    const lists = await Promise.all(
      [...new Set(names)].map((name) =>
        kubeCall(`list events about ${namespace}/${name}`, () =>
          this.core.listNamespacedEvent(
            { namespace, fieldSelector: `involvedObject.name=${name}` },
            this.deadline,
          ),
        ),
      ),
    );
    return lists.flatMap((l) => l.items);
  }

  /** The last lines of the agent container's log of a pod, or why they could not be read. */
  async agentLog(namespace: string, pod: string): Promise<AgentLog> {
    try {
      const text = await this.core.readNamespacedPodLog(
        {
          namespace,
          name: pod,
          container: AGENT_CONTAINER,
          tailLines: AGENT_LOG_TAIL_LINES,
          limitBytes: AGENT_LOG_MAX_BYTES,
        },
        this.deadline,
      );
      return { pod, lines: String(text).split('\n') };
    } catch (err) {
      const status = statusOf(err);
      const said = apiMessageOf(err) || (err instanceof Error ? err.message : String(err));
      return { pod, error: status === undefined ? said : `HTTP ${status}: ${said}` };
    }
  }
}
