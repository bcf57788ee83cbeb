/**
 * One share's failover machine as the driver keeps it: its phase and epoch, what the
 * failover learned so far (lost pod and node, owner, replacement, times, storage, the
 * nodes to avoid) and the timers it holds. Plain data and the pure edits of it; the
 * driver (failover-driver.ts) owns the map of machines and every I/O.
 *
 * Invariants: a machine's timers are all cleared when it leaves the map
 * (`clearMachineTimers`); `epoch` grows by one at every phase change, so an outcome
 * or timer tied to an older epoch can be told apart and dropped.
 */
import type { LeaseRecord } from '../../lib/lease-record.ts';
import type { LastFailover } from '../share-model/share-manager-spec.ts';
import type { FailoverTimes } from './failover-report.ts';
import type { StepMachine } from './failover-steps.ts';
import type { Phase } from './failover-transitions.ts';
import type { ReplacementVerdict } from './replacement-lost.ts';

export interface Machine extends StepMachine {
  key: string;
  phase: Phase;
  epoch: number;
  /** The lease version the stale verdict was about: the mark's CAS uses exactly this one. */
  verdictLease: LeaseRecord | undefined;
  times: FailoverTimes;
  /** After a takeover: the record the previous owner wrote, whose first timestamps we keep. */
  inherited: LastFailover | undefined;
  /** The stale verdict's effective time of the holder's last observed renewal (our clock). */
  holderSilentSince: number | undefined;
  /** Nodes lost earlier in this failover (the first lost node, lost replacements' nodes): avoided too. */
  avoidNodes: string[];
  /** Nodes judged lost by replacement-lost.ts (before the Ready condition or the grace say so). */
  silentNodes: string[];
  /** The replacement judged lost with its node, until `retarget` makes it the lost pod. */
  lostReplacement: { pod: string; verdict: Extract<ReplacementVerdict, { kind: 'lost' }> } | undefined;
  takeoverTimer: NodeJS.Timeout | undefined;
  retryTimer: NodeJS.Timeout | undefined;
  recheckTimer: NodeJS.Timeout | undefined;
  /** When the replacement-lost verdict may change without any event (its `recheckAt`). */
  lostCheckTimer: NodeJS.Timeout | undefined;
  /** When a follower looks again at whether the owner went down with its node. */
  ownerCheckTimer: NodeJS.Timeout | undefined;
  unmountTimer: NodeJS.Timeout | undefined;
  /** A fresh read of a node's heartbeat Lease is in flight (confirmSilence). */
  confirming: boolean;
}

/** A new, idle machine for the failover of `lease`'s holder (on `holderNode`, '' = unknown). */
export function newMachine(key: string, lease: LeaseRecord, holderNode: string): Machine {
  return {
    key,
    phase: 'idle',
    epoch: 0,
    lostPod: lease.holder,
    lostNode: holderNode,
    owner: lease.failoverBy,
    replacementPod: undefined,
    verdictLease: undefined,
    times: {},
    inherited: undefined,
    holderSilentSince: undefined,
    handoff: undefined,
    storage: undefined,
    avoidNodes: [],
    silentNodes: [],
    lostReplacement: undefined,
    takeoverTimer: undefined,
    retryTimer: undefined,
    recheckTimer: undefined,
    lostCheckTimer: undefined,
    ownerCheckTimer: undefined,
    watchUnmount: false,
    unmountForced: 0,
    unmountTimer: undefined,
    confirming: false,
  };
}

/**
 * The `retarget` action: the lost replacement becomes the lost pod, its node the lost
 * node; the nodes lost before stay avoided. The mark stays (it names the first holder):
 * nobody acquired. `at` is now, monotonic and wall.
 */
export function retargetToLostReplacement(m: Machine, at: { mono: number; wall: Date }): void {
  const lost = m.lostReplacement;
  if (!lost) return;
  if (m.lostNode !== '' && !m.avoidNodes.includes(m.lostNode)) m.avoidNodes.push(m.lostNode);
  m.lostPod = lost.pod;
  m.lostNode = lost.verdict.node;
  if (!m.silentNodes.includes(lost.verdict.node)) m.silentNodes.push(lost.verdict.node);
  m.replacementPod = undefined;
  // NB: no holder ever renewed from there: no "kubelet alive after the holder fenced" evidence.
  m.holderSilentSince = undefined;
  m.handoff = undefined;
  m.times = { detected: m.times.detected, marked: m.times.marked, replacementLost: at };
}

export function clearMachineTimers(m: Machine): void {
  clearTimeout(m.takeoverTimer);
  clearTimeout(m.retryTimer);
  clearTimeout(m.recheckTimer);
  clearTimeout(m.lostCheckTimer);
  clearTimeout(m.ownerCheckTimer);
  clearTimeout(m.unmountTimer);
}
