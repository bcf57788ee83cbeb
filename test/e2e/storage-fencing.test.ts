/**
 * Storage that fences (issue 11), on the simulator's fencing storage
 * (dev/sim/storage/: each node reaches the volume through its own revocable FUSE
 * view, revoked by the attacher's ControllerUnpublish before the finalizer goes), next to
 * storage without an attach step (CSIDriver attachRequired: false), which cannot fence.
 * Two shares on sim-1, both servers stubborn (they keep appending 3 s after the agent's
 * SIGTERM, so whatever stops the old server on resume is the storage, not the fence) and
 * quick (a record every 20 ms: the healed kubelet kills the force-deleted old pod some
 * 100-200 ms after the resume, and the old server must get its writes in before that):
 *  - freeze sim-1 for longer than D:
 *  - fencing storage: served again on sim-2 (StorageFencing=True); after the resume no
 *    record of the old server lands after the replacement's first (checked in the
 *    volume's records file), the old server crashed on EIO, and the storage's own log
 *    shows sim-1's access revoked before the volume was granted to sim-2;
 *  - no-attach storage, with the default LEASEHOLD_NONFENCING_STORAGE=require-node-down:
 *    WAITS (StorageFencing=False/AwaitingNodeDown, an event, no replacement pod, the
 *    lease not marked, nothing serving) until the test puts the out-of-service taint on
 *    sim-1; then it fails over (NodeDown). sim-1 was only frozen, not powered off, so on
 *    resume the old server's records DO land after the replacement's first: the taint
 *    is trusted as the operator's word that the machine is off, and here it was not
 *    (what lease-only would do at once, without the taint: storage-fencing.ts).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseRecords } from '../../dev/share-server/record-file.ts';
import { SHARE_SERVER_IMAGE } from '../../dev/sim/sim.ts';
import { accessOrderViolations, revokeBeforeGrantElsewhere } from '../../dev/sim/storage/access-log.ts';
import { handoffOrderViolations } from '../../dev/sim/storage/csi-attacher.ts';
import { createTestVolume, type TestStorageKind } from '../../dev/sim/storage/test-volume.ts';
import {
  pvName,
  SERVER_PORT,
  type Serving,
  shareStatus,
  unpinShare,
  waitServing,
} from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE } from '../../dev/system/system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { OUT_OF_SERVICE_TAINT } from '../../manager/failover/storage-fencing.ts';
import { eventually } from '../support/cluster.ts';
import { faultAndWaitForReplacement, useSystem } from './e2e-support.ts';

const FENCED = 'sf-fenced';
const OPEN = 'sf-open';
const LOST = 'sim-1';
const system = useSystem({ nodes: 2, cluster: { attachDetachReconcileSyncPeriod: '2s' } });

async function createShareOn(share: string, storage: TestStorageKind): Promise<void> {
  const sys = system();
  const claimName = `${share}-data`;
  await createTestVolume(sys.kc, { pvName: pvName(share), namespace: SHARES_NAMESPACE, claimName, storage });
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  await custom.createNamespacedCustomObject(
    {
      group: 'leasehold.dev',
      version: 'v1alpha1',
      plural: 'sharemanagers',
      namespace: SHARES_NAMESPACE,
      body: {
        apiVersion: 'leasehold.dev/v1alpha1',
        kind: 'ShareManager',
        metadata: { name: share, namespace: SHARES_NAMESPACE },
        spec: {
          volume: { pvc: claimName, mountPath: '/export' },
          server: {
            image: `${SHARE_SERVER_IMAGE}:dev`,
            args: ['--dir=/export', '--sigterm-delay=3s', '--interval=20ms'],
            ports: [{ name: 'http', containerPort: SERVER_PORT, protocol: 'TCP' }],
          },
          serviceAccountName: 'leasehold-agent',
          scheduling: { nodeSelector: { 'kubernetes.io/hostname': LOST } },
        },
      },
    },
    withDeadline(10_000),
  );
}

/** Records of the old writer that come after the replacement's first one, in file order. */
function oldRecordsAfterNewFirst(share: string, oldPod: string, newPod: string): { seq: number }[] {
  const dir = system().sim.volumeDir(pvName(share));
  const records = parseRecords(readFileSync(join(dir, 'records.jsonl'), 'utf8'));
  const firstNew = records.findIndex((r) => r.writer === newPod);
  assert.ok(firstNew >= 0, `${share}: the replacement ${newPod} wrote a record`);
  return records.slice(firstNew + 1).filter((r) => r.writer === oldPod);
}

/** The container logs under the sim root that mention `text`, with the pod uid dir. */
function logsMentioning(text: string): string[] {
  const pods = join(system().sim.root, 'pods');
  const out: string[] = [];
  for (const uid of readdirSync(pods)) {
    const logs = join(pods, uid, 'logs');
    let files: string[] = [];
    try {
      files = readdirSync(logs);
    } catch {
      continue;
    }
    for (const f of files) if (readFileSync(join(logs, f), 'utf8').includes(text)) out.push(`${uid}/${f}`);
  }
  return out;
}

test('two stubborn shares on sim-1: one on fencing storage, one on no-attach storage', {
  timeout: 150_000,
}, async () => {
  await createShareOn(FENCED, 'fencing');
  await createShareOn(OPEN, 'no-attach');
  for (const share of [FENCED, OPEN]) {
    const serving = await waitServing(system(), share, 120_000);
    assert.equal(serving.node, LOST);
    await unpinShare(system(), share);
  }
  const views = system().sim.attacher.fencing?.log ?? [];
  assert.deepEqual(
    views.map((e) => [e.op, e.pv, e.node]),
    [['grant', pvName(FENCED), LOST]],
    'only the fencing volume has a view, granted to sim-1',
  );
  await sleep(1_000);
});

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

async function storageFencingCondition(share: string): Promise<Condition | undefined> {
  const status = (await shareStatus(system(), share)) as { conditions?: Condition[] };
  return status.conditions?.find((c) => c.type === 'StorageFencing');
}

/** The share's pods (any phase) other than `pod`. */
async function otherPods(share: string, pod: string): Promise<string[]> {
  const list = await system().core.listNamespacedPod(
    { namespace: SHARES_NAMESPACE, labelSelector: `leasehold.dev/share-manager=${share}` },
    withDeadline(5_000),
  );
  return list.items.map((p) => p.metadata?.name ?? '').filter((name) => name !== pod);
}

/** As an operator who powered the node off would (kubectl taint ... :NoExecute). */
async function taintOutOfService(node: string): Promise<void> {
  const core = system().core;
  const current = await core.readNode({ name: node }, withDeadline(5_000));
  const taint = { key: OUT_OF_SERVICE_TAINT, value: 'nodeshutdown', effect: 'NoExecute' };
  const body = current.spec?.taints
    ? [{ op: 'add', path: '/spec/taints/-', value: taint }]
    : [{ op: 'add', path: '/spec/taints', value: [taint] }];
  await core.patchNode(
    { name: node, body },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch, withDeadline(5_000)),
  );
}

test('freeze sim-1 longer than D: the fencing share fails over, the no-attach share waits for node-down evidence, the taint lets it go; resume', {
  timeout: 240_000,
}, async () => {
  const sys = system();
  const started = monotonicMs();
  const openBefore = await waitServing(sys, OPEN, 10_000);
  const r = await faultAndWaitForReplacement(
    sys,
    FENCED,
    async (node) => sys.sim.node(node).freeze(),
    90_000,
    'frozen',
  );
  process.stderr.write(
    `storage-fencing: ${FENCED} served again ${r.toServingS.toFixed(2)} s after the freeze\n`,
  );
  assert.notEqual(r.after.node, LOST);
  const fenced = await storageFencingCondition(FENCED);
  assert.deepEqual(
    [fenced?.status, fenced?.reason],
    ['True', 'StorageFences'],
    'the fencing storage (CSIDriver attachRequired true) was judged to fence',
  );

  // No-attach storage, default LEASEHOLD_NONFENCING_STORAGE=require-node-down: its lease
  // went stale with FENCED's (D after the freeze), and it WAITS, serving nowhere.
  const waiting = await eventually(
    `${OPEN} says StorageFencing=False/AwaitingNodeDown`,
    async () => {
      const c = await storageFencingCondition(OPEN);
      return c?.reason === 'AwaitingNodeDown' ? c : undefined;
    },
    30_000,
    200,
  );
  assert.equal(waiting.status, 'False');
  assert.match(waiting.message ?? '', /attachRequired: false/);
  assert.match(waiting.message ?? '', /node\.kubernetes\.io\/out-of-service.*or delete its Node object/);
  // It keeps waiting: 3 s more is twice what FENCED took from its verdict to its
  // replacement pod, and the Node's status changes (NotReady, taints) make the managers
  // look again meanwhile.
  const leases = sys.kc.makeApiClient(k8s.CoordinationV1Api);
  const holdUntil = monotonicMs() + 3_000;
  do {
    assert.deepEqual(await otherPods(OPEN, openBefore.pod), [], `${OPEN}: no replacement pod while it waits`);
    const lease = await leases.readNamespacedLease(
      { namespace: SHARES_NAMESPACE, name: OPEN },
      withDeadline(5_000),
    );
    assert.equal(
      lease.metadata?.annotations?.['leasehold.dev/delinquent'],
      undefined,
      'its lease is not marked',
    );
    await sleep(300);
  } while (monotonicMs() < holdUntil);
  assert.deepEqual(
    sys.sim.servingWindows(pvName(OPEN)).filter((w) => w.id !== openBefore.pod),
    [],
    `${OPEN}: nothing but the frozen old server ever served it`,
  );
  const events = await sys.core.listNamespacedEvent(
    { namespace: SHARES_NAMESPACE, fieldSelector: `involvedObject.name=${OPEN},reason=AwaitingNodeDown` },
    withDeadline(5_000),
  );
  assert.ok(events.items.length > 0, `a Warning event AwaitingNodeDown on ${OPEN}`);
  const freezeToTaintS = (monotonicMs() - started) / 1000;

  // The operator's word that sim-1 is down: the out-of-service taint. The manager reads
  // it on the Node event and fails over.
  const taintedAt = monotonicMs();
  await taintOutOfService(LOST);
  const openAfter: Serving = await waitServing(sys, OPEN, 60_000, openBefore.pod);
  assert.notEqual(openAfter.node, LOST);
  process.stderr.write(
    `storage-fencing: ${OPEN} waited ${freezeToTaintS.toFixed(1)} s after the freeze with no replacement; served again ${((monotonicMs() - taintedAt) / 1000).toFixed(2)} s after the taint\n`,
  );
  const after = await storageFencingCondition(OPEN);
  assert.deepEqual([after?.status, after?.reason], ['False', 'NodeDown']);

  await sleep(500); // the replacements write
  sys.sim.node(LOST).heal();
  const healedAt = monotonicMs();
  // The old servers resume; what ends them (EIO, the agent's fence, the healed kubelet
  // killing the deleted pods) is what this checks. Wait for both to have exited.
  const oldExit = (pod: string) =>
    sys.sim.exits.find((e) => e.pod === pod && e.image.startsWith(SHARE_SERVER_IMAGE));
  await eventually(
    'both old servers exited after the resume',
    async () => (oldExit(r.before.pod) && oldExit(openBefore.pod) ? true : undefined),
    20_000,
    100,
  );

  // Fencing storage: nothing of the old server after the replacement's first record.
  assert.deepEqual(
    oldRecordsAfterNewFirst(FENCED, r.before.pod, r.after.pod),
    [],
    `${FENCED}: no record of ${r.before.pod} after ${r.after.pod}'s first`,
  );
  const fencedExit = oldExit(r.before.pod);
  assert.ok(
    fencedExit,
    `the old server ${r.before.pod} exited: ${JSON.stringify(sys.sim.exits.filter((e) => e.node === LOST))}`,
  );
  assert.ok(fencedExit.monoMs >= healedAt, 'it ended after the resume (it was frozen before)');
  // 1: the uncaught EIO of its append; a SIGTERM stop exits 0, the kubelet's kill shows a signal.
  assert.equal(
    fencedExit.code,
    1,
    `the old server crashed on its first write: ${JSON.stringify(fencedExit)}`,
  );
  const eio = logsMentioning('EIO');
  assert.ok(
    eio.length > 0,
    `the old server's log shows the EIO it got (exit ${fencedExit.code ?? fencedExit.signal})`,
  );
  process.stderr.write(
    `storage-fencing: old server exit ${JSON.stringify(fencedExit)}; EIO in ${eio.join(', ')}\n`,
  );

  // The storage's own log: sim-1 revoked before the volume was granted elsewhere.
  const log = sys.sim.attacher.fencing?.log ?? [];
  assert.deepEqual(accessOrderViolations(log), []);
  const pair = revokeBeforeGrantElsewhere(log, pvName(FENCED), LOST);
  assert.ok(pair, `revoke on ${LOST} before a grant elsewhere: ${JSON.stringify(log)}`);
  assert.equal(pair.grant.node, r.after.node);
  process.stderr.write(
    `storage-fencing: revoke on ${LOST} -> grant on ${pair.grant.node}: ${(pair.grant.monoMs - pair.revoke.monoMs).toFixed(0)} ms\n`,
  );
  assert.deepEqual(handoffOrderViolations(sys.sim.attacher.events), []);

  // No-attach storage after the taint: the taint is trusted as "this machine is off", and
  // here it was a lie: sim-1 was only frozen. On resume its old server wrote after the
  // replacement's first record (until the healed kubelet killed the deleted pod): two
  // writers, which nothing but a real power-off (or storage that fences) prevents. This
  // is the documented trust in the taint (docs/operations.md), and it shows that the
  // check above does catch an old writer.
  const late = oldRecordsAfterNewFirst(OPEN, openBefore.pod, openAfter.pod);
  process.stderr.write(
    `storage-fencing: no-attach, tainted while only frozen: ${late.length} records of the old server after the replacement's first (seq ${late.map((x) => x.seq).join(',')})\n`,
  );
  assert.ok(late.length > 0, `${OPEN}: a frozen (not powered-off) node wrote on resume despite the taint`);
  assert.equal(
    log.some((e) => e.pv === pvName(OPEN)),
    false,
    'the no-attach volume never had a view',
  );
  process.stderr.write(`storage-fencing: scenario took ${((monotonicMs() - started) / 1000).toFixed(1)} s\n`);
});
