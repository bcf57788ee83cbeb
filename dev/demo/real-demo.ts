/**
 * `npm run demo` on real nodes (issue 12 item 7), as a user would see leasehold:
 *   1. the real control plane, N real nodes (kubelet, containerd, runc, kube-proxy on
 *      the node fabric; dev/node), the testbed CSI driver with the real
 *      external-attacher, the project's images imported into each node's containerd,
 *      and charts/leasehold installed with `helm install` (dev/system/real-system.ts);
 *   2. one share on the shipped NFS server (ganesha, NFSv3) on a static CSI volume
 *      (dev/system/real-share.ts), and a libnfs writer in another node's network
 *      namespace writing a committed record every 20 ms through the Service's ClusterIP
 *      (real-nfs-client.ts, RealNode.spawnInNetwork: before the crash across the fabric);
 *   3. the serving node crashes (RealNode.crash: every process killed at once, off the
 *      fabric, its API connections silent); the surviving node's manager fails the
 *      share over; the demo waits for the replacement to serve and the client to write;
 *   4. prints the timeline since the crash with the client's view (its writes stalled
 *      and resumed), the records read back from the volume (acknowledged writes lost
 *      must be 0), the ganesha processes seen (never two at once: GaneshaTracker);
 *   5. stops everything: the client, the nodes (each runs its leftover check and the
 *      demo fails if anything is left), the CSI controller, the control plane. On
 *      Ctrl-C every component's own exit hook kills its processes (the client is its
 *      node's) and removes its namespaces, mounts and cgroups (dev/node).
 * Exit codes: 0 the failover happened and was safe, 1 it did not or the demo failed.
 * Not shown here (the --sim demo has them): a second, undisturbed share; the demo
 * share server's serving windows.
 */
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { overlappingWindows } from '../share-server/serving-window-log.ts';
import { formatTimeline, PodTracker, timelineOf } from '../system/failover-facts.ts';
import { createRealNfsShare, GaneshaTracker, realVolumeHandle } from '../system/real-share.ts';
import { type RealSystem, startRealSystem } from '../system/real-system.ts';
import { type ShareStatus, shareStatus } from '../system/shares.ts';
import type { DemoArgs } from './args.ts';
import { clientErrorsLine, clientViewOf, demoVerdict, withClientSteps } from './client-view.ts';
import { say } from './progress.ts';
import { type NodeNfsClient, startNodeNfsClient } from './real-nfs-client.ts';
import { waitServingPod } from './real-pods.ts';

const SHARE = 'share-nfs';
/** Acknowledged writes after the crash before the client counts as resumed. */
const RESUMED_ACKS = 20;

let client: NodeNfsClient | undefined;
let ganesha: GaneshaTracker | undefined;

async function demo(sys: RealSystem, adcSync: string): Promise<boolean> {
  ganesha = new GaneshaTracker(sys, SHARE);
  say(`creating ${SHARE}: a ShareManager of the shipped NFS server (ganesha, NFSv3) on a CSI volume`);
  await createRealNfsShare(sys, SHARE, { nfs: { versions: ['3'] } });
  const before = await waitServingPod(sys, SHARE, 180_000);
  const clientNode = sys.nodes.find((n) => n.name !== before.node)?.name;
  if (!clientNode) throw new Error('no node other than the serving one for the NFS client');
  say(`${SHARE} served by ${before.pod} on ${before.node}`);
  client = await startNodeNfsClient(sys, SHARE, clientNode);
  say(
    `NFS client (libnfs writer, NFSv3) in ${clientNode}'s network writing a committed record every 20 ms to ${client.host} (the Service's ClusterIP)`,
  );
  await client.writer.waitForAck(RESUMED_ACKS, 60_000);
  const tracked = ganesha;
  for (let i = 0; i < 50 && !tracked.windows().some((w) => w.id === before.pod); i++) await sleep(200);

  const pods = new PodTracker(sys, SHARE);
  say(
    `crashing node ${before.node} (every process on it killed at once, off the network, its API connections silent)`,
  );
  const crashAt = new Date();
  const crashMono = monotonicMs();
  await sys.node(before.node).crash();
  let status: ShareStatus;
  let after: Awaited<ReturnType<typeof waitServingPod>>;
  try {
    after = await waitServingPod(sys, SHARE, 180_000, before.pod);
    say(`${SHARE} served again by ${after.pod} on ${after.node}`);
    const deadline = performance.now() + 120_000;
    const w = client.writer;
    while (
      performance.now() < deadline &&
      w.events.filter((e) => e.event === 'ack' && e.ms > crashMono).length < RESUMED_ACKS
    )
      await sleep(200);
    status = await shareStatus(sys, SHARE);
    for (let i = 0; i < 100 && !status.lastFailover?.completedAt; i++) {
      await sleep(200);
      status = await shareStatus(sys, SHARE);
    }
  } finally {
    await pods.stop();
  }
  await client.stop();
  await tracked.stop();

  const attach = (await sys.csi.attachments(realVolumeHandle(SHARE))).find((a) => a.node === after.node);
  const lf = { ...(status.lastFailover ?? {}), ...pods.firstFailover };
  const view = clientViewOf(client.report([crashMono]), crashMono);
  const steps = withClientSteps(
    timelineOf({
      share: SHARE,
      crashedNode: before.node,
      crashAt,
      oldPod: before.pod,
      newPod: after.pod,
      newNode: after.node,
      status: { ...status, lastFailover: lf },
      scheduledAt: pods.scheduled.get(after.pod)?.at,
      oldPodGoneAt: pods.gone.get(before.pod),
      newPodSeenAt: pods.created.get(after.pod),
      ...(attach ? { attachedAt: new Date(attach.atMs) } : {}),
      servingAt: new Date(after.servingWall),
      servingSource: 'NFS server log: serving',
    }).map((s) => ({
      ...s,
      source: s.source
        .replace('simulator', 'RealNode.crash')
        .replace('sim CSI attacher', 'CSI controller record'),
    })),
    view,
  );
  process.stdout.write(
    `\nTimeline of the failover of ${SHARE} on real nodes (seconds since the crash; run by manager ${lf.by ?? '?'}):\n${formatTimeline(steps)}\n\n`,
  );
  const created = steps.find((s) => s.step.startsWith('replacement'))?.seconds;
  const attached = steps.find((s) => s.step.startsWith('volume attached'))?.seconds;
  if (created !== undefined && attached !== undefined && attached - created > 5)
    process.stdout.write(
      `Note: the replacement waited ${(attached - created).toFixed(1)} s for its volume: the attach-detach controller attaches an RWO\n` +
        `volume to a second node only after its next state sync (--attach-detach-reconcile-sync-period, here ${adcSync}).\n` +
        'Try `npm run demo -- --adc-sync 2s`.\n\n',
    );
  const windows = tracked.windows();
  const overlaps = overlappingWindows(windows, monotonicMs());
  const verdict = demoVerdict({
    crashedNode: before.node,
    newNode: after.node,
    ganeshaOverlaps: overlaps.length,
    ganeshaSeen: new Set(windows.map((w) => w.id)).size,
    client: view,
  });
  const f = (x: number | undefined) => (x === undefined ? '?' : x.toFixed(2));
  const detect = steps.find((s) => s.step === 'stale lease detected')?.seconds;
  const summary = [
    `node ${before.node} crashed: ${SHARE} detected stale after ${f(detect)} s, served from ${after.node} after ${f(
      (after.servingWall - crashAt.getTime()) / 1000,
    )} s`,
    `NFS client (on ${clientNode}): writes stalled at ${f(view.stalledS)} s, resumed at ${f(view.resumedS)} s (write gap ${f(view.gapS)} s); ${view.acked} acknowledged writes, ${view.lost} lost (read back from the volume), ${view.duplicates} duplicates, ${view.staleHandles} stale handles`,
    `NFS client's failed calls after the crash: ${clientErrorsLine(client.writer.events, crashMono, crashMono + (view.resumedS ?? 600) * 1000)}`,
    `${windows.length} ganesha processes seen (${windows.map((w) => w.id).join(', ')}), ${overlaps.length} overlapping`,
  ];
  process.stdout.write(
    `${verdict.ok ? 'OK' : 'FAILED'}: ${summary.join('\n    ')}${verdict.ok ? '' : `\n  problems: ${verdict.problems.join('; ')}`}\n\n`,
  );
  return verdict.ok;
}

export async function runRealDemo(args: DemoArgs): Promise<number> {
  let sys: RealSystem | undefined;
  // Before the components' own hooks (registered as they start, each kills its own
  // processes, the client with its node, and removes what it made; then exit 130).
  process.once('SIGINT', () => say('interrupted: every component removes what it made'));
  let code = 1;
  try {
    say(
      `starting the control plane and ${args.nodes} real nodes (first run: builds the node components, the CSI parts and the images)`,
    );
    const keepDirs = process.env.LEASEHOLD_KEEP_CLUSTER === '1';
    sys = await startRealSystem({
      nodes: args.nodes,
      cluster: { attachDetachReconcileSyncPeriod: args.adcSync },
      progress: say,
      keepDirs,
    });
    if (keepDirs) say(`keeping logs: cluster ${sys.cluster.dir}`);
    code = (await demo(sys, args.adcSync)) ? 0 : 1;
  } catch (err) {
    process.stderr.write(`demo failed: ${err instanceof Error ? err.message : String(err)}\n`);
    code = 1;
  } finally {
    say('tearing down (NFS client, real nodes with their leftover checks, CSI controller, control plane)');
    await client?.stop().catch(() => {});
    await ganesha?.stop().catch(() => {});
    try {
      await sys?.stop();
      say('done; every node passed its leftover check, no process left running');
    } catch (err) {
      process.stderr.write(`teardown failed: ${err instanceof Error ? err.message : String(err)}\n`);
      code = 1;
    }
  }
  return code;
}
