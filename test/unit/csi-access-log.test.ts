import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type AccessLogEntry,
  accessOrderViolations,
  revokeBeforeGrantElsewhere,
  type ViewWrites,
  writesAcrossRevokes,
} from '../../dev/csi/access-log.ts';

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

test('writes through the views: the old node last before its revoke, the new one first after it; either crossing is a violation', () => {
  const log = [e('grant', 'pv-w', 'n1'), e('revoke', 'pv-w', 'n1'), e('grant', 'pv-w', 'n2')];
  const [grant1, revoke, grant2] = log as [AccessLogEntry, AccessLogEntry, AccessLogEntry];
  const view = (node: string, grantSeq: number, first: number, last: number): ViewWrites => ({
    node,
    grantSeq,
    writes: 3,
    firstWriteMonoMs: first,
    lastWriteMonoMs: last,
  });
  const r = revoke.monoMs;
  assert.deepEqual(
    writesAcrossRevokes(log, 'pv-w', [
      view('n1', grant1.seq, r - 5, r - 1),
      view('n2', grant2.seq, r + 1, r + 9),
    ]),
    [],
  );
  const oldLate = writesAcrossRevokes(log, 'pv-w', [
    view('n1', grant1.seq, r - 5, r + 1),
    view('n2', grant2.seq, r + 2, r + 9),
  ]);
  assert.equal(oldLate.length, 1);
  assert.match(oldLate[0] ?? '', /a write through n1's view .* not before its revoke/);
  const newEarly = writesAcrossRevokes(log, 'pv-w', [
    view('n1', grant1.seq, r - 5, r - 1),
    view('n2', grant2.seq, r, r + 9),
  ]);
  assert.equal(newEarly.length, 1);
  assert.match(newEarly[0] ?? '', /a write through n2's view .* not after n1's revoke/);
  assert.deepEqual(
    writesAcrossRevokes(log, 'pv-w', [
      { ...view('n1', grant1.seq, 0, 0), writes: 0, firstWriteMonoMs: undefined, lastWriteMonoMs: undefined },
    ]),
    [],
    'a view that wrote nothing crosses nothing',
  );
});

test('the revoke before the grant elsewhere is the last one: an earlier revoke and re-grant on the same node do not count', () => {
  const log = [
    e('grant', 'pv-r', 'n1'),
    e('revoke', 'pv-r', 'n1'),
    e('grant', 'pv-r', 'n1'),
    e('revoke', 'pv-r', 'n1'),
    e('grant', 'pv-r', 'n2'),
  ];
  assert.equal(revokeBeforeGrantElsewhere(log, 'pv-r', 'n1')?.revoke.seq, log[3]?.seq);
  const regranted = [
    e('grant', 'pv-q', 'n1'),
    e('revoke', 'pv-q', 'n1'),
    e('grant', 'pv-q', 'n1'),
    e('grant', 'pv-q', 'n2'),
  ];
  assert.equal(
    revokeBeforeGrantElsewhere(regranted, 'pv-q', 'n1'),
    undefined,
    'n1 had access again at the grant to n2',
  );
});
