/**
 * The I/O steps of the failover machine, one per action that talks to the API: each
 * returns the event its outcome means for the machine. The driver runs them and drops
 * an outcome whose phase has passed (see failover-driver.ts).
 *
 * Invariants:
 *  - The mark's CAS uses the lease version the stale verdict was about, never a later
 *    observation: a renewal seen since must make it fail.
 *  - Every step treats "already done" as done (pod absent, no attachment, replacement
 *    present), so a retry or a takeover may repeat it.
 */
import type { V1Lease, V1Pod } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import { formatDuration } from '../../lib/env-config.ts';
import type { LeaseRecord } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import type { ManagerConfig } from '../config.ts';
import type { LeaseMonitor } from '../detection/lease-monitor.ts';
import type { HeartbeatSeen } from '../detection/node-health.ts';
import { avoidanceFor, type NodeHealth } from '../detection/node-health.ts';
import type { ManagerMetrics } from '../manager-metrics.ts';
import type { NodeAvoidances } from '../share-model/pod-spec.ts';
import type { LastFailover, ShareManager } from '../share-model/share-manager-spec.ts';
import { resolveSpec } from '../share-model/share-manager-spec.ts';
import type { FailoverExecutor } from './execute-failover.ts';
import { type FailoverTimes, inheritedRecord } from './failover-report.ts';
import type { FailoverEvent } from './failover-transitions.ts';
import { decideNonFencingGate, type FencingCondition, type StorageFencing } from './storage-fencing.ts';
import { describeHandoff } from './volume-handoff.ts';

export interface ClusterView {
  shareManager(key: string): ShareManager | undefined;
  pod(namespace: string, name: string): V1Pod | undefined;
  /** Live (not ended, not deleting) pods of the share manager `key`. */
  livePods(key: string): V1Pod[];
  nodeHealth(node: string): NodeHealth;
  /** Our monotonic time of the node heartbeat Lease's last change we saw (not moved by watch resets); undefined = never seen. */
  heartbeatChangedAt(node: string): number | undefined;
  /** The node's heartbeat as replacement-lost.ts judges it; undefined = never seen. */
  heartbeat(node: string): HeartbeatSeen | undefined;
  /** A heartbeat Lease read fresh from the API server (confirmSilence): fed to the node observer like a watch event. */
  heartbeatRead(lease: V1Lease): void;
}

/** The part of a failover machine the steps read and fill in. */
export interface StepMachine {
  key: string;
  lostPod: string;
  lostNode: string;
  owner: string | undefined;
  replacementPod: string | undefined;
  verdictLease: LeaseRecord | undefined;
  times: FailoverTimes;
  inherited: LastFailover | undefined;
  /** Our monotonic time of the lost holder's last observed renewal (the stale verdict's); undefined after a takeover. */
  holderSilentSince: number | undefined;
  /** What the volume handoff did (volume-handoff.ts describeHandoff), for status and events. */
  handoff: string | undefined;
  /** The handoff released the volumesInUse entry, or left it to a kubelet its heartbeat showed alive: the unmount check watches it. */
  watchUnmount: boolean;
  /** How many times the unmount check released the volume anyway. */
  unmountForced: number;
  /** The storage's classification, once the storage-fencing gate read it. */
  storage: StorageFencing | undefined;
  /** Nodes lost earlier in this failover (before a lost replacement's): the replacement avoids them too. */
  avoidNodes: readonly string[];
  /** Nodes judged lost by replacement-lost.ts: avoided as unhealthy (`required` in mode auto) whatever else we see. */
  silentNodes: readonly string[];
}

export interface StepDeps {
  config: ManagerConfig;
  clock: Clock;
  log: Logger;
  metrics: ManagerMetrics;
  executor: FailoverExecutor;
  view: ClusterView;
  monitor: LeaseMonitor | undefined;
  /** Tell the world what the volume handoff did (status + event; best effort, never awaited). */
  onHandoff(): void;
  /** Tell the world what the storage-fencing gate decided (condition + event when it changed; never awaited). */
  onGate(condition: FencingCondition): void;
}

export type StepAction =
  | 'checkStorage'
  | 'writeMark'
  | 'deletePod'
  | 'handOffVolume'
  | 'createReplacement'
  | 'writeTakeover';

export function runStep(
  action: StepAction,
  m: StepMachine,
  deps: StepDeps,
): { what: string; run: () => Promise<FailoverEvent> } {
  const { config, clock, log, metrics, executor, view, monitor, onHandoff, onGate } = deps;
  const [namespace] = m.key.split('/') as [string];
  const now = () => ({ mono: clock.now(), wall: clock.wallNow() });
  const latest = () => monitor?.observation(m.key)?.lease;
  switch (action) {
    case 'checkStorage':
      return {
        what: 'checking whether the storage fences the lost node',
        run: async () => {
          const sm = view.shareManager(m.key);
          if (!sm) return 'leaseGone';
          const read = await executor.readStorageGate(namespace, sm.spec.volume.pvc, m.lostNode);
          const gate = decideNonFencingGate({
            storage: read.storage,
            policy: config.nonFencingStorage,
            lostNode: m.lostNode,
            node: read.node,
          });
          m.storage = read.storage;
          log.debug(
            {
              lease: m.key,
              storage: read.storage.kind,
              node: read.node,
              gate: gate.kind,
              reason: gate.condition.reason,
            },
            gate.condition.message,
          );
          onGate(gate.condition);
          return gate.kind === 'wait' ? 'gateWait' : 'gateProceed';
        },
      };
    case 'writeMark':
      return {
        what: 'marking the lease delinquent',
        run: async () => {
          // NB: never the latest observation: a renewal seen since the verdict must make this CAS fail.
          const lease = m.verdictLease;
          if (!lease) return 'leaseGone';
          const outcome = await executor.markDelinquent(lease, clock.wallNow());
          if (outcome.kind === 'conflict') {
            metrics.markConflicts.inc();
            return 'markConflict';
          }
          m.times.marked = now();
          m.owner = config.identity;
          monitor?.record(outcome.lease, true);
          return 'markWon';
        },
      };
    case 'deletePod':
      return {
        what: 'force-deleting the lost pod',
        run: async () => {
          // The Lease and its ShareManager share the key (namespace/name).
          const share = {
            name: m.key.slice(namespace.length + 1),
            uid: view.shareManager(m.key)?.metadata.uid,
          };
          const result = await executor.forceDeletePod(
            namespace,
            m.lostPod,
            share,
            view.pod(namespace, m.lostPod),
          );
          m.times.podDeleted = now();
          if (result === 'foreign')
            log.warn(
              { lease: m.key, pod: m.lostPod, result },
              `the lease's holder ${m.lostPod} is not a pod of share ${share.name} (its share label or controller reference differs): not deleted`,
            );
          else log.info({ lease: m.key, pod: m.lostPod, result }, 'lost pod force-deleted');
          return 'podGone';
        },
      };
    case 'handOffVolume':
      return {
        what: 'handing the volume off the lost node',
        run: async () => {
          const sm = view.shareManager(m.key);
          if (!sm) return 'leaseGone';
          const newerPodOnNode = view
            .livePods(m.key)
            .find((p) => p.metadata?.name !== m.lostPod && p.spec?.nodeName === m.lostNode)?.metadata?.name;
          const outcome = await executor.handOffVolume(namespace, sm.spec.volume.pvc, m.lostNode, {
            newerPodOnNode,
            heartbeatChangedAt: () => view.heartbeatChangedAt(m.lostNode),
            holderSilentSince: m.holderSilentSince,
            renewDeadlineMs: renewDeadlineOf(sm, config),
          });
          m.times.detached = now();
          m.handoff = describeHandoff(outcome.decision, m.lostNode, outcome.pv);
          // NB: after a release too: a live kubelet may put the entry back before the
          // attach-detach controller started the detach, and if its pod hangs it never clears it.
          m.watchUnmount =
            outcome.decision.kind === 'releaseInUse' ||
            (outcome.decision.kind === 'leaveToKubelet' && outcome.decision.kubeletAlive);
          log.info(
            {
              lease: m.key,
              lostNode: m.lostNode,
              pv: outcome.pv,
              handoff: outcome.decision.kind,
              attachments: outcome.attachments,
            },
            m.handoff,
          );
          onHandoff();
          return 'detached';
        },
      };
    case 'createReplacement':
      return {
        what: 'creating the replacement pod',
        run: async () => {
          const sm = view.shareManager(m.key);
          if (!sm) return 'leaseGone';
          const avoid: NodeAvoidances = [m.lostNode, ...m.avoidNodes].flatMap(
            (node) =>
              avoidanceFor(
                config.antiAffinity,
                node,
                m.silentNodes.includes(node) ? 'unhealthy' : view.nodeHealth(node),
              ) ?? [],
          );
          const { pod, created } = await executor.createReplacement(sm, m.lostPod, avoid);
          m.replacementPod = pod;
          m.times.replacementCreated = now();
          log.info(
            { lease: m.key, pod, created, avoid },
            created ? 'replacement pod created' : 'replacement pod exists',
          );
          return 'replacementCreated';
        },
      };
    case 'writeTakeover':
      return {
        what: 'taking over the failover',
        run: async () => {
          const lease = latest();
          if (!lease) return 'leaseGone';
          const outcome = await executor.takeOver(lease);
          if (outcome.kind === 'conflict') return 'takeoverConflict';
          // Our own clock's instants for the metrics; the status keeps the first owner's.
          m.times = { detected: now(), marked: now() };
          m.inherited = inheritedRecord(view.shareManager(m.key)?.status?.lastFailover, m.lostPod);
          m.owner = config.identity;
          monitor?.record(outcome.lease, true);
          return 'takeoverWon';
        },
      };
  }
}

/** The share manager's renew deadline T (its spec, else the manager's default). */
function renewDeadlineOf(sm: ShareManager, config: ManagerConfig): number {
  const spec = resolveSpec(sm.spec, config.defaults);
  return spec.ok ? spec.timings.renewDeadlineMs : config.defaults.renewDeadlineMs;
}

/**
 * The unmount check's action (volume-handoff.ts `unmountOverdue`): the volume was left to
 * a live kubelet, which still lists it in use LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT after the
 * force-delete while the replacement waits. Hands it off as for a dead node; returns
 * whether it released the entry (`releaseInUse`), i.e. whether to look again.
 */
export async function forceUnmountHandoff(m: StepMachine, deps: StepDeps): Promise<boolean> {
  const { config, executor, view, log, onHandoff } = deps;
  const [namespace] = m.key.split('/') as [string];
  const sm = view.shareManager(m.key);
  if (!sm) return false;
  const outcome = await executor.handOffVolume(namespace, sm.spec.volume.pvc, m.lostNode, {
    newerPodOnNode: view
      .livePods(m.key)
      .find((p) => p.metadata?.name !== m.lostPod && p.spec?.nodeName === m.lostNode)?.metadata?.name,
    heartbeatChangedAt: () => view.heartbeatChangedAt(m.lostNode),
    holderSilentSince: m.holderSilentSince,
    renewDeadlineMs: renewDeadlineOf(sm, config),
    unmountOverdue: true,
  });
  const released = outcome.decision.kind === 'releaseInUse';
  if (released) {
    m.unmountForced += 1;
    m.handoff = `${m.handoff ?? 'left to Kubernetes'}; then, the volume still in use on node ${m.lostNode} ${formatDuration(config.kubeletUnmountTimeoutMs)} after the force-delete (the lost pod's processes did not stop: frozen or stuck in I/O), ${describeHandoff(outcome.decision, m.lostNode, outcome.pv)}`;
    log.warn(
      { lease: m.key, lostNode: m.lostNode, lostPod: m.lostPod, pv: outcome.pv, attempt: m.unmountForced },
      `kubelet did not unmount within ${formatDuration(config.kubeletUnmountTimeoutMs)}: released the volume from node ${m.lostNode} status.volumesInUse`,
    );
    onHandoff();
  } else {
    log.info(
      { lease: m.key, lostNode: m.lostNode, pv: outcome.pv, handoff: outcome.decision.kind },
      'unmount check: nothing left to release',
    );
  }
  return released;
}
