/**
 * *Pure*: whether a share-manager pod's agent has fenced, read from the pod's status as
 * the kubelet reports it, and whether a pod update is the moment it did.
 *
 * Why the manager counts agents' fences and the agent does not alone: the agent's own
 * `leasehold_agent_fenced` gauge is 1 only between the fence and the agent's exit (the
 * fence timeout, 1.5 s by default), far shorter than a scrape interval, so Prometheus
 * almost never sees it. The pod outlives it: the agent (a native sidecar) ended with
 * EXIT_FENCED shows in the agent container's `state.terminated`, or, once the kubelet
 * restarted the sidecar, in its `lastState.terminated`.
 *
 * Guarantees: a pod counts once, on the update that first shows a fenced exit of its
 * agent (a restarted agent that fences again at start does not count again); a pod seen
 * for the first time (the informer's first list, a manager restart) never counts, since
 * its fence may be older than this manager. Exit code 1 also means "a planned stop
 * could not release the lease" (agent/exit-codes.ts): that too leaves the lease to expire.
 */
import type { V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import { EXIT_FENCED } from '../../agent/exit-codes.ts';
import { AGENT_CONTAINER } from '../share-model/pod-spec.ts';

/** The agent container's status: a native sidecar, so among the init containers. */
function agentStatus(pod: V1Pod): V1ContainerStatus | undefined {
  return pod.status?.initContainerStatuses?.find((c) => c.name === AGENT_CONTAINER);
}

/** True once the pod's agent has ended with the fenced exit code (now or before a restart). */
export function agentFenced(pod: V1Pod): boolean {
  const status = agentStatus(pod);
  return (
    status?.state?.terminated?.exitCode === EXIT_FENCED ||
    status?.lastState?.terminated?.exitCode === EXIT_FENCED
  );
}

/** True when `pod`, an update of `previous`, is the first sight of its agent's fence. */
export function fencedNow(pod: V1Pod, previous: V1Pod | undefined): boolean {
  if (previous === undefined || previous.metadata?.uid !== pod.metadata?.uid) return false;
  return agentFenced(pod) && !agentFenced(previous);
}
