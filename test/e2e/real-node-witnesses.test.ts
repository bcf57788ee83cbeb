/**
 * Witness promises on real nodes (docs/design.md, "Serving through an API outage"): three
 * real nodes, the chart installed with `manager.witnesses.nodes` naming all three (each
 * node's manager at its InternalIP, the HTTP port published on the node), one share of the
 * shipped NFS server, written by the Linux kernel NFS client (6.12, on another node) and
 * the libnfs writer (NFSv3 through the Service).
 *
 * - The API server down 12 s (three times T; LEASEHOLD_WITNESS_OUTAGES=12,60,300 adds the
 *   issue's 60 s and 5 min, one after another): the share serves throughout. The same pod,
 *   one ganesha process all along (never stopped), no failover, no LeaseExpired, the lease
 *   never delinquent, its agent said it served on promises and the ShareManager says so
 *   afterwards (condition and event ServedOnPromises); the kernel client's writes
 *   never paused longer than 2 s, nor the libnfs writer's; every acknowledged write of both
 *   on the volume. Without witnesses the same outage stops every share (its agent fences
 *   at T): real-node-disruptions.test.ts.
 * - The share's node cut off from the API server alone (RealNode.partition('close'): the
 *   node fabric carries on, so its agent reaches the other witnesses): they reach the API
 *   and refuse (a CutOffFromApi event), the agent fences at T, and the share fails over to
 *   another node as without witnesses; never two ganesha; nothing lost; the kernel
 *   client's writes, reads and creates resume. Its lock is printed, not asserted: a client
 *   whose reconnect comes after the replacement's grace period loses it (seen once in CI:
 *   first reconnect at +42 s, grace 15 s; docs/operations.md).
 * Not here: the cost at 1,000 shares (issue 28).
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import { createRealNfsShare, GaneshaTracker, podLog } from '../../dev/system/real-share.ts';
import type { RealSystem } from '../../dev/system/real-system.ts';
import { shareStatus } from '../../dev/system/shares.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { eventually } from '../support/cluster.ts';
import {
  E2E_NFS,
  eventsOf,
  failedOver,
  leaseOf,
  RealNfsClient,
  servingRealPod,
  useRealSystem,
} from './e2e-support.ts';
import { RealKernelClient } from './kernel-client-support.ts';

const system = useRealSystem({
  nodes: 3,
  cluster: { attachDetachReconcileSyncPeriod: '2s' },
  values: { 'manager.witnesses.nodes': '{real-1,real-2,real-3}' },
});

const SHARE = 'witnessed';
/**
 * The outages, in seconds, one after another: 12 by default; LEASEHOLD_WITNESS_OUTAGES=12,60,300
 * runs the three (about 7 minutes more; docs/testing.md).
 */
const OUTAGES_S = (process.env.LEASEHOLD_WITNESS_OUTAGES ?? '12').split(',').map((x) => Number(x.trim()));
assert.ok(
  OUTAGES_S.length > 0 && OUTAGES_S.every((x) => Number.isFinite(x) && x > 0),
  `LEASEHOLD_WITNESS_OUTAGES=${process.env.LEASEHOLD_WITNESS_OUTAGES}: seconds, comma-separated`,
);
/** The chart's default lease duration D: the managers wait D of healthy watch after an outage. */
const D_MS = 6_000;
const DELINQUENT = 'leasehold.dev/delinquent';

let ganesha: GaneshaTracker | undefined;
after(async () => ganesha?.stop());

const serving = (sys: RealSystem, notPod?: string) =>
  servingRealPod(sys, SHARE, {
    ...(notPod === undefined ? {} : { notPod }),
    running: (pod) => (ganesha?.windows() ?? []).some((w) => w.id === pod && w.stopMonoMs === undefined),
  });

/** The longest pause (ms) between the kernel writer's acknowledged writes after `sinceMonoMs`. */
function longestAckPause(kernel: RealKernelClient, sinceMonoMs: number, untilMonoMs: number): number {
  const acks = kernel.acksMs().filter((ms) => ms > sinceMonoMs && ms <= untilMonoMs);
  let longest = acks.length > 0 ? (acks[0] as number) - sinceMonoMs : untilMonoMs - sinceMonoMs;
  for (let i = 1; i < acks.length; i++)
    longest = Math.max(longest, (acks[i] as number) - (acks[i - 1] as number));
  return longest;
}

test(`the API server down ${OUTAGES_S.join(' s, ')} s with witnesses: the share serves throughout, same pod and ganesha, no failover; the kernel client and libnfs never pause over 2 s, nothing lost`, {
  timeout: 240_000 + OUTAGES_S.reduce((a, b) => a + b, 0) * 1_000,
}, async (t) => {
  const sys = system();
  await createRealNfsShare(sys, SHARE, { nfs: E2E_NFS });
  ganesha = new GaneshaTracker(sys, SHARE);
  const before = await serving(sys);
  const clientNode = sys.nodes.find((n) => n.name !== before.node)?.name as string;
  const kernel = await RealKernelClient.start(sys, SHARE, clientNode, { name: 'kc-wit', index: 1 });
  t.after(() => kernel.stop());
  const libnfs = await RealNfsClient.start(sys, SHARE, clientNode, { file: 'witness-outage.bin' });
  t.after(() => libnfs.stop());
  await libnfs.waitResumed(30_000, monotonicMs() - 60_000);

  const faults: Array<{ faultMono: number; backMono: number; outageS: number }> = [];
  for (const outageS of OUTAGES_S) {
    const faultMono = kernel.markFault();
    libnfs.markFaultAt(faultMono);
    const downAt = performance.now();
    await sys.cluster.stopApiServer();
    await sleep(Math.max(0, outageS * 1_000 - (performance.now() - downAt)));
    await sys.cluster.startApiServer();
    faults.push({ faultMono, backMono: monotonicMs(), outageS });
    process.stderr.write(
      `witness outage (real nodes): ${outageS} s: the API server back ${((performance.now() - downAt) / 1000).toFixed(1)} s after its stop began\n`,
    );
    await sleep(D_MS + 2_000); // past D of the managers' healthy watch: any verdict would have come
  }

  const now = await serving(sys);
  assert.equal(now.pod, before.pod, 'the same pod serves');
  const windows = (ganesha.windows() ?? []).filter((w) => w.id === before.pod);
  assert.equal(windows.length, 1, `one ganesha process all along: ${JSON.stringify(windows)}`);
  assert.equal(windows[0]?.stopMonoMs, undefined, 'never stopped');
  assert.equal((await failedOver(sys)).size, 0, 'no failover');
  assert.deepEqual(await eventsOf(sys, 'LeaseExpired'), []);
  const lease = await leaseOf(sys, SHARE);
  assert.equal(lease.spec?.holderIdentity, before.pod);
  assert.equal(lease.metadata?.annotations?.[DELINQUENT], undefined);
  const agentLog = podLog(sys.node(before.node), before.object, 'agent');
  assert.match(agentLog, /serving on the promises of a majority of witnesses/);
  assert.match(agentLog, /lease renewed through the API again after serving on witness promises/);
  // Said afterwards on the ShareManager (nobody can write while the API is away).
  const condition = await eventually(
    'the ServedOnPromises condition',
    async () => (await shareStatus(sys, SHARE)).conditions?.find((c) => c.type === 'ServedOnPromises'),
    20_000,
  );
  assert.match(condition.message ?? '', new RegExp(`holder ${before.pod} served on witness promises from `));
  assert.ok((await eventsOf(sys, 'ServedOnPromises')).length >= 1, 'a ServedOnPromises event');

  for (const { faultMono, backMono, outageS } of faults) {
    const pauseMs = longestAckPause(kernel, faultMono, backMono + 2_000);
    process.stderr.write(
      `witness outage (real nodes): ${outageS} s: ${kernel.label}: longest pause between acknowledged writes ${(pauseMs / 1000).toFixed(2)} s\n`,
    );
    assert.ok(pauseMs < 2_000, `${outageS} s outage: the kernel client paused ${pauseMs} ms`);
  }
  kernel.assertClientView('witness outage', (faults[0] as { faultMono: number }).faultMono);
  const gaps = libnfs.assertClientView('witness outage');
  assert.ok(
    gaps.every((g) => g < 2),
    `the libnfs writer paused ${gaps.join(', ')} s`,
  );
});

test("the share's node cut off from the API alone: the witnesses refuse, its agent fences, the share fails over; never two ganesha, nothing lost", {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  const before = await serving(sys);
  const clientNode = sys.nodes.find((n) => n.name !== before.node)?.name as string;
  const kernel = await RealKernelClient.start(sys, SHARE, clientNode, { name: 'kc-cut', index: 2 });
  t.after(() => kernel.stop());
  kernel.markFault();
  await sys.node(before.node).partition('close');
  t.after(() => sys.node(before.node).heal());
  const moved = await serving(sys, before.pod);
  assert.notEqual(moved.node, before.node, 'served elsewhere');
  const servedMono = monotonicMs() - (Date.now() - moved.servingWall);
  const record = (await failedOver(sys)).get(SHARE);
  assert.equal(record?.lastFailover?.lostPod, before.pod);
  const overlaps = overlappingWindows(ganesha?.windows() ?? [], monotonicMs());
  assert.deepEqual(
    overlaps.map(([a, b]) => `${a.id} x ${b.id}`),
    [],
    'never two ganesha',
  );
  // The lock is printed, not asserted: in a CI run the client logged `not responding` from
  // +9 s to +40 s and reached the replacement at +42 s, after its 15 s grace period, so its
  // reclaim was refused (`lost 1 locks`, then EIO on the locked fd). Why it came back so
  // late was not established (docs/operations.md, spec.nfs.gracePeriod).
  await kernel.waitResumed(120_000, servedMono, ['write', 'read', 'create']);
  kernel.assertClientView('witnesses, node cut off', servedMono, { requireResumed: false });
  const lock = kernel.lockAfter(servedMono);
  t.diagnostic(`node cut off: the lock holder's fd ${lock}`);
  await sys.node(before.node).heal();
  const agentLog = podLog(sys.node(before.node), before.object, 'agent');
  assert.match(agentLog, /witness refused a promise.*api-reachable|api-reachable.*witness refused a promise/);
  const cutOff = await eventsOf(sys, 'CutOffFromApi');
  assert.ok(
    cutOff.some((e) => e.includes(`holder ${before.pod} asked witness`)),
    `a CutOffFromApi event names the holder: ${cutOff.join('; ')}`,
  );
});
