/**
 * The out-of-service taint decision (manager/node-handling/decide-out-of-service.ts): every branch of
 * decideOutOfService with an injected monotonic time, the taint state a Node shows, the
 * lost nodes of our failovers, and the CAS merge patches.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Lease, V1Node, V1Taint } from '@kubernetes/client-node';
import {
  ANNOTATION_OUT_OF_SERVICE_BY,
  addTaintPatch,
  decideOutOfService,
  isNodeReady,
  lostNodesOfOurFailovers,
  OUT_OF_SERVICE_TAINT,
  type OutOfServiceInput,
  removeTaintPatch,
  taintStateOf,
} from '../../manager/node-handling/decide-out-of-service.ts';

const GRACE = 8_000;
const HOLD = 6_000;

/** A node that stopped at t=0: heartbeat last changed at 0, seen NotReady at 9 s. */
function downNode(overrides: Partial<OutOfServiceInput> = {}): OutOfServiceInput {
  return {
    enabled: true,
    observeOnly: false,
    now: 20_000,
    graceMs: GRACE,
    holdMs: HOLD,
    node: { ready: false, heartbeatObservedAt: 0, notReadyObservedAt: 9_000 },
    taint: 'none',
    lostNodeOfOurFailover: true,
    ...overrides,
  };
}

describe('decideOutOfService: adding', () => {
  it('taints a lost node of our failover, down by both signals for the hold', () => {
    // Heartbeat stale from 8 s, NotReady seen at 9 s: down since 9 s; at 15 s the hold is met.
    assert.deepEqual(decideOutOfService(downNode({ now: 15_000 })), { kind: 'add-taint', downForMs: 6_000 });
    assert.deepEqual(decideOutOfService(downNode({ now: 20_000 })), { kind: 'add-taint', downForMs: 11_000 });
  });

  it('waits for the hold, counted from the later of the two signals, and says when to look again', () => {
    assert.deepEqual(decideOutOfService(downNode({ now: 14_999 })), {
      kind: 'nothing',
      reason: 'not-down-long-enough',
      recheckAfterMs: 1,
    });
    // NotReady seen early (1 s), heartbeat stale only from 8 s: down since 8 s.
    const early = downNode({
      now: 10_000,
      node: { ready: false, heartbeatObservedAt: 0, notReadyObservedAt: 1_000 },
    });
    assert.deepEqual(decideOutOfService(early), {
      kind: 'nothing',
      reason: 'not-down-long-enough',
      recheckAfterMs: 4_000,
    });
  });

  it('a heartbeat seen again restarts the count (a flapping node is not down)', () => {
    const renewed = downNode({
      now: 20_000,
      node: { ready: false, heartbeatObservedAt: 19_000, notReadyObservedAt: 9_000 },
    });
    const d = decideOutOfService(renewed);
    assert.equal(d.kind, 'nothing');
    assert.equal(d.kind === 'nothing' && d.reason, 'not-down-long-enough');
    assert.equal(d.kind === 'nothing' && d.recheckAfterMs, 19_000 + GRACE + HOLD - 20_000);
  });

  it('never taints a Ready node, whatever its heartbeat', () => {
    const ready = downNode({ node: { ready: true, heartbeatObservedAt: 0, notReadyObservedAt: undefined } });
    assert.deepEqual(decideOutOfService(ready), { kind: 'nothing', reason: 'node-ready' });
    const notSeen = downNode({
      node: { ready: false, heartbeatObservedAt: 0, notReadyObservedAt: undefined },
    });
    assert.deepEqual(decideOutOfService(notSeen), { kind: 'nothing', reason: 'node-ready' });
  });

  it('never taints a node whose heartbeat it has not observed', () => {
    const unseen = downNode({
      node: { ready: false, heartbeatObservedAt: undefined, notReadyObservedAt: 0 },
    });
    assert.deepEqual(decideOutOfService(unseen), { kind: 'nothing', reason: 'heartbeat-unobserved' });
  });

  it('never taints a node that is not the lost node of our failover', () => {
    assert.deepEqual(decideOutOfService(downNode({ lostNodeOfOurFailover: false })), {
      kind: 'nothing',
      reason: 'not-our-failover',
    });
  });

  it('never taints when the setting is off or in observe-only mode', () => {
    assert.deepEqual(decideOutOfService(downNode({ enabled: false })), {
      kind: 'nothing',
      reason: 'disabled',
    });
    assert.deepEqual(decideOutOfService(downNode({ observeOnly: true })), {
      kind: 'nothing',
      reason: 'observe-only',
    });
  });

  it('does nothing for a node without a Node object', () => {
    assert.deepEqual(decideOutOfService(downNode({ node: undefined })), {
      kind: 'nothing',
      reason: 'no-node',
    });
  });

  it('leaves an admin taint alone, whatever the setting and the node', () => {
    for (const enabled of [true, false]) {
      assert.deepEqual(decideOutOfService(downNode({ taint: 'admin', enabled })), {
        kind: 'nothing',
        reason: 'admin-taint',
      });
    }
    const back = downNode({
      taint: 'admin',
      node: { ready: true, heartbeatObservedAt: 19_000, notReadyObservedAt: undefined },
    });
    assert.deepEqual(decideOutOfService(back), { kind: 'nothing', reason: 'admin-taint' });
  });
});

describe('decideOutOfService: removing', () => {
  const back = { ready: true, heartbeatObservedAt: 19_000, notReadyObservedAt: undefined };

  it('removes our taint when the node is Ready with a fresh heartbeat', () => {
    assert.deepEqual(decideOutOfService(downNode({ taint: 'ours', node: back })), {
      kind: 'remove-taint',
      reason: 'node-returned',
    });
    // Exactly the grace old still counts as fresh; a failover of ours does not keep it.
    const edge = downNode({ taint: 'ours', now: 19_000 + GRACE, node: back, lostNodeOfOurFailover: true });
    assert.deepEqual(decideOutOfService(edge), { kind: 'remove-taint', reason: 'node-returned' });
  });

  it('keeps our taint while the node is down, Ready without a fresh heartbeat, or unobserved', () => {
    const cases = [
      { ready: false, heartbeatObservedAt: 19_000, notReadyObservedAt: 9_000 },
      { ready: true, heartbeatObservedAt: 0, notReadyObservedAt: undefined },
      { ready: true, heartbeatObservedAt: undefined, notReadyObservedAt: undefined },
    ];
    for (const node of cases) {
      assert.deepEqual(decideOutOfService(downNode({ taint: 'ours', node })), {
        kind: 'nothing',
        reason: 'awaiting-return',
      });
    }
  });

  it('removes our taint at once when the setting is off, even while the node is down', () => {
    assert.deepEqual(decideOutOfService(downNode({ taint: 'ours', enabled: false })), {
      kind: 'remove-taint',
      reason: 'disabled',
    });
  });

  it('a mark whose taint an admin removed is never re-tainted, only cleared on return or when off', () => {
    assert.deepEqual(decideOutOfService(downNode({ taint: 'markOnly' })), {
      kind: 'nothing',
      reason: 'awaiting-return',
    });
    assert.deepEqual(decideOutOfService(downNode({ taint: 'markOnly', node: back })), {
      kind: 'remove-taint',
      reason: 'node-returned',
    });
    assert.deepEqual(decideOutOfService(downNode({ taint: 'markOnly', enabled: false })), {
      kind: 'remove-taint',
      reason: 'disabled',
    });
  });
});

function node(taints: V1Taint[], annotations: Record<string, string> = {}, ready = 'False'): V1Node {
  return {
    metadata: { name: 'n1', resourceVersion: '42', annotations },
    spec: { taints },
    status: { conditions: [{ type: 'Ready', status: ready }] },
  };
}
const mark = { [ANNOTATION_OUT_OF_SERVICE_BY]: 'mgr-a' };
const other: V1Taint = { key: 'example.com/dedicated', value: 'x', effect: 'NoSchedule' };

describe('taintStateOf', () => {
  it('tells ours, an admin taint, a bare mark and none apart', () => {
    assert.equal(taintStateOf(node([])), 'none');
    assert.equal(taintStateOf(node([other])), 'none');
    assert.equal(taintStateOf(node([{ ...OUT_OF_SERVICE_TAINT }], mark)), 'ours');
    assert.equal(taintStateOf(node([{ ...OUT_OF_SERVICE_TAINT }])), 'admin');
    assert.equal(
      taintStateOf(node([{ key: OUT_OF_SERVICE_TAINT.key, value: 'shutdown', effect: 'NoSchedule' }])),
      'admin',
    );
    assert.equal(taintStateOf(node([other], mark)), 'markOnly');
    assert.equal(taintStateOf({ metadata: { name: 'bare' } }), 'none');
  });

  it('reads Ready only from a True Ready condition', () => {
    assert.equal(isNodeReady(node([], {}, 'True')), true);
    assert.equal(isNodeReady(node([], {}, 'Unknown')), false);
    assert.equal(isNodeReady({ metadata: { name: 'bare' } }), false);
  });
});

describe('lostNodesOfOurFailovers', () => {
  const lease = (name: string, annotations: Record<string, string>): V1Lease => ({
    metadata: { namespace: 'shares', name, annotations },
  });
  it('lists holder nodes of leases marked delinquent by this manager only', () => {
    const leases = [
      lease('a', {
        'leasehold.dev/delinquent': 't',
        'leasehold.dev/failover-by': 'me',
        'leasehold.dev/holder-node': 'n1',
      }),
      lease('b', {
        'leasehold.dev/delinquent': 't',
        'leasehold.dev/failover-by': 'me',
        'leasehold.dev/holder-node': 'n1',
      }),
      lease('c', {
        'leasehold.dev/delinquent': 't',
        'leasehold.dev/failover-by': 'other',
        'leasehold.dev/holder-node': 'n2',
      }),
      lease('d', { 'leasehold.dev/failover-by': 'me', 'leasehold.dev/holder-node': 'n3' }),
      lease('e', { 'leasehold.dev/delinquent': 't', 'leasehold.dev/failover-by': 'me' }),
      { metadata: { name: 'bare' } },
    ];
    assert.deepEqual([...lostNodesOfOurFailovers(leases, 'me')], [['n1', ['shares/a', 'shares/b']]]);
  });
});

describe('patches', () => {
  it('adding keeps other taints, sets the mark and carries the resourceVersion (CAS)', () => {
    assert.deepEqual(addTaintPatch(node([other]), 'mgr-a'), {
      metadata: { resourceVersion: '42', annotations: mark },
      spec: { taints: [other, OUT_OF_SERVICE_TAINT] },
    });
  });

  it('removing drops only our taint and the mark, with the resourceVersion', () => {
    const admin: V1Taint = { key: OUT_OF_SERVICE_TAINT.key, value: 'other', effect: 'NoExecute' };
    assert.deepEqual(removeTaintPatch(node([other, { ...OUT_OF_SERVICE_TAINT }, admin], mark)), {
      metadata: { resourceVersion: '42', annotations: { [ANNOTATION_OUT_OF_SERVICE_BY]: null } },
      spec: { taints: [other, admin] },
    });
    assert.deepEqual(removeTaintPatch(node([{ ...OUT_OF_SERVICE_TAINT }], mark)), {
      metadata: { resourceVersion: '42', annotations: { [ANNOTATION_OUT_OF_SERVICE_BY]: null } },
      spec: { taints: null },
    });
  });
});
