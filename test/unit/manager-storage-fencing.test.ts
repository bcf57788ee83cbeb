import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Node } from '@kubernetes/client-node';
import type { NonFencingPolicy } from '../../manager/config.ts';
import { readManagerConfig } from '../../manager/config.ts';
import {
  classifyStorage,
  conditionChanged,
  decideNonFencingGate,
  holderReturned,
  type LostNodeRead,
  OUT_OF_SERVICE_TAINT,
  readLostNode,
  type StorageFencing,
  unclassifiable,
} from '../../manager/failover/storage-fencing.ts';
import { ANNOTATION_OUT_OF_SERVICE_BY } from '../../manager/node-handling/decide-out-of-service.ts';

const pv = { name: 'pv-a', csiDriver: 'd.example' };

test('classification: attachRequired true or unset fences, false cannot, anything unsure is unknown', () => {
  assert.equal(classifyStorage(pv, { kind: 'found', attachRequired: true }).kind, 'fences');
  assert.equal(classifyStorage(pv, { kind: 'found', attachRequired: undefined }).kind, 'fences');
  const no = classifyStorage(pv, { kind: 'found', attachRequired: false });
  assert.equal(no.kind, 'cannot-fence');
  assert.match(no.reason, /CSIDriver d\.example has attachRequired: false.*PV pv-a/);
  assert.equal(classifyStorage(pv, { kind: 'missing' }).kind, 'unknown');
  assert.equal(classifyStorage(pv, { kind: 'unreadable', error: '403' }).kind, 'unknown');
  assert.equal(classifyStorage({ name: 'pv-b', csiDriver: undefined }, { kind: 'missing' }).kind, 'unknown');
  const unbound = unclassifiable('ns/c', 'is not bound to a PV');
  assert.equal(unbound.kind, 'unknown');
  assert.match(unbound.reason, /PVC ns\/c is not bound/);
});

const up: LostNodeRead = { kind: 'present', outOfService: 'none' };
const tainted: LostNodeRead = { kind: 'present', outOfService: 'other' };
const ourTaint: LostNodeRead = { kind: 'present', outOfService: 'leasehold' };
const gone: LostNodeRead = { kind: 'gone' };
const gate = (storage: StorageFencing, policy: NonFencingPolicy, node: LostNodeRead, lostNode = 'n1') =>
  decideNonFencingGate({ storage, policy, lostNode, node });
const fences: StorageFencing = { kind: 'fences', reason: 'r' };
const cannot: StorageFencing = { kind: 'cannot-fence', reason: 'r' };
const unknown: StorageFencing = { kind: 'unknown', reason: 'r' };

test('fencing storage always proceeds, StorageFencing=True', () => {
  for (const policy of ['require-node-down', 'lease-only'] as const)
    for (const node of [up, tainted, gone, { kind: 'unknown' } as const]) {
      const d = gate(fences, policy, node);
      assert.equal(d.kind, 'proceed');
      assert.deepEqual([d.condition.status, d.condition.reason], ['True', 'StorageFences']);
    }
});

test('require-node-down: storage that cannot (or may not) fence waits for the taint or the Node gone', () => {
  for (const storage of [cannot, unknown]) {
    const waiting = gate(storage, 'require-node-down', up);
    assert.equal(
      waiting.kind,
      'wait',
      'a node merely present (NotReady or not) is no proof: a frozen node is that too',
    );
    assert.deepEqual([waiting.condition.status, waiting.condition.reason], ['False', 'AwaitingNodeDown']);
    // The message names what unblocks it: the taint, the Node's deletion, or the other policy.
    assert.match(waiting.condition.message, /node n1 is known to be down/);
    assert.match(waiting.condition.message, /out-of-service=nodeshutdown:NoExecute/);
    assert.match(waiting.condition.message, /delete its Node object/);
    assert.match(waiting.condition.message, /LEASEHOLD_NONFENCING_STORAGE=lease-only/);
    const t = gate(storage, 'require-node-down', tainted);
    assert.deepEqual([t.kind, t.condition.status, t.condition.reason], ['proceed', 'False', 'NodeDown']);
    assert.match(t.condition.message, /has the node\.kubernetes\.io\/out-of-service taint/);
    const g = gate(storage, 'require-node-down', gone);
    assert.deepEqual([g.kind, g.condition.reason], ['proceed', 'NodeDown']);
    assert.match(g.condition.message, /node n1 is gone/);
  }
});

test("require-node-down: leasehold's own out-of-service taint and an unknown node are no evidence", () => {
  const own = gate(cannot, 'require-node-down', ourTaint);
  assert.equal(own.kind, 'wait');
  assert.match(own.condition.message, /taint on node n1 is leasehold's own/);
  const nowhere = gate(cannot, 'require-node-down', { kind: 'unknown' }, '');
  assert.equal(nowhere.kind, 'wait', 'an unknown node is never "gone"');
  assert.match(nowhere.condition.message, /node is not known/);
});

test('lease-only proceeds at once, says what it risks, and is never reported as fencing', () => {
  for (const storage of [cannot, unknown])
    for (const node of [up, ourTaint, { kind: 'unknown' } as const]) {
      const d = gate(storage, 'lease-only', node);
      assert.equal(d.kind, 'proceed');
      // The gate can say no fencing: a lease-only failover on cannot-fence storage is not StorageFences.
      assert.deepEqual([d.condition.status, d.condition.reason], ['False', 'LeaseOnly']);
      assert.match(d.condition.message, /may write once more when it resumes/);
    }
});

test('readLostNode: whose out-of-service taint the Node carries', () => {
  const node = (taints: { key: string; value?: string; effect: string }[], marked: boolean): V1Node => ({
    metadata: { name: 'n1', annotations: marked ? { [ANNOTATION_OUT_OF_SERVICE_BY]: 'mgr-a' } : {} },
    spec: { taints },
  });
  const ours = { key: OUT_OF_SERVICE_TAINT, value: 'nodeshutdown', effect: 'NoExecute' };
  assert.deepEqual(readLostNode(undefined), { kind: 'gone' });
  assert.deepEqual(readLostNode(node([], false)), up);
  assert.deepEqual(
    readLostNode(node([{ key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' }], false)),
    up,
  );
  assert.deepEqual(
    readLostNode(node([ours], false)),
    tainted,
    'without our annotation: an operator put it there',
  );
  assert.deepEqual(readLostNode(node([ours], true)), ourTaint);
  assert.deepEqual(readLostNode(node([], true)), up, 'our mark alone is no taint');
  assert.deepEqual(
    readLostNode(node([{ key: OUT_OF_SERVICE_TAINT, value: 'off', effect: 'NoExecute' }], true)),
    tainted,
    'an out-of-service taint that is not the one leasehold adds',
  );
});

test('the condition is written only when it says something new; the wait ends with HolderReturned', () => {
  const c = gate(cannot, 'require-node-down', up).condition;
  assert.equal(conditionChanged(undefined, c), true);
  assert.equal(conditionChanged({ ...c }, c), false);
  assert.equal(conditionChanged({ ...c, message: 'other' }, c), true);
  const back = holderReturned(cannot, 'n1');
  assert.deepEqual([back.status, back.reason], ['False', 'HolderReturned']);
  assert.equal(conditionChanged(c, back), true);
});

test('LEASEHOLD_NONFENCING_STORAGE: require-node-down by default, lease-only, anything else named with the allowed values', () => {
  const base = { LEASEHOLD_POD_NAME: 'm', LEASEHOLD_NODE_NAME: 'n' };
  assert.equal(readManagerConfig(base).nonFencingStorage, 'require-node-down');
  assert.equal(
    readManagerConfig({ ...base, LEASEHOLD_NONFENCING_STORAGE: 'lease-only' }).nonFencingStorage,
    'lease-only',
  );
  assert.throws(
    () => readManagerConfig({ ...base, LEASEHOLD_NONFENCING_STORAGE: 'yolo' }),
    /LEASEHOLD_NONFENCING_STORAGE="yolo": must be one of require-node-down, lease-only/,
  );
});
