import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type AccessLogEntry,
  accessOrderViolations,
  revokeBeforeGrantElsewhere,
} from '../../dev/sim/storage/access-log.ts';

let seq = 0;
const e = (op: AccessLogEntry['op'], pv: string, node: string): AccessLogEntry => {
  seq += 1;
  return { seq, op, pv, node, view: `/v/${pv}/${node}`, monoMs: seq, wall: new Date(0) };
};

test('a handoff that revokes the old node before granting the new one is in order', () => {
  const log = [e('grant', 'pv-a', 'n1'), e('revoke', 'pv-a', 'n1'), e('grant', 'pv-a', 'n2')];
  assert.deepEqual(accessOrderViolations(log), []);
  const pair = revokeBeforeGrantElsewhere(log, 'pv-a', 'n1');
  assert.equal(pair?.revoke.seq, log[1]?.seq);
  assert.equal(pair?.grant.seq, log[2]?.seq);
});

test('a grant elsewhere while the old node still has access is a violation, whatever order the array is in', () => {
  const log = [e('grant', 'pv-a', 'n1'), e('grant', 'pv-a', 'n2'), e('revoke', 'pv-a', 'n1')];
  const violations = accessOrderViolations([...log].reverse());
  assert.equal(violations.length, 1);
  assert.match(
    violations[0] ?? '',
    /PV pv-a: granted to n2 \(#\d+\) while n1's access \(granted #\d+\) was not revoked/,
  );
  assert.equal(revokeBeforeGrantElsewhere(log, 'pv-a', 'n1'), undefined);
});

test('other volumes and a re-grant to the same node are not violations', () => {
  const log = [e('grant', 'pv-a', 'n1'), e('grant', 'pv-b', 'n2'), e('grant', 'pv-a', 'n1')];
  assert.deepEqual(accessOrderViolations(log), []);
  assert.equal(revokeBeforeGrantElsewhere(log, 'pv-a', 'n1'), undefined, 'no revoke at all');
});
