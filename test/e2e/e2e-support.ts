/**
 * What the end-to-end scenarios share: one whole system per test file (control plane,
 * simulated nodes, the chart installed with helm: a manager on every node), started in
 * `before` and stopped in `after` (also when a test fails); and the checks every
 * scenario makes: the share's serving windows never overlap, every record written
 * before a fault is readable after it, how many failovers the managers ran.
 * LEASEHOLD_KEEP_CLUSTER=1 keeps the cluster dir and the sim root (logs) for reading.
 */

import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import { formatTimeline, gatherFacts, PodTracker, timelineOf } from '../../dev/system/failover-facts.ts';
import {
  fetchRecords,
  pvName,
  type Serving,
  type ShareStatus,
  shareStatus,
  waitServing,
} from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE, type System, type SystemOptions, startSystem } from '../../dev/system/system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { leftoverPodProcesses } from '../integration/sim-harness.ts';

export function useSystem(opts: SystemOptions): () => System {
  let sys: System | undefined;
  before(
    async () => {
      sys = await startSystem({ ...opts, keepDirs: process.env.LEASEHOLD_KEEP_CLUSTER === '1' });
    },
    { timeout: 300_000 },
  );
  after(async () => {
    if (process.env.LEASEHOLD_KEEP_CLUSTER === '1' && sys)
      process.stderr.write(`kept: cluster ${sys.cluster.dir}, sim ${sys.sim.root}\n`);
    await sys?.stop();
    const left = leftoverPodProcesses();
    if (left.length > 0) throw new Error(`the e2e system left pod processes behind: ${left.join(', ')}`);
  });
  return () => {
    if (!sys) throw new Error('the e2e system is not running (did its start fail? see the before hook)');
    return sys;
  };
}

/** Asserts that no two share servers of the share's volume ever served at the same time. */
export function assertNoOverlap(sys: System, share: string): void {
  const windows = sys.sim.servingWindows(pvName(share));
  const overlaps = overlappingWindows(windows, monotonicMs());
  assert.deepEqual(
    overlaps.map(
      ([a, b]) =>
        `${a.id}[${a.startWall}..${a.stopWall ?? 'open'}] x ${b.id}[${b.startWall}..${b.stopWall ?? 'open'}]`,
    ),
    [],
    `serving windows of ${share} overlap`,
  );
}

/** Every record 1..ackedSeq is readable from the server now serving (none lost, none out of order). */
export async function assertRecordsKept(serving: Serving, ackedSeq: number): Promise<void> {
  // NB: a server that just started may not have appended its first record yet: wait
  // (up to 5 s, its interval is 100 ms) for one, then check everything.
  let answer = await fetchRecords(serving.port);
  for (let i = 0; i < 50 && answer && answer.lastSeq <= ackedSeq; i++) {
    await sleep(100);
    answer = await fetchRecords(serving.port);
  }
  assert.ok(answer, `${serving.pod} answers GET /records`);
  const seqs = answer.records.map((r) => r.seq);
  const have = new Set(seqs);
  const lost = Array.from({ length: ackedSeq }, (_, i) => i + 1).filter((s) => !have.has(s));
  assert.deepEqual(
    lost,
    [],
    `records written before the fault but missing after it (acked up to ${ackedSeq})`,
  );
  assert.ok(
    answer.lastSeq > ackedSeq,
    `the new server appends after the old records (${answer.lastSeq} > ${ackedSeq})`,
  );
  assert.deepEqual(
    seqs,
    [...seqs].sort((a, b) => a - b),
    'records in sequence order',
  );
}

/** The last record sequence number the share's current server acknowledged over HTTP. */
export async function ackedSeq(serving: Serving): Promise<number> {
  const answer = await fetchRecords(serving.port, Number.MAX_SAFE_INTEGER - 1);
  assert.ok(answer, `${serving.pod} answers`);
  return answer.lastSeq;
}

/** ShareManagers that went through a failover (status.lastFailover set), by name. */
export async function failedOver(sys: System): Promise<Map<string, ShareStatus>> {
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  const list = (await custom.listNamespacedCustomObject(
    { group: 'leasehold.dev', version: 'v1alpha1', plural: 'sharemanagers', namespace: SHARES_NAMESPACE },
    withDeadline(10_000),
  )) as { items: Array<{ metadata: { name: string }; status?: ShareStatus }> };
  return new Map(
    list.items.filter((i) => i.status?.lastFailover).map((i) => [i.metadata.name, i.status as ShareStatus]),
  );
}

/** Events of a reason in the shares namespace (e.g. LeaseExpired), as "object: message". */
export async function eventsOf(sys: System, reason: string): Promise<string[]> {
  const list = await sys.core.listNamespacedEvent(
    { namespace: SHARES_NAMESPACE, fieldSelector: `reason=${reason}` },
    withDeadline(10_000),
  );
  return list.items.map((e) => `${e.involvedObject.name}: ${e.message ?? ''}`);
}

/** The Lease of a share (same name as its ShareManager). */
export async function leaseOf(sys: System, share: string): Promise<k8s.V1Lease> {
  const coord = sys.kc.makeApiClient(k8s.CoordinationV1Api);
  return coord.readNamespacedLease({ namespace: SHARES_NAMESPACE, name: share }, withDeadline(5_000));
}

export interface FaultResult {
  before: Serving;
  after: Serving;
  acked: number;
  /** Seconds from the fault to the replacement serving (its serving window start). */
  toServingS: number;
  status: ShareStatus;
  tracker: PodTracker;
}

/**
 * Runs `fault` against the node serving `share`, then waits until another pod serves
 * it; returns both servings and the time from the fault to the new serving window.
 */
export async function faultAndWaitForReplacement(
  sys: System,
  share: string,
  fault: (node: string) => Promise<void>,
  timeoutMs: number,
  faultName = 'crashed',
): Promise<FaultResult> {
  const before = await waitServing(sys, share, 60_000);
  const acked = await ackedSeq(before);
  const tracker = new PodTracker(sys, share);
  const faultAt = Date.now();
  await fault(before.node);
  let after: Serving;
  try {
    after = await waitServing(sys, share, timeoutMs, before.pod);
  } finally {
    await tracker.stop();
  }
  const window = sys.sim.servingWindows(pvName(share)).find((w) => w.id === after.pod);
  assert.ok(window, `a serving window of ${after.pod}`);
  const status = await shareStatus(sys, share);
  const facts = gatherFacts(sys, tracker, {
    share,
    fault: faultName,
    crashedNode: before.node,
    crashAt: new Date(faultAt),
    oldPod: before.pod,
    newPod: after.pod,
    newNode: after.node,
    status,
  });
  process.stderr.write(`${share}: timeline since the fault\n${formatTimeline(timelineOf(facts))}\n`);
  return {
    before,
    after,
    acked,
    toServingS: (new Date(window.startWall).getTime() - faultAt) / 1000,
    status,
    tracker,
  };
}
