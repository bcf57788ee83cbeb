import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  classifyStorage,
  decideNonFencingGate,
  type NonFencingPolicy,
  OUT_OF_SERVICE_TAINT,
  type StorageFencing,
} from '../../manager/failover/storage-fencing.ts';

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
});

const gate = (storage: StorageFencing, policy: NonFencingPolicy, nodeTaints: string[] | undefined) =>
  decideNonFencingGate({ storage, policy, lostNode: 'n1', nodeTaints });
const fences: StorageFencing = { kind: 'fences', reason: 'r' };
const cannot: StorageFencing = { kind: 'cannot-fence', reason: 'r' };
const unknown: StorageFencing = { kind: 'unknown', reason: 'r' };

test('fencing storage always proceeds, StorageFencing=True', () => {
  for (const policy of ['require-node-down', 'lease-only'] as const) {
    const d = gate(fences, policy, []);
    assert.equal(d.kind, 'proceed');
    assert.equal(d.condition.status, 'True');
  }
});

test('require-node-down: storage that cannot (or may not) fence waits for the taint or the Node gone', () => {
  for (const storage of [cannot, unknown]) {
    const waiting = gate(storage, 'require-node-down', ['node.kubernetes.io/unreachable']);
    assert.equal(waiting.kind, 'wait', 'NotReady/unreachable is no proof: a frozen node is that too');
    assert.equal(waiting.condition.reason, 'AwaitingNodeDown');
    assert.match(waiting.condition.message, /node n1 is down.*out-of-service/);
    const tainted = gate(storage, 'require-node-down', [OUT_OF_SERVICE_TAINT]);
    assert.deepEqual([tainted.kind, tainted.condition.reason], ['proceed', 'NodeDown']);
    const gone = gate(storage, 'require-node-down', undefined);
    assert.deepEqual([gone.kind, gone.condition.reason], ['proceed', 'NodeDown']);
  }
});

test('lease-only proceeds at once and says what it risks', () => {
  const d = gate(cannot, 'lease-only', []);
  assert.equal(d.kind, 'proceed');
  assert.equal(d.condition.reason, 'LeaseOnly');
  assert.match(d.condition.message, /may write once more when it resumes/);
});
