/**
 * Storage that fences (issue 11), on the simulator's fencing storage
 * (dev/sim/storage/: each node reaches the volume through its own revocable FUSE
 * view, revoked by the attacher's ControllerUnpublish before the finalizer goes), next to
 * storage without an attach step (CSIDriver attachRequired: false), which cannot fence.
 * Two shares on sim-1, both servers stubborn (they keep appending 3 s after the agent's
 * SIGTERM, so whatever stops the old server on resume is the storage, not the fence) and
 * quick (a record every 20 ms: the healed kubelet kills the force-deleted old pod some
 * 100-200 ms after the resume, and the old server must get its writes in before that):
 *  - freeze sim-1 for longer than D, both shares are served again on sim-2, then heal:
 *  - fencing storage: no record of the old server lands after the replacement's first
 *    (checked in the volume's records file), the old server crashed on EIO, and the
 *    storage's own log shows sim-1's access revoked before the volume was granted to sim-2;
 *  - no-attach storage: the old server's records DO land after the replacement's first
 *    (two writers on the volume): the documented hazard of storage that cannot fence.
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
import { pvName, SERVER_PORT, type Serving, unpinShare, waitServing } from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE } from '../../dev/system/system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
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

test('freeze sim-1 longer than D, resume: the fencing storage stops the old writer, no-attach storage does not', {
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
  const openAfter: Serving = await waitServing(sys, OPEN, 90_000, openBefore.pod);
  process.stderr.write(
    `storage-fencing: ${FENCED} served again ${r.toServingS.toFixed(2)} s after the freeze\n`,
  );
  assert.notEqual(r.after.node, LOST);
  assert.notEqual(openAfter.node, LOST);
  await sleep(1_500); // the replacements write
  sys.sim.node(LOST).heal();
  const healedAt = monotonicMs();
  // The old servers resume: the stubborn ones append for 3 s after the agent's SIGTERM.
  await sleep(6_000);

  // Fencing storage: nothing of the old server after the replacement's first record.
  assert.deepEqual(
    oldRecordsAfterNewFirst(FENCED, r.before.pod, r.after.pod),
    [],
    `${FENCED}: no record of ${r.before.pod} after ${r.after.pod}'s first`,
  );
  const oldExit = sys.sim.exits.find((e) => e.pod === r.before.pod && e.image.startsWith(SHARE_SERVER_IMAGE));
  assert.ok(
    oldExit,
    `the old server ${r.before.pod} exited: ${JSON.stringify(sys.sim.exits.filter((e) => e.node === LOST))}`,
  );
  assert.ok(oldExit.monoMs >= healedAt, 'it ended after the resume (it was frozen before)');
  // 1: the uncaught EIO of its append; a SIGTERM stop exits 0, the kubelet's kill shows a signal.
  assert.equal(oldExit.code, 1, `the old server crashed on its first write: ${JSON.stringify(oldExit)}`);
  const eio = logsMentioning('EIO');
  assert.ok(
    eio.length > 0,
    `the old server's log shows the EIO it got (exit ${oldExit.code ?? oldExit.signal})`,
  );
  process.stderr.write(
    `storage-fencing: old server exit ${JSON.stringify(oldExit)}; EIO in ${eio.join(', ')}\n`,
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

  // No-attach storage: the old writer's records land after the replacement's first.
  const late = oldRecordsAfterNewFirst(OPEN, openBefore.pod, openAfter.pod);
  process.stderr.write(
    `storage-fencing: no-attach: ${late.length} records of the old server after the replacement's first (seq ${late.map((x) => x.seq).join(',')})\n`,
  );
  assert.ok(late.length > 0, `${OPEN}: storage that cannot fence lets the resumed old server write`);
  assert.equal(
    log.some((e) => e.pv === pvName(OPEN)),
    false,
    'the no-attach volume never had a view',
  );
  process.stderr.write(`storage-fencing: scenario took ${((monotonicMs() - started) / 1000).toFixed(1)} s\n`);
});
