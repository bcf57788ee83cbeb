/**
 * The failover state machine of one share manager, as a transition table
 * (docs/design.md, "The failover state machine"). Pure: (phase, event) -> (next, actions).
 * The driver (failover-driver.ts) turns observations and I/O results into events and
 * hands the actions to the executor.
 *
 * Invariants:
 *  - The table is total: every phase names its reaction to every event (TypeScript checks
 *    it; test/unit/manager-failover.test.ts walks all pairs). Unlisted means "ignore",
 *    written out as `stay`.
 *  - Only the manager whose CAS put its identity in `failover-by` acts on the share
 *    manager (phases `marking` .. `awaitingAcquire` and `takingOver`). Seeing another
 *    identity there (`markedByOther`) always stands down to `following` (or stays in
 *    `followingAcquire`).
 *  - `following` is the only phase with a takeover timer; taking over is again a CAS.
 *    Once the owner's replacement pod exists (live: created, not deleted, not ended) the
 *    failover waits only for its agent to acquire, which may take as long as the volume's
 *    attach (the attach-detach controller syncs once a minute): that is progress, not a
 *    stall. So `followingAcquire` has no timer; the replacement ending without acquiring
 *    sends it back to `following` with a full timeout.
 *  - The failover ends (`idle`) only when a new holder acquired the lease (the delinquent
 *    mark is cleared by that acquisition), when the holder proved alive before the mark
 *    landed, or when the lease went away.
 *  - No mark before the storage-fencing gate (storage-fencing.ts) said proceed: a stale
 *    verdict first goes to `checkingStorage`; storage that cannot fence, under
 *    require-node-down, waits in `awaitingNodeDown` with the lease untouched, so a holder
 *    that comes back simply renews (`renewed` -> idle). The wait is not owning (it does
 *    not count against the concurrency limit, and nothing is ours to take over); a
 *    recheck (the lost Node changed, or the recheck timer) reads again from
 *    `checkingStorage`, without leaving the machine: the reconciler must not see the
 *    share idle and create a pod behind the gate's back. The mark that may follow is the
 *    CAS on the verdict's lease version, so a renewal since makes it fail (409).
 *  - A replacement lost with its node before its agent acquired (replacement-lost.ts:
 *    the lease still marked, the node's heartbeat silent for D + P by our observation)
 *    sends the owner from `awaitingAcquire` round again (`replacementLost`: that pod and
 *    node become the lost ones, the earlier lost nodes stay avoided) without the
 *    storage-fencing gate: no server of this share can have run there. A follower in
 *    `followingAcquire` restarts its takeover timer instead.
 *  - Every step is idempotent (pod already gone, no attachment, replacement already
 *    there are successes), so a retry or a takeover may repeat one safely.
 */

export const PHASES = [
  'idle',
  /** The storage-fencing gate's reads are in flight (before any write). */
  'checkingStorage',
  /** Storage that cannot fence, policy require-node-down: no failover until the node is known down. */
  'awaitingNodeDown',
  'marking',
  'deletingPod',
  'detaching',
  'replacing',
  'awaitingAcquire',
  'following',
  /** Following, and the owner's replacement pod exists: no takeover timer. */
  'followingAcquire',
  'takingOver',
] as const;
export type Phase = (typeof PHASES)[number];

export const EVENTS = [
  /** The lease is stale by our observation and the storm guard allows a failover. */
  'stale',
  /** Same, in observe-only mode. */
  'staleObserveOnly',
  /** The storage-fencing gate says fail over (storage fences, node down, or lease-only). */
  'gateProceed',
  /** The gate says wait for evidence that the lost node is down. */
  'gateWait',
  /** While waiting: the lost Node changed or was deleted, or the recheck timer fired. */
  'recheckGate',
  /** Our CAS wrote delinquent + failover-by. */
  'markWon',
  /** Our CAS met 409: the lease moved; re-read it before deciding anything. */
  'markConflict',
  /** A renewal by the current holder was observed (not delinquent). */
  'renewed',
  /** The lease is delinquent with another manager's identity in failover-by. */
  'markedByOther',
  /** The lease is delinquent with our identity (e.g. after our own restart). */
  'markedByMe',
  'podGone',
  'detached',
  'replacementCreated',
  /** The replacement pod ended (or was deleted) without acquiring. */
  'replacementFailed',
  /**
   * The replacement's node went silent before its agent acquired (replacement-lost.ts):
   * the lease is still as the mark left it and the node's heartbeat stopped for D + P.
   */
  'replacementLost',
  /** Seen while following: a live pod of the share manager other than the lost one exists. */
  'replacementLive',
  /** A new holder acquired the lease (delinquent cleared). */
  'acquired',
  'takeoverDue',
  /**
   * While following: the manager named in failover-by runs on a node whose heartbeat has
   * been silent for D + P by our observation (owner-lost.ts): take over now, not after
   * the takeover timeout.
   */
  'ownerLost',
  'takeoverWon',
  'takeoverConflict',
  /** An API call of the current step failed (no answer, 5xx, ...). */
  'stepFailed',
  /** The Lease or its ShareManager was deleted. */
  'leaseGone',
] as const;
export type FailoverEvent = (typeof EVENTS)[number];

export type Action =
  | 'checkStorage'
  | 'startRecheckTimer'
  | 'reportWaitOver'
  | 'writeMark'
  | 'reobserve'
  | 'announce'
  | 'deletePod'
  | 'handOffVolume'
  | 'createReplacement'
  | 'retarget'
  | 'announceReplacementLost'
  | 'complete'
  | 'startTakeoverTimer'
  | 'cancelTakeoverTimer'
  | 'writeTakeover'
  | 'announceTakeover'
  | 'recordWouldFailover'
  | 'retryStepLater'
  | 'rejudgeLater';

export interface Transition {
  next: Phase;
  actions: readonly Action[];
}

const to = (next: Phase, ...actions: Action[]): Transition => ({ next, actions });

/** Reactions shared by the phases in which this manager owns the failover. */
function owning(
  phase: Phase,
  step: Partial<Record<FailoverEvent, Transition>>,
): Record<FailoverEvent, Transition> {
  const stay = to(phase);
  return {
    stale: stay,
    staleObserveOnly: stay,
    gateProceed: stay,
    gateWait: stay,
    recheckGate: stay,
    markWon: stay,
    markConflict: stay,
    renewed: stay,
    markedByOther: to('following', 'startTakeoverTimer'),
    markedByMe: stay,
    podGone: stay,
    detached: stay,
    replacementCreated: stay,
    replacementFailed: stay,
    replacementLost: stay,
    replacementLive: stay,
    acquired: to('idle', 'complete'),
    takeoverDue: stay,
    ownerLost: stay,
    takeoverWon: stay,
    takeoverConflict: stay,
    stepFailed: to(phase, 'retryStepLater'),
    leaseGone: to('idle'),
    ...step,
  };
}

export const TRANSITIONS: Readonly<Record<Phase, Readonly<Record<FailoverEvent, Transition>>>> = {
  idle: {
    stale: to('checkingStorage', 'checkStorage'),
    staleObserveOnly: to('idle', 'recordWouldFailover'),
    gateProceed: to('idle'),
    gateWait: to('idle'),
    recheckGate: to('idle'),
    markWon: to('idle'),
    markConflict: to('idle'),
    renewed: to('idle'),
    markedByOther: to('following', 'startTakeoverTimer'),
    // Our own mark with no machine behind it: we restarted mid-failover; resume.
    markedByMe: to('deletingPod', 'deletePod'),
    podGone: to('idle'),
    detached: to('idle'),
    replacementCreated: to('idle'),
    replacementFailed: to('idle'),
    replacementLost: to('idle'),
    replacementLive: to('idle'),
    acquired: to('idle'),
    takeoverDue: to('idle'),
    ownerLost: to('idle'),
    takeoverWon: to('idle'),
    takeoverConflict: to('idle'),
    stepFailed: to('idle'),
    leaseGone: to('idle'),
  },
  checkingStorage: {
    stale: to('checkingStorage'),
    staleObserveOnly: to('checkingStorage'),
    gateProceed: to('marking', 'writeMark'),
    gateWait: to('awaitingNodeDown', 'startRecheckTimer'),
    recheckGate: to('checkingStorage'),
    markWon: to('checkingStorage'),
    markConflict: to('checkingStorage'),
    renewed: to('idle'),
    markedByOther: to('following', 'startTakeoverTimer'),
    // Not ours in this phase (we wrote no mark); the watch shows it again after idle.
    markedByMe: to('checkingStorage'),
    podGone: to('checkingStorage'),
    detached: to('checkingStorage'),
    replacementCreated: to('checkingStorage'),
    replacementFailed: to('checkingStorage'),
    replacementLost: to('checkingStorage'),
    replacementLive: to('checkingStorage'),
    acquired: to('idle'),
    takeoverDue: to('checkingStorage'),
    ownerLost: to('checkingStorage'),
    takeoverWon: to('checkingStorage'),
    takeoverConflict: to('checkingStorage'),
    // A read failed (not a 404/403: those are answers): read again after the retry
    // period, in place (a waiting share stays non-idle; a renewal meanwhile still ends it).
    stepFailed: to('checkingStorage', 'retryStepLater'),
    leaseGone: to('idle'),
  },
  awaitingNodeDown: {
    stale: to('awaitingNodeDown'),
    staleObserveOnly: to('awaitingNodeDown'),
    gateProceed: to('awaitingNodeDown'),
    gateWait: to('awaitingNodeDown'),
    // NB: not through idle: the machine stays, so the reconciler leaves the pods alone for
    // the whole wait. The mark that may follow is still the CAS on the verdict's version.
    recheckGate: to('checkingStorage', 'checkStorage'),
    markWon: to('awaitingNodeDown'),
    markConflict: to('awaitingNodeDown'),
    // The holder came back (its node was not down): the share serves on; nothing was written to the lease.
    renewed: to('idle', 'reportWaitOver'),
    // Another manager's gate said proceed (it saw the node down first, or runs lease-only).
    markedByOther: to('following', 'startTakeoverTimer'),
    markedByMe: to('awaitingNodeDown'),
    podGone: to('awaitingNodeDown'),
    detached: to('awaitingNodeDown'),
    replacementCreated: to('awaitingNodeDown'),
    replacementFailed: to('awaitingNodeDown'),
    replacementLost: to('awaitingNodeDown'),
    replacementLive: to('awaitingNodeDown'),
    // A new holder (the kubelet reported the old pod ended, the reconciler freed the lease).
    acquired: to('idle', 'reportWaitOver'),
    takeoverDue: to('awaitingNodeDown'),
    ownerLost: to('awaitingNodeDown'),
    takeoverWon: to('awaitingNodeDown'),
    takeoverConflict: to('awaitingNodeDown'),
    stepFailed: to('awaitingNodeDown'),
    leaseGone: to('idle'),
  },
  marking: {
    stale: to('marking'),
    staleObserveOnly: to('marking'),
    gateProceed: to('marking'),
    gateWait: to('marking'),
    recheckGate: to('marking'),
    markWon: to('deletingPod', 'announce', 'deletePod'),
    markConflict: to('idle', 'reobserve'),
    renewed: to('idle'),
    markedByOther: to('following', 'startTakeoverTimer'),
    // Our mark, seen on the watch while its request is still out: it landed, whatever its
    // answer says later (a lost answer fails the step after the watch showed the write).
    // Waiting here for the answer would leave the share delinquent with nobody at work.
    markedByMe: to('deletingPod', 'announce', 'deletePod'),
    podGone: to('marking'),
    detached: to('marking'),
    replacementCreated: to('marking'),
    replacementFailed: to('marking'),
    replacementLost: to('marking'),
    replacementLive: to('marking'),
    acquired: to('idle'),
    takeoverDue: to('marking'),
    ownerLost: to('marking'),
    takeoverWon: to('marking'),
    takeoverConflict: to('marking'),
    // No answer: we do not know whether the mark landed. Judge again later; the watch
    // will show our mark (markedByMe) if it did.
    stepFailed: to('idle', 'rejudgeLater'),
    leaseGone: to('idle'),
  },
  deletingPod: owning('deletingPod', { podGone: to('detaching', 'handOffVolume') }),
  detaching: owning('detaching', { detached: to('replacing', 'createReplacement') }),
  replacing: owning('replacing', { replacementCreated: to('awaitingAcquire') }),
  awaitingAcquire: owning('awaitingAcquire', {
    replacementFailed: to('replacing', 'createReplacement'),
    // Round again with the replacement as the lost pod and its node as the lost node. No
    // storage gate: it never acquired, so no server of this share ran there (replacement-lost.ts).
    replacementLost: to('deletingPod', 'retarget', 'announceReplacementLost', 'deletePod'),
  }),
  following: {
    stale: to('following'),
    staleObserveOnly: to('following'),
    gateProceed: to('following'),
    gateWait: to('following'),
    recheckGate: to('following'),
    markWon: to('following'),
    markConflict: to('following'),
    renewed: to('idle', 'cancelTakeoverTimer'),
    // The owner changed (a takeover by a third manager): give the new owner a full timeout.
    markedByOther: to('following', 'startTakeoverTimer'),
    markedByMe: to('deletingPod', 'cancelTakeoverTimer', 'deletePod'),
    podGone: to('following'),
    detached: to('following'),
    replacementCreated: to('following'),
    replacementFailed: to('following'),
    replacementLost: to('following'),
    // The owner made its replacement: waiting for the agent to acquire is not a stall.
    replacementLive: to('followingAcquire', 'cancelTakeoverTimer'),
    acquired: to('idle', 'cancelTakeoverTimer'),
    takeoverDue: to('takingOver', 'writeTakeover'),
    // The owner went down with its node: nobody runs the failover; taking over is a CAS.
    ownerLost: to('takingOver', 'cancelTakeoverTimer', 'writeTakeover'),
    takeoverWon: to('following'),
    takeoverConflict: to('following'),
    stepFailed: to('following'),
    leaseGone: to('idle', 'cancelTakeoverTimer'),
  },
  followingAcquire: {
    stale: to('followingAcquire'),
    staleObserveOnly: to('followingAcquire'),
    gateProceed: to('followingAcquire'),
    gateWait: to('followingAcquire'),
    recheckGate: to('followingAcquire'),
    markWon: to('followingAcquire'),
    markConflict: to('followingAcquire'),
    renewed: to('idle'),
    // A third manager took over; the replacement still exists, so there is still nothing to time.
    markedByOther: to('followingAcquire'),
    markedByMe: to('deletingPod', 'deletePod'),
    podGone: to('followingAcquire'),
    detached: to('followingAcquire'),
    replacementCreated: to('followingAcquire'),
    // It ended without acquiring: the owner must make another; give it a full timeout.
    replacementFailed: to('following', 'startTakeoverTimer'),
    // Its node went silent: the owner should go round again (at once, by the same rule);
    // if it does not, the takeover timer runs, and a replacement on a lost node is not
    // "live" for noticeReplacement, so it cannot cancel the timer again.
    replacementLost: to('following', 'startTakeoverTimer'),
    replacementLive: to('followingAcquire'),
    acquired: to('idle'),
    // NB: the timer was cancelled on entry; a late one changes nothing.
    takeoverDue: to('followingAcquire'),
    // The owner's replacement lives: waiting for its agent is still no stall, whoever
    // made it (a replacement lost with the owner's node sends us to `following` first).
    ownerLost: to('followingAcquire'),
    takeoverWon: to('followingAcquire'),
    takeoverConflict: to('followingAcquire'),
    stepFailed: to('followingAcquire'),
    leaseGone: to('idle'),
  },
  takingOver: {
    stale: to('takingOver'),
    staleObserveOnly: to('takingOver'),
    gateProceed: to('takingOver'),
    gateWait: to('takingOver'),
    recheckGate: to('takingOver'),
    markWon: to('takingOver'),
    markConflict: to('takingOver'),
    renewed: to('idle'),
    markedByOther: to('takingOver'),
    markedByMe: to('takingOver'),
    podGone: to('takingOver'),
    detached: to('takingOver'),
    replacementCreated: to('takingOver'),
    replacementFailed: to('takingOver'),
    replacementLost: to('takingOver'),
    replacementLive: to('takingOver'),
    acquired: to('idle'),
    takeoverDue: to('takingOver'),
    ownerLost: to('takingOver'),
    takeoverWon: to('deletingPod', 'announceTakeover', 'deletePod'),
    takeoverConflict: to('following', 'reobserve', 'startTakeoverTimer'),
    stepFailed: to('following', 'startTakeoverTimer'),
    leaseGone: to('idle'),
  },
};

export function transition(phase: Phase, event: FailoverEvent): Transition {
  return TRANSITIONS[phase][event];
}

/** Phases in which this manager runs the failover (they count against the concurrency limit). */
export function isOwning(phase: Phase): boolean {
  return (
    phase !== 'idle' && phase !== 'following' && phase !== 'followingAcquire' && phase !== 'awaitingNodeDown'
  );
}

/** The step action a phase repeats after `retryStepLater`. */
export function stepOf(phase: Phase): Action | undefined {
  switch (phase) {
    case 'checkingStorage':
      return 'checkStorage';
    case 'deletingPod':
      return 'deletePod';
    case 'detaching':
      return 'handOffVolume';
    case 'replacing':
      return 'createReplacement';
    default:
      return undefined;
  }
}
