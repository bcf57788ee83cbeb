/**
 * Pure: the pod status a kubelet reports, from the runtime view of its containers.
 * Written as a strategic-merge patch of the status subresource, so conditions merge by
 * type (PodScheduled, set by the scheduler, is kept) and container status lists are
 * replaced whole (the kubelet owns them).
 *
 * The phase itself is decided by the pod worker: Pending until every main container
 * has started once; Running while any runs or will restart; Succeeded (all exited 0)
 * or Failed when every main container has terminated for good.
 */
import type { V1ContainerState, V1ContainerStatus, V1PodCondition } from '@kubernetes/client-node';
import type { ContainerPhase, ContainerView } from '../runtime/container-runner.ts';

export type PodPhase = 'Pending' | 'Running' | 'Succeeded' | 'Failed';

export interface PodRuntimeView {
  podUid: string;
  podIP: string;
  hostIP: string;
  startTime: Date;
  phase: PodPhase;
  /** Set when the pod cannot start (e.g. ErrImagePull) or ended abnormally. */
  reason?: string;
  message?: string;
  initialized: boolean;
  init: ContainerView[];
  main: ContainerView[];
}

function stateOf(phase: ContainerPhase): V1ContainerState {
  switch (phase.kind) {
    case 'waiting':
      return { waiting: { reason: phase.reason, ...(phase.message ? { message: phase.message } : {}) } };
    case 'running':
      return { running: { startedAt: phase.startedAt } };
    case 'terminated':
      return {
        terminated: {
          exitCode: phase.exitCode,
          reason: phase.reason,
          startedAt: phase.startedAt,
          finishedAt: phase.finishedAt,
          ...(phase.signal ? { message: `killed by ${phase.signal}` } : {}),
        },
      };
  }
}

function containerStatus(view: ContainerView, podUid: string): V1ContainerStatus {
  return {
    name: view.name,
    image: view.image,
    imageID: `sim://${view.image}`,
    containerID: `sim://${podUid}/${view.name}/${view.restartCount}`,
    ready: view.ready,
    started: view.started,
    restartCount: view.restartCount,
    state: stateOf(view.phase),
    ...(view.lastTerminated ? { lastState: stateOf(view.lastTerminated) } : {}),
  };
}

/** Condition type -> its last status and when it took it (kept by the caller across patches). */
export type TransitionMemory = Map<string, { ok: boolean; at: Date }>;

function condition(
  type: string,
  ok: boolean,
  now: Date,
  memory: TransitionMemory,
  reason?: string,
): V1PodCondition {
  const last = memory.get(type);
  const at = last && last.ok === ok ? last.at : now;
  memory.set(type, { ok, at });
  return {
    type,
    status: ok ? 'True' : 'False',
    lastTransitionTime: at,
    ...(reason && !ok ? { reason } : {}),
  };
}

/** The status patch body for a pod's current runtime view. */
export function podStatusPatch(
  view: PodRuntimeView,
  now: Date,
  memory: TransitionMemory,
): { status: Record<string, unknown> } {
  const terminal = view.phase === 'Succeeded' || view.phase === 'Failed';
  const all = [...view.init, ...view.main];
  const containersReady = !terminal && view.main.length > 0 && all.every((c) => c.ready);
  return {
    status: {
      phase: view.phase,
      hostIP: view.hostIP,
      hostIPs: [{ ip: view.hostIP }],
      podIP: view.podIP,
      podIPs: [{ ip: view.podIP }],
      startTime: view.startTime,
      reason: view.reason ?? null,
      message: view.message ?? null,
      conditions: [
        condition('Initialized', view.initialized, now, memory, 'ContainersNotInitialized'),
        condition('ContainersReady', containersReady, now, memory, 'ContainersNotReady'),
        condition('Ready', containersReady, now, memory, 'ContainersNotReady'),
      ],
      initContainerStatuses: view.init.map((c) => containerStatus(c, view.podUid)),
      containerStatuses: view.main.map((c) => containerStatus(c, view.podUid)),
    },
  };
}
