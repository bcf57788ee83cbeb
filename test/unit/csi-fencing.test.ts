/**
 * The pure parts of the fencing CSI driver's testbed side (dev/csi): its access log
 * parsed into access-log.ts entries, whose order check fails on the violation the
 * fencing must prevent (a grant elsewhere before the old node's revoke); the leftover
 * check's readers (a view's mount in a node's mountinfo, a view's fencefs process, and
 * not another testbed's); the driver's controller argv in the fencing mode; the
 * provisioner's flags and StorageClass.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  DRIVER_NAME,
  driverControllerArgs,
  provisionerArgs,
  provisionerClusterRole,
  STORAGE_CLASS,
  storageClassObject,
} from '../../dev/csi/config.ts';
import { parseAccessLog } from '../../dev/csi/controller.ts';
import { isViewProcess, viewMountsIn } from '../../dev/csi/view-leftovers.ts';
import { accessOrderViolations, revokeBeforeGrantElsewhere } from '../../dev/sim/storage/access-log.ts';

const line = (seq: number, op: string, node: string, monoMs: number) =>
  JSON.stringify({
    seq,
    op,
    pv: 'pvc-1',
    node,
    view: `/s/views/pvc-1/${node}.${seq}`,
    monoMs,
    wallMs: 1_700_000_000_000 + seq,
  });

test("the driver's access log parses into entries whose order check passes when the revoke came first", () => {
  const log = parseAccessLog(
    [
      line(1, 'grant', 'real-1', 10),
      line(2, 'revoke', 'real-1', 20),
      line(3, 'grant', 'real-2', 30),
      '',
    ].join('\n'),
  );
  assert.equal(log.length, 3);
  assert.deepEqual(log[0], {
    seq: 1,
    op: 'grant',
    pv: 'pvc-1',
    node: 'real-1',
    view: '/s/views/pvc-1/real-1.1',
    monoMs: 10,
    wall: new Date(1_700_000_000_001),
  });
  assert.deepEqual(accessOrderViolations(log), []);
  const order = revokeBeforeGrantElsewhere(log, 'pvc-1', 'real-1');
  assert.equal(order?.revoke.seq, 2);
  assert.equal(order?.grant.seq, 3);
});

test('the order check fails on a grant elsewhere before the revoke', () => {
  const log = parseAccessLog(
    [line(1, 'grant', 'real-1', 10), line(2, 'grant', 'real-2', 20), line(3, 'revoke', 'real-1', 30)].join(
      '\n',
    ),
  );
  assert.equal(accessOrderViolations(log).length, 1);
  assert.match(accessOrderViolations(log)[0] ?? '', /granted to real-2 \(#2\) while real-1's access/);
  assert.equal(revokeBeforeGrantElsewhere(log, 'pvc-1', 'real-1'), undefined);
});

test('a line that is not an access record is refused, naming its number', () => {
  assert.throws(() => parseAccessLog(`${line(1, 'grant', 'a', 1)}\n{"seq":2,"op":"steal"}`), {
    code: 'E_CSI_ACCESS_LOG',
    message: /line 2: not an access record/,
  });
});

test("the leftover check sees a view's mount and process of this backing dir, not another testbed's", () => {
  const mountinfo = [
    '22 1 0:21 / /proc rw - proc proc rw',
    '901 30 0:77 / /c/csi-a/state/views/pvc-1/real-1.1 rw,nosuid,nodev - fuse.leasehold-fencefs /c/csi-a/backing/pvc-1 rw,user_id=0',
    '902 30 0:78 / /c/csi-b/state/views/pvc-1/real-1.1 rw - fuse.leasehold-fencefs /c/csi-b/backing/pvc-1 rw',
  ].join('\n');
  assert.deepEqual(viewMountsIn(mountinfo, '/c/csi-a/backing'), ['/c/csi-a/state/views/pvc-1/real-1.1']);
  assert.deepEqual(viewMountsIn(mountinfo, '/c/csi-c/backing'), []);
  const argv = ['/x/leasehold-fencefs', '--backing', '/c/csi-a/backing/pvc-1', '--mountpoint', '/m'];
  assert.equal(isViewProcess(argv, '/c/csi-a/backing'), true);
  assert.equal(isViewProcess(argv, '/c/csi-b/backing'), false);
  assert.equal(
    isViewProcess(['/bin/sleep', '--backing', '/c/csi-a/backing/pvc-1'], '/c/csi-a/backing'),
    false,
  );
});

test('the fencing mode is a flag of the controller part; without it the argv is as before', () => {
  const plain = driverControllerArgs('/c/s.sock', '/c/backing', '/c/state');
  assert.equal(
    plain.some((a) => a.startsWith('-fencefs')),
    false,
  );
  assert.deepEqual(driverControllerArgs('/c/s.sock', '/c/backing', '/c/state', '/b/leasehold-fencefs'), [
    ...plain,
    '-fencefs=/b/leasehold-fencefs',
  ]);
});

test('the provisioner runs alone with its own kubeconfig; the StorageClass names the driver and deletes', () => {
  const args = provisionerArgs('/c/controller.sock', '/c/provisioner.kubeconfig');
  for (const a of [
    '--csi-address=/c/controller.sock',
    '--kubeconfig=/c/provisioner.kubeconfig',
    '--leader-election=false',
  ])
    assert.ok(args.includes(a), a);
  const sc = storageClassObject();
  assert.equal(sc.metadata?.name, STORAGE_CLASS);
  assert.equal(sc.provisioner, DRIVER_NAME);
  assert.equal(sc.reclaimPolicy, 'Delete');
  const pvRule = provisionerClusterRole().rules?.find((r) => r.resources?.includes('persistentvolumes'));
  assert.ok(
    pvRule?.verbs.includes('create') && pvRule.verbs.includes('delete'),
    'it may create and delete PVs',
  );
});
