/**
 * The pure parts of the fencing CSI driver's testbed side (dev/csi): its access log
 * parsed into access-log.ts entries, whose order check fails on the violation the
 * fencing must prevent (a grant elsewhere before the old node's revoke); the leftover
 * check's readers (a view's mount in a node's mountinfo, a view's fencefs process, and
 * not another testbed's); a node's share of it (its views' fencefs and the loop devices
 * over its views' images: what its crash must take with it), found and not confused
 * with another node's; which node's mount of a block volume the e2e reads; the
 * driver's controller argv in the fencing mode; the provisioner's flags and
 * StorageClass (the block kind).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  accessOrderViolations,
  revokeBeforeGrantElsewhere,
  writesAcrossRevokes,
} from '../../dev/csi/access-log.ts';
import {
  DRIVER_NAME,
  driverControllerArgs,
  provisionerArgs,
  provisionerClusterRole,
  STORAGE_CLASS,
  storageClassObject,
} from '../../dev/csi/config.ts';
import { parseAccessLog, parseViewReports } from '../../dev/csi/controller.ts';
import { isNodeViewProcess, isViewProcess, nodeLoopsIn, viewMountsIn } from '../../dev/csi/view-leftovers.ts';
import { volumeMountsIn } from '../../dev/system/real-share.ts';

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

/** One view as the driver's GET /views reports it (fencing.go viewReport); times in ms, given as ns. */
const viewReport = (node: string, grantSeq: number, firstMs: number, lastMs: number, extra = {}) => ({
  volume: 'pvc-1',
  node,
  view: `/s/views/pvc-1/${node}.${grantSeq}`,
  grantSeq,
  revoked: false,
  live: true,
  stats: {
    writes: 5,
    firstWriteMonoNs: firstMs * 1e6,
    lastWriteMonoNs: lastMs * 1e6,
    refused: 0,
    revoked: false,
  },
  ...extra,
});

test("the driver's view stats parse into ms; writesAcrossRevokes over them fails on a write through the old view after its revoke", () => {
  const log = parseAccessLog(
    [line(1, 'grant', 'real-1', 10), line(2, 'revoke', 'real-1', 20), line(3, 'grant', 'real-2', 30)].join(
      '\n',
    ),
  );
  const inOrder = parseViewReports(
    JSON.stringify([
      viewReport('real-1', 1, 11, 19, {
        revoked: true,
        stats: { ...viewReport('real-1', 1, 11, 19).stats, refused: 7 },
      }),
      viewReport('real-2', 3, 31, 40),
      // A view that never reported (its fencefs gone before a stats line): no writes known.
      { volume: 'pvc-2', node: 'real-2', view: '/v', grantSeq: 4, revoked: false, live: false },
    ]),
  );
  assert.deepEqual(inOrder[0], {
    pv: 'pvc-1',
    node: 'real-1',
    view: '/s/views/pvc-1/real-1.1',
    grantSeq: 1,
    live: true,
    revoked: true,
    hasStats: true,
    writes: 5,
    firstWriteMonoMs: 11,
    lastWriteMonoMs: 19,
    refused: 7,
  });
  assert.deepEqual(
    [inOrder[2]?.hasStats, inOrder[2]?.writes, inOrder[2]?.firstWriteMonoMs],
    [false, 0, undefined],
  );
  assert.deepEqual(writesAcrossRevokes(log, 'pvc-1', inOrder), []);
  const late = parseViewReports(
    JSON.stringify([viewReport('real-1', 1, 11, 21), viewReport('real-2', 3, 31, 40)]),
  );
  assert.match(
    writesAcrossRevokes(log, 'pvc-1', late).join('\n'),
    /a write through real-1's view \(granted #1\) at 21 ms, not before its revoke \(#2\) at 20 ms/,
  );
  const early = parseViewReports(
    JSON.stringify([viewReport('real-1', 1, 11, 19), viewReport('real-2', 3, 20, 40)]),
  );
  assert.match(
    writesAcrossRevokes(log, 'pvc-1', early).join('\n'),
    /real-2's view .* not after real-1's revoke/,
  );
});

test("view stats that are not the driver's report are refused, naming the entry and field", () => {
  assert.throws(() => parseViewReports('{"views":[]}'), { code: 'E_CSI_VIEWS', message: /not an array/ });
  assert.throws(() => parseViewReports(JSON.stringify([{ ...viewReport('a', 1, 1, 2), grantSeq: '1' }])), {
    code: 'E_CSI_VIEWS',
    message: /entry 0: grantSeq is not a number/,
  });
  assert.throws(
    () => parseViewReports(JSON.stringify([{ ...viewReport('a', 1, 1, 2), stats: { writes: 1 } }])),
    { code: 'E_CSI_VIEWS', message: /entry 0: stats.firstWriteMonoNs is not a number/ },
  );
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
  assert.deepEqual(
    driverControllerArgs('/c/s.sock', '/c/backing', '/c/state', {
      fencefs: '/b/leasehold-fencefs',
      viewsSocket: '/c/views.sock',
    }),
    [...plain, '-fencefs=/b/leasehold-fencefs', '-views-endpoint=/c/views.sock'],
  );
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
  assert.deepEqual(sc.parameters, { filesystem: 'ext4' }, 'its volumes are of the block kind');
  const pvRule = provisionerClusterRole().rules?.find((r) => r.resources?.includes('persistentvolumes'));
  assert.ok(
    pvRule?.verbs.includes('create') && pvRule.verbs.includes('delete'),
    'it may create and delete PVs',
  );
});

test("a node's storage leftovers: its views' fencefs and loop devices, not another node's or testbed's", () => {
  const argv = (mountpoint: string, backing = '/t/csi-1/backing/vol-a') => [
    '/c/leasehold-fencefs',
    '--backing',
    backing,
    '--mountpoint',
    mountpoint,
    '--mount-ns',
    '/proc/9/ns/mnt',
  ];
  assert.equal(
    isNodeViewProcess(argv('/t/csi-1/state/views/vol-a/real-1.3'), '/t/csi-1/backing', 'real-1'),
    true,
  );
  assert.equal(
    isNodeViewProcess(argv('/t/csi-1/state/views/vol-a/real-10.4'), '/t/csi-1/backing', 'real-1'),
    false,
  );
  assert.equal(
    isNodeViewProcess(argv('/t/csi-1/state/views/vol-a/real-2.3'), '/t/csi-1/backing', 'real-1'),
    false,
  );
  assert.equal(
    isNodeViewProcess(
      argv('/t/csi-2/state/views/vol-a/real-1.3', '/t/csi-2/backing/vol-a'),
      '/t/csi-1/backing',
      'real-1',
    ),
    false,
  );
  const loops = new Map([
    ['loop0', '/t/csi-1/state/views/vol-a/real-1.3/disk.img\n'],
    ['loop1', '/t/csi-1/state/views/vol-a/real-2.5/disk.img\n'],
    ['loop2', '/var/lib/images/real-1.3/disk.img\n'],
    ['loop3', '/t/csi-1/state/views/vol-b/real-1.7/disk.img (deleted)\n'],
    // Another testbed's node of the same name (another test file's run on the host).
    ['loop4', '/t/csi-2/state/views/vol-a/real-1.3/disk.img\n'],
  ]);
  assert.deepEqual(nodeLoopsIn(loops, 'real-1', '/t/csi-1/backing'), [
    'loop device /dev/loop0 over /t/csi-1/state/views/vol-a/real-1.3/disk.img',
    'loop device /dev/loop3 over /t/csi-1/state/views/vol-b/real-1.7/disk.img (deleted)',
  ]);
  assert.deepEqual(nodeLoopsIn(loops, 'real-1', '/t/csi-2/backing'), [
    'loop device /dev/loop4 over /t/csi-2/state/views/vol-a/real-1.3/disk.img',
  ]);
  assert.deepEqual(nodeLoopsIn(new Map(), 'real-1', '/t/csi-1/backing'), []);
});

test("the e2e reads a block volume through the latest grant's ext4 mount, not a revoked node's or another volume's", () => {
  const info = [
    '40 30 7:0 / /k/plugins/kubernetes.io/csi/d/1/globalmount rw - ext4 /dev/loop0 rw',
    '41 30 7:1 / /k/plugins/kubernetes.io/csi/d/2/globalmount rw - ext4 /dev/loop1 rw',
    '42 30 0:50 / /s/views/vol-x/real-1.2 rw - fuse.leasehold-fencefs /b/vol-x rw',
    '43 30 8:1 / /data rw - ext4 /dev/sda1 rw',
  ].join('\n');
  const backing: Record<string, string> = {
    '/dev/loop0': '/s/views/vol-x/real-1.2/disk.img',
    '/dev/loop1': '/s/views/vol-y/real-1.3/disk.img',
  };
  assert.deepEqual(
    volumeMountsIn(info, 'vol-x', (d) => backing[d]),
    [{ mountPoint: '/k/plugins/kubernetes.io/csi/d/1/globalmount', grant: 2 }],
  );
  assert.deepEqual(
    volumeMountsIn(info, 'vol-z', (d) => backing[d]),
    [],
  );
});
