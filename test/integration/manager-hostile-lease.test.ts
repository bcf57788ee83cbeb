/**
 * No Lease content can crash, spin or mislead the manager, on the real API server. Each
 * test edits a live share-manager Lease the way a person or a buggy tool could (the API
 * accepts every edit made here) and checks what the manager does:
 *  - leaseDurationSeconds = 2^31 - 1: no spin (the manager's CPU over 8 s, from
 *    /proc/<pid>/stat, against a baseline window of the same run) and no verdict;
 *  - leaseDurationSeconds = 1 on a ShareManager with a 6 s lease: no verdict before 6 s
 *    after the holder's last renewal;
 *  - holderIdentity and holder-node garbage: judged as held, failed over, no pod deleted
 *    by that name, the manager alive;
 *  - holderIdentity naming another share's healthy pod: failed over, that pod not deleted
 *    (the delete step says `foreign`: its share label and controller reference differ);
 *  - a stale verdict that came before its ShareManager was cached: judged again once it is;
 *  - delinquent garbage with no failover-by: taken over at once, not after 30 s;
 *  - the share-manager label removed: said once, and put back by the reconciler (a Lease
 *    nobody watches would never be judged), so it is judged again.
 * Every odd value is logged exactly once, naming the lease, the field and the value.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import {
  createNamespace,
  createShareManager,
  FAST_LEASE,
  FAST_LEASE_D_MS,
  getShareManager,
  HolderLoop,
  type ManagerProcess,
  podsOf,
  readLease,
  runningShare,
  runPodOn,
  startManager,
  useManagerFixture,
  waitForPods,
} from './manager-harness.ts';

const cluster = useCluster({ scheduler: false });
const holders: HolderLoop[] = [];
const NS = 'hostile';
const NODE = 'node-h';
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** CPU seconds (user + system) the process has used so far. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After "pid (comm) ": state is field 3, utime 14, stime 15 (1-based) -> 11 and 12 here.
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/** Share of one core the process used over `ms`. */
async function cpuShare(pid: number, ms: number): Promise<number> {
  const before = cpuSeconds(pid);
  const start = performance.now();
  await sleep(ms);
  return (cpuSeconds(pid) - before) / ((performance.now() - start) / 1000);
}

async function patchLease(kc: k8s.KubeConfig, name: string, body: object): Promise<void> {
  await kc
    .makeApiClient(k8s.CoordinationV1Api)
    .patchNamespacedLease(
      { namespace: NS, name, body },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
}

async function oddLines(manager: ManagerProcess, lease: string, field: string) {
  return (await manager.lines()).filter((l) => l.lease === `${NS}/${lease}` && l.field === field);
}

async function verdictLines(manager: ManagerProcess, lease: string) {
  return (await manager.lines()).filter(
    (l) => l.lease === `${NS}/${lease}` && l.msg === 'lease stale by our observation',
  );
}

describe('hostile Lease contents', () => {
  useManagerFixture(cluster, [NODE], holders);
  let manager: ManagerProcess;

  before(async () => {
    await createNamespace(cluster().kubeConfig, NS);
    manager = startManager(cluster(), 'h1', { LEASEHOLD_WATCH_NAMESPACE: NS });
    await eventually('the manager started', async () =>
      (await manager.lines()).some((l) => l.msg === 'manager started') ? true : undefined,
    );
  });

  it('a huge leaseDurationSeconds: no spin, no verdict, one log line', async (t) => {
    const kc = cluster().kubeConfig;
    const { holder } = await runningShare(
      kc,
      { namespace: NS, name: 'vol-huge', node: NODE, lease: FAST_LEASE },
      holders,
    );
    const pid = manager.child.pid as number;
    await sleep(2000);
    const baseline = await cpuShare(pid, 8000);
    await patchLease(kc, 'vol-huge', { spec: { leaseDurationSeconds: 2 ** 31 - 1 } });
    await eventually('the odd duration seen', async () =>
      (await oddLines(manager, 'vol-huge', 'spec.leaseDurationSeconds')).length > 0 ? true : undefined,
    );
    const renewalsBefore = holder.renewals;
    const after = await cpuShare(pid, 8000);
    t.diagnostic(
      `manager CPU: baseline ${(baseline * 100).toFixed(2)} % of a core, after the edit ${(after * 100).toFixed(2)} %`,
    );
    assert.ok(after < 0.05, `the manager used ${(after * 100).toFixed(1)} % of a core after the edit`);
    assert.ok(
      after < baseline + 0.03,
      `after ${(after * 100).toFixed(1)} % vs baseline ${(baseline * 100).toFixed(1)} %`,
    );
    assert.ok(holder.renewals > renewalsBefore + 4, 'the holder kept renewing (with the edited duration)');
    assert.equal((await readLease(kc, NS, 'vol-huge')).durationSeconds, 2 ** 31 - 1);
    // The holder stops: the longer duration written in the Lease is honoured, so no verdict.
    await holder.stop();
    await sleep(FAST_LEASE_D_MS * 2 + 1000);
    assert.deepEqual(await verdictLines(manager, 'vol-huge'), []);
    assert.equal((await readLease(kc, NS, 'vol-huge')).delinquentSince, undefined);
    const said = await oddLines(manager, 'vol-huge', 'spec.leaseDurationSeconds');
    assert.equal(said.length, 1, 'one line, not one per renewal');
    assert.equal(said[0]?.value, String(2 ** 31 - 1));
    assert.equal(manager.child.exitCode, null, 'the manager is alive');
  });

  it('leaseDurationSeconds edited to 1: no verdict before the ShareManager duration (6 s)', async (t) => {
    const kc = cluster().kubeConfig;
    const lease = { duration: '6s', renewInterval: '1s', renewDeadline: '4s', retryPeriod: '200ms' };
    await createShareManager(kc, { namespace: NS, name: 'vol-short', lease });
    const [pod] = await waitForPods(kc, NS, 'vol-short', 1);
    assert.ok(pod);
    await runPodOn(kc, pod, NODE);
    const holder = new HolderLoop(kc, NS, 'vol-short', pod.metadata?.name ?? '', NODE, 1000, 0, 6).start();
    holders.push(holder);
    await eventually('vol-short Running', async () =>
      (await getShareManager(kc, NS, 'vol-short')).status?.state === 'Running' ? true : undefined,
    );
    await patchLease(kc, 'vol-short', { spec: { leaseDurationSeconds: 1 } });
    const renewals = holder.renewals;
    await eventually('two renewals with the edited duration', async () =>
      holder.renewals >= renewals + 2 ? true : undefined,
    );
    assert.equal((await readLease(kc, NS, 'vol-short')).durationSeconds, 1);
    await holder.stop();
    const lastSent = holder.lastRenewalSentAt;
    const marked = await eventually(
      'vol-short marked delinquent',
      async () => (await readLease(kc, NS, 'vol-short')).delinquentSince,
      20_000,
    );
    const afterMs = Date.parse(marked) - lastSent;
    t.diagnostic(
      `verdict (mark) ${afterMs} ms after the holder sent its last renewal (Lease says 1 s, ShareManager 6 s)`,
    );
    assert.ok(afterMs >= 6000, `marked ${afterMs} ms after the last renewal was sent: before D = 6 s`);
    assert.ok(afterMs < 6000 + 5000, `marked ${afterMs} ms after: too late`);
    const said = await oddLines(manager, 'vol-short', 'spec.leaseDurationSeconds');
    assert.equal(said.length, 1);
    assert.match(String(said[0]?.msg), /shorter than the ShareManager's lease duration 6s/);
  });

  it('holderIdentity and holder-node garbage: judged as held, marked, no pod deleted by that name', async () => {
    const kc = cluster().kubeConfig;
    const { pod, holder } = await runningShare(
      kc,
      { namespace: NS, name: 'vol-odd', node: NODE, lease: FAST_LEASE },
      holders,
    );
    await patchLease(kc, 'vol-odd', {
      metadata: { annotations: { 'leasehold.dev/holder-node': 'Bad_Node!' } },
      spec: { holderIdentity: 'Not A Pod!' },
    });
    await holder.stop(); // it lost the lease anyway
    const marked = await eventually(
      'vol-odd marked delinquent by h1',
      async () => {
        const lease = await readLease(kc, NS, 'vol-odd');
        return lease.delinquentSince && lease.failoverBy === 'h1' ? lease : undefined;
      },
      15_000,
    );
    assert.equal(marked.holder, 'Not A Pod!');
    assert.equal(
      marked.wire.metadata?.annotations?.['leasehold.dev/holder-node'],
      'Bad_Node!',
      'the mark keeps fields it does not own as read',
    );
    await eventually('the delete step passed (nothing to delete)', async () =>
      (await manager.lines()).some(
        (l) => l.lease === `${NS}/vol-odd` && l.msg === 'lost pod force-deleted' && l.result === 'absent',
      )
        ? true
        : undefined,
    );
    const pods = await podsOf(kc, NS, 'vol-odd');
    assert.ok(
      pods.some((p) => p.metadata?.name === pod.metadata?.name && !p.metadata?.deletionTimestamp),
      'the share pod was not deleted for a holder that is no pod',
    );
    // A real agent acquires the delinquent lease: the failover completes.
    const next = new HolderLoop(kc, NS, 'vol-odd', pod.metadata?.name ?? '', NODE, 1000).start();
    holders.push(next);
    await eventually('vol-odd Running again', async () =>
      (await getShareManager(kc, NS, 'vol-odd')).status?.state === 'Running' &&
      (await readLease(kc, NS, 'vol-odd')).holder === pod.metadata?.name
        ? true
        : undefined,
    );
    assert.equal((await oddLines(manager, 'vol-odd', 'spec.holderIdentity')).length, 1);
    assert.equal(
      (await oddLines(manager, 'vol-odd', 'metadata.annotations[leasehold.dev/holder-node]')).length,
      1,
    );
    assert.equal(manager.child.exitCode, null, 'the manager is alive');
  });

  it("holderIdentity naming another share's healthy pod: failed over, that pod never deleted", async () => {
    const kc = cluster().kubeConfig;
    const victim = await runningShare(
      kc,
      { namespace: NS, name: 'vol-victim', node: NODE, lease: FAST_LEASE },
      holders,
    );
    const edited = await runningShare(
      kc,
      { namespace: NS, name: 'vol-named', node: NODE, lease: FAST_LEASE },
      holders,
    );
    const victimPod = victim.pod.metadata?.name ?? '';
    // Any writer of the Lease can name any pod; this one names the other share's.
    await patchLease(kc, 'vol-named', { spec: { holderIdentity: victimPod } });
    await edited.holder.stop(); // it lost the lease anyway
    await eventually(
      "vol-named's delete step refused the other share's pod",
      async () =>
        (await manager.lines()).some(
          (l) => l.lease === `${NS}/vol-named` && l.pod === victimPod && l.result === 'foreign',
        )
          ? true
          : undefined,
      20_000,
    );
    // vol-named's own pod is live, so it is the replacement (no second pod); its agent
    // takes the delinquent lease and the failover completes.
    const ownPod = edited.pod.metadata?.name ?? '';
    const next = new HolderLoop(kc, NS, 'vol-named', ownPod, NODE, 1000).start();
    holders.push(next);
    await eventually(
      'vol-named held by its own pod again',
      async () => ((await readLease(kc, NS, 'vol-named')).holder === ownPod ? true : undefined),
      15_000,
    );
    const victimPods = await podsOf(kc, NS, 'vol-victim');
    assert.ok(
      victimPods.some((p) => p.metadata?.name === victimPod && !p.metadata?.deletionTimestamp),
      `${victimPod} (vol-victim's, healthy) was not deleted by vol-named's failover`,
    );
    assert.equal(
      (await readLease(kc, NS, 'vol-victim')).holder,
      victimPod,
      'vol-victim still held by its pod',
    );
    assert.equal(manager.child.exitCode, null, 'the manager is alive');
  });

  it('a stale verdict before its ShareManager is in the cache: judged again as soon as it is', async () => {
    const kc = cluster().kubeConfig;
    // A Lease whose ShareManager does not exist yet (its watch may lag the Lease's).
    const ghost = new HolderLoop(kc, NS, 'vol-late', 'vol-late-ghost', NODE, 1000).start();
    holders.push(ghost);
    await eventually('the lease renewed twice', async () => (ghost.renewals >= 2 ? true : undefined));
    await ghost.stop();
    await eventually(
      'the first verdict (no ShareManager: nothing done)',
      async () => ((await verdictLines(manager, 'vol-late')).length > 0 ? true : undefined),
      FAST_LEASE_D_MS * 3,
    );
    assert.equal((await readLease(kc, NS, 'vol-late')).delinquentSince, undefined, 'not marked without it');
    const createdAt = Date.now();
    await createShareManager(kc, { namespace: NS, name: 'vol-late', lease: FAST_LEASE });
    // Judged again (the verdict is logged once per renewal, so the mark shows it).
    const marked = await eventually(
      'vol-late marked delinquent',
      async () => (await readLease(kc, NS, 'vol-late')).delinquentSince,
      10_000,
    );
    assert.ok(
      Date.parse(marked) - createdAt < 10_000,
      `marked ${Date.parse(marked) - createdAt} ms after the ShareManager was created`,
    );
  });

  it('delinquent garbage with no failover-by: taken over at once (not after the 30 s takeover timeout)', async () => {
    const kc = cluster().kubeConfig;
    const { pod } = await runningShare(
      kc,
      { namespace: NS, name: 'vol-orphan', node: NODE, lease: FAST_LEASE },
      holders,
    );
    const editedAt = Date.now();
    await patchLease(kc, 'vol-orphan', {
      metadata: { annotations: { 'leasehold.dev/delinquent': 'yes', 'leasehold.dev/failover-by': null } },
    });
    await eventually(
      'the failover taken over by h1',
      async () => ((await readLease(kc, NS, 'vol-orphan')).failoverBy === 'h1' ? true : undefined),
      15_000,
    );
    assert.ok(Date.now() - editedAt < 10_000, `taken over ${Date.now() - editedAt} ms after the edit`);
    await eventually(
      'a replacement of the orphaned pod',
      async () =>
        (await podsOf(kc, NS, 'vol-orphan')).some((p) => p.metadata?.name !== pod.metadata?.name)
          ? true
          : undefined,
      15_000,
    );
    assert.equal(
      (await oddLines(manager, 'vol-orphan', 'metadata.annotations[leasehold.dev/delinquent]')).length,
      1,
    );
    assert.equal(
      (await oddLines(manager, 'vol-orphan', 'metadata.annotations[leasehold.dev/failover-by]')).length,
      1,
    );
  });

  it('the share-manager label removed: said once, put back by the reconciler, so the lease is judged again', async () => {
    const kc = cluster().kubeConfig;
    const { holder } = await runningShare(
      kc,
      { namespace: NS, name: 'vol-nolabel', node: NODE, lease: FAST_LEASE },
      holders,
    );
    await patchLease(kc, 'vol-nolabel', { metadata: { labels: { 'leasehold.dev/share-manager': null } } });
    const field = 'metadata.labels[leasehold.dev/share-manager]';
    await eventually('the removed label said', async () =>
      (await oddLines(manager, 'vol-nolabel', field)).length > 0 ? true : undefined,
    );
    await eventually('the label restored', async () =>
      (await readLease(kc, NS, 'vol-nolabel')).wire.metadata?.labels?.['leasehold.dev/share-manager'] ===
      'vol-nolabel'
        ? true
        : undefined,
    );
    assert.equal((await oddLines(manager, 'vol-nolabel', field)).length, 1, 'said once');
    const restored = (await manager.lines()).filter((l) => l.lease === `${NS}/vol-nolabel` && l.label);
    assert.equal(restored.length, 1, 'the restoration said once');
    await holder.stop();
    await eventually(
      'judged again once labelled: stale after D',
      async () => ((await readLease(kc, NS, 'vol-nolabel')).delinquentSince ? true : undefined),
      15_000,
    );
  });
});
