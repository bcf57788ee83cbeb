/**
 * The handoff order of an RWO volume, judged from a log of its VolumeAttachments' lives
 * (pure): old access fully gone before any new one. The log is the caller's, each event
 * numbered in the order one VolumeAttachment watch delivered it (the API server's
 * resourceVersion order): created (first seen), attached, detaching (first seen with a
 * deletionTimestamp), detached (ControllerUnpublish done: the attacher's finalizer
 * removed), deleted (the object is gone). real-node-handoff.test.ts logs created and
 * deleted from the real cluster; test/unit/handoff-order.test.ts proves the check fails
 * on each way an attach elsewhere can come first.
 */
export type AttachEventKind = 'created' | 'attached' | 'detaching' | 'detached' | 'deleted';

export interface AttachEvent {
  /** Position in the log (watch order). */
  seq: number;
  event: AttachEventKind;
  volumeAttachment: string;
  pv: string;
  node: string;
  /** CLOCK_MONOTONIC ms, comparable with serving windows. */
  monoMs: number;
  wall: Date;
}

/**
 * Pure: every moment (in log order) a PV's VolumeAttachment on one node was created
 * while another of the same PV on a different node still existed, as messages. `[]`
 * means each attach elsewhere came only after the old attachment was gone, finalizer
 * and all. NB: for RWO/RWOP volumes; RWX may legitimately overlap.
 */
export function handoffOrderViolations(events: readonly AttachEvent[]): string[] {
  const live = new Map<string, Map<string, string>>(); // pv -> volumeAttachment -> node
  const out: string[] = [];
  for (const e of [...events].sort((a, b) => a.seq - b.seq)) {
    const ofPv = live.get(e.pv) ?? new Map<string, string>();
    live.set(e.pv, ofPv);
    if (e.event === 'created') {
      for (const [va, node] of ofPv)
        if (node !== e.node)
          out.push(
            `PV ${e.pv}: ${e.volumeAttachment} on ${e.node} created (#${e.seq}) while ${va} on ${node} still existed`,
          );
      ofPv.set(e.volumeAttachment, e.node);
    } else if (e.event === 'deleted') {
      ofPv.delete(e.volumeAttachment);
    }
  }
  return out;
}
