/**
 * `npm run demo -- --sim`: leasehold end to end on the simulated nodes (dev/sim), then
 * everything torn down (the default demo runs on real nodes: real-demo.ts).
 *
 *   1. builds dist/ (the simulated kubelet runs the compiled agent, manager and share
 *      server), the control plane and helm on first use (with progress);
 *   2. starts the control plane, 3 simulated nodes, installs the chart with helm (one
 *      manager per node), creates 2 share managers of the demo share server and, on
 *      share-a's node, one of the default NFS server (`share-nfs`: Debian's ganesha.nfsd)
 *      with a real NFS client (libnfs nfs-writer, NFSv3) writing through its Service address;
 *   3. crashes the node of share-a (and share-nfs), waits until its share is served from
 *      another node and the NFS client's writes resumed;
 *   4. prints the timeline (seconds since the crash), the NFS client's write gap
 *      (acknowledged writes lost, stale handles) and a one-line summary;
 *   5. stops every process it started, also on Ctrl-C or failure.
 * Option (args.ts): --adc-sync 2s sets kube-controller-manager's --attach-detach-reconcile-sync-period
 * (default 1m, the Kubernetes default), the main wait after a failover (see the note printed).
 * Exit codes: 0 the failover happened and was safe, 1 it did not (or the demo failed),
 * 2 bad option.
 */

import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { monotonicMs } from '../../lib/clock.ts';
import { formatTimeline, timelineHeading } from '../../lib/failover-timeline.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { overlappingWindows } from '../share-server/serving-window-log.ts';
import { type FailoverFacts, gatherFacts, PodTracker, timelineOf } from '../system/failover-facts.ts';
import { REPO_ROOT } from '../system/helm-install.ts';
import {
  analyzeShareWriter,
  createNfsShare,
  type ShareWriter,
  startShareWriter,
  waitReadyNfsPod,
} from '../system/nfs-share.ts';
import { createShare, fetchRecords, pvName, shareStatus, waitServing } from '../system/shares.ts';
import { type System, startSystem } from '../system/system.ts';
import { say } from './progress.ts';

function buildDist(): void {
  say('compiling TypeScript to dist/ (tsc -p tsconfig.build.json)');
  const tsc = spawnSync('tsc', ['-p', join(REPO_ROOT, 'tsconfig.build.json')], { stdio: 'inherit' });
  if (tsc.status !== 0) throw new Error(`tsc -p tsconfig.build.json failed (exit ${tsc.status})`);
  const native = spawnSync(
    'bash',
    [join(REPO_ROOT, 'server/nfs-ganesha/native/build.sh'), join(REPO_ROOT, 'dist/server/nfs-ganesha')],
    { stdio: 'inherit' },
  );
  if (native.status !== 0)
    throw new Error(`server/nfs-ganesha/native/build.sh failed (exit ${native.status})`);
}

async function waitFor<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const value = await check().catch(() => undefined);
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
}

async function cordon(sys: System, node: string, unschedulable: boolean): Promise<void> {
  await sys.core.patchNode(
    { name: node, body: { spec: { unschedulable } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch, withDeadline(5_000)),
  );
}

async function demo(sys: System, adcSync: string): Promise<boolean> {
  say('creating 2 share managers (demo share server on a CSI volume each)');
  await createShare(sys, 'share-a');
  const a = await waitServing(sys, 'share-a', 90_000);
  // share-b goes to another node, so that the crash hits one share only.
  await cordon(sys, a.node, true);
  let b: Awaited<ReturnType<typeof waitServing>>;
  try {
    await createShare(sys, 'share-b');
    b = await waitServing(sys, 'share-b', 90_000);
  } finally {
    await cordon(sys, a.node, false);
  }
  say(`share-a served by ${a.pod} on ${a.node}; share-b by ${b.pod} on ${b.node}`);
  const nfs = await startNfsShareOn(sys, a.node);
  await new Promise((r) => setTimeout(r, 3_000));
  const acked = (await fetchRecords(a.port))?.lastSeq ?? 0;

  const tracker = new PodTracker(sys, 'share-a');
  say(`crashing node ${a.node} (every process on it killed, heartbeats stopped)`);
  // NB: the time the crash was asked for; the simulator records its fault only after
  // every process is reaped, which may take seconds on a busy machine.
  const crashAt = new Date();
  const crashMono = monotonicMs();
  await sys.sim.node(a.node).crash();
  const next = await waitServing(sys, 'share-a', 180_000, a.pod);
  say(`share-a served again by ${next.pod} on ${next.node}`);
  const status = await waitFor('status.lastFailover.completedAt of share-a', 20_000, async () => {
    const s = await shareStatus(sys, 'share-a');
    return s.lastFailover?.completedAt ? s : undefined;
  }).catch(() => shareStatus(sys, 'share-a'));
  await tracker.stop();

  const facts: FailoverFacts = gatherFacts(sys, tracker, {
    share: 'share-a',
    crashedNode: a.node,
    crashAt,
    oldPod: a.pod,
    newPod: next.pod,
    newNode: next.node,
    status,
  });
  const steps = timelineOf(facts);
  const by = facts.status.lastFailover?.by;
  process.stdout.write(`\n${timelineHeading('share-a', 'the crash', by)}\n${formatTimeline(steps)}\n\n`);

  const created = steps.find((s) => s.step.startsWith('replacement'))?.seconds;
  const attached = steps.find((s) => s.step.startsWith('volume attached'))?.seconds;
  if (created !== undefined && attached !== undefined && attached - created > 5) {
    process.stdout.write(
      `Note: the replacement waited ${(attached - created).toFixed(1)} s for its volume. kube-controller-manager's\n` +
        'attach-detach controller refuses to attach an RWO volume to a second node while its own state says it is\n' +
        'attached elsewhere, and learns that the manager deleted the old VolumeAttachment only at its next state\n' +
        `sync (--attach-detach-reconcile-sync-period, here ${adcSync}; Kubernetes default 1m): up to one period\n` +
        'of waiting. Try `npm run demo -- --adc-sync 2s`.\n\n',
    );
  }
  const windows = sys.sim.servingWindows(pvName('share-a'));
  const overlaps = overlappingWindows(windows, monotonicMs());
  const after = await fetchRecords(next.port);
  const have = new Set((after?.records ?? []).map((r) => r.seq));
  const lost = Array.from({ length: acked }, (_, i) => i + 1).filter((s) => !have.has(s));
  const client = await nfsClientView(sys, nfs, crashMono);
  const bStill = await waitServing(sys, 'share-b', 5_000).catch(() => undefined);
  const detect = steps.find((s) => s.step === 'stale lease detected')?.seconds;
  const serving = steps.at(-1)?.seconds;
  const ok = overlaps.length === 0 && lost.length === 0 && next.node !== a.node && client.ok;
  const summary = [
    `node ${a.node} crashed: share-a detected stale after ${detect ?? '?'} s and served again from ${next.node} after ${serving ?? '?'} s`,
    overlaps.length === 0
      ? 'serving windows never overlapped'
      : `${overlaps.length} OVERLAPPING serving windows`,
    lost.length === 0
      ? `all ${acked} records written before the crash readable`
      : `${lost.length} RECORDS LOST`,
    bStill ? `share-b undisturbed on ${bStill.node}` : 'share-b NOT serving',
    client.line,
  ].join('; ');
  process.stdout.write(`${ok ? 'OK' : 'FAILED'}: ${summary}\n\n`);
  return ok;
}

const NFS_SHARE = 'share-nfs';
/** The NFS client of the demo, stopped by the teardown too (when the demo failed half-way). */
let nfsWriter: ShareWriter | undefined;

/** share-nfs on `node` (the other nodes cordoned meanwhile) and a writer through its Service address. */
async function startNfsShareOn(sys: System, node: string): Promise<ShareWriter> {
  say(
    `creating ${NFS_SHARE} (the default NFS server, ganesha.nfsd) on ${node}, and an NFS client writing to it`,
  );
  const others = sys.sim.nodes.map((n) => n.name).filter((n) => n !== node);
  for (const n of others) await cordon(sys, n, true);
  try {
    // NFSv3 (the pod gets its rpcbind): its WRITE and COMMIT never wait for ganesha's
    // grace period, so the client's stall is the failover itself. (An NFSv4.0 client
    // waits out the whole grace period on top: see the README's benchmark section.)
    await createNfsShare(sys, NFS_SHARE, { nfs: { versions: ['3'] } });
    await waitReadyNfsPod(sys, NFS_SHARE, 120_000);
  } finally {
    for (const n of others) await cordon(sys, n, false);
  }
  const w = await startShareWriter(sys, NFS_SHARE, 3, 'records.bin');
  nfsWriter = w;
  await w.writer.waitForAck(20, 60_000);
  return w;
}

/** Waits until the client wrote again after the crash; its write gap, in one line. */
async function nfsClientView(
  sys: System,
  w: ShareWriter,
  crashMono: number,
): Promise<{ ok: boolean; line: string }> {
  await waitFor(`${NFS_SHARE}: the NFS client writing again`, 120_000, async () =>
    w.writer.events.some((e) => e.event === 'ack' && e.ms > crashMono) ? true : undefined,
  ).catch(() => undefined);
  await w.writer.stop();
  const r = analyzeShareWriter(sys, NFS_SHARE, w, [crashMono]);
  const gap = r.clientWriteGaps[0]?.gapMs;
  say(
    `${NFS_SHARE}: the NFS client's writes stalled ${gap === undefined ? '?' : (gap / 1000).toFixed(1)} s (NFSv3: last acknowledged write before the crash to the first after it)`,
  );
  return {
    ok: r.violations.length === 0,
    line:
      r.violations.length === 0
        ? `${NFS_SHARE}: NFS client write gap ${gap === undefined ? '?' : (gap / 1000).toFixed(1)} s, all ${r.acked} acknowledged writes readable, no stale handle`
        : `${NFS_SHARE}: ${r.violations.join(', ').toUpperCase()}`,
  };
}

export async function runSimDemo(adcSync: string): Promise<number> {
  buildDist();
  let sys: System | undefined;
  let stopping = false;
  const teardown = async () => {
    if (stopping) return;
    stopping = true;
    say('tearing down (simulated nodes, control plane)');
    await nfsWriter?.writer.stop();
    await sys?.stop();
  };
  process.once('SIGINT', () => {
    void teardown().then(() => process.exit(130));
  });
  try {
    const keepDirs = process.env.LEASEHOLD_KEEP_CLUSTER === '1';
    sys = await startSystem({
      nodes: 3,
      cluster: { attachDetachReconcileSyncPeriod: adcSync },
      progress: say,
      showBuildProgress: true,
      keepDirs,
    });
    if (keepDirs) say(`keeping logs: cluster ${sys.cluster.dir}, simulator ${sys.sim.root}`);
    return (await demo(sys, adcSync)) ? 0 : 1;
  } catch (err) {
    process.stderr.write(`demo failed: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  } finally {
    await teardown();
    say('done; no process left running');
  }
}
