/**
 * The handoff-order check (test/support/handoff-order.ts handoffOrderViolations): it
 * passes a detach-then-attach history and fails on every way an attach elsewhere can
 * come before the old attachment is gone.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type AttachEvent, type AttachEventKind, handoffOrderViolations } from '../support/handoff-order.ts';

function log(...steps: [AttachEventKind, string, string, string?][]): AttachEvent[] {
  return steps.map(([event, va, node, pv], i) => ({
    seq: i + 1,
    event,
    volumeAttachment: va,
    pv: pv ?? 'pv-a',
    node,
    monoMs: i,
    wall: new Date(0),
  }));
}

describe('handoffOrderViolations', () => {
  it('accepts: old attachment detached and gone before the new one is created', () => {
    const events = log(
      ['created', 'va-1', 'real-1'],
      ['attached', 'va-1', 'real-1'],
      ['detaching', 'va-1', 'real-1'],
      ['detached', 'va-1', 'real-1'],
      ['deleted', 'va-1', 'real-1'],
      ['created', 'va-2', 'real-2'],
      ['attached', 'va-2', 'real-2'],
    );
    assert.deepEqual(handoffOrderViolations(events), []);
  });

  it('fails: the new attachment created while the old one was still being detached', () => {
    const events = log(
      ['created', 'va-1', 'real-1'],
      ['attached', 'va-1', 'real-1'],
      ['detaching', 'va-1', 'real-1'],
      ['created', 'va-2', 'real-2'],
      ['detached', 'va-1', 'real-1'],
      ['deleted', 'va-1', 'real-1'],
    );
    assert.deepEqual(handoffOrderViolations(events), [
      'PV pv-a: va-2 on real-2 created (#4) while va-1 on real-1 still existed',
    ]);
  });

  it('fails: detached (finalizer removed) is not enough, the object must be gone', () => {
    const events = log(
      ['created', 'va-1', 'real-1'],
      ['detaching', 'va-1', 'real-1'],
      ['detached', 'va-1', 'real-1'],
      ['created', 'va-2', 'real-2'],
    );
    assert.equal(handoffOrderViolations(events).length, 1);
  });

  it('judges in log order, not array order', () => {
    const events = log(
      ['created', 'va-1', 'real-1'],
      ['deleted', 'va-1', 'real-1'],
      ['created', 'va-2', 'real-2'],
    );
    assert.deepEqual(handoffOrderViolations([...events].reverse()), []);
  });

  it('other PVs and the same node do not count', () => {
    const events = log(
      ['created', 'va-1', 'real-1', 'pv-a'],
      ['created', 'va-9', 'real-2', 'pv-b'],
      ['created', 'va-3', 'real-1', 'pv-a'],
    );
    assert.deepEqual(handoffOrderViolations(events), []);
  });
});
