/**
 * `npm run demo` on real nodes (issue 12 item 7), as a user would see leasehold:
 *   1. the real control plane, N real nodes (kubelet, containerd, runc, kube-proxy on
 *      the node fabric; dev/node), the testbed CSI driver with the real
 *      external-attacher, the project's images in each node's containerd from its boot,
 *      and charts/leasehold installed with `helm install` (dev/system/real-system.ts);
 *   2. one share on the shipped NFS server (ganesha, NFSv4.1 and 4.2, its defaults) on a
 *      static CSI volume (dev/system/real-share.ts), and two Linux kernel NFS clients
 *      (dev/kernel-client: User-Mode Linux, 6.1 by default, `--kernels` picks each of
 *      6.1 and 6.12) on the other node, its kube-proxy
 *      between them and the Service's ClusterIP, each mounting the share with the options
 *      leasehold publishes and running a user's workloads (an fsync'd writer, an O_DIRECT
 *      reader, an fcntl lock holder, a creator of files), the second also probing the
 *      first one's lock;
 *   3. the serving node crashes (RealNode.crash: every process killed at once, off the
 *      fabric, its API connections silent); the surviving node's manager fails the
 *      share over; the demo waits for the replacement to serve and the client to write;
 *   4. prints the timeline since the crash with the clients' view (their writes stalled
 *      and resumed), each workload's first success after the crash, the records read back
 *      from the volume and by the other client (acknowledged writes lost must be 0), the
 *      lock (never granted to the prober), the ganesha processes seen (never two at once:
 *      GaneshaTracker);
 *   5. stops everything: the clients (each runs its leftover check), the nodes (each runs
 *      its leftover check and the demo fails if anything is left), the CSI controller,
 *      the control plane. On Ctrl-C every component's own exit hook kills its processes
 *      (the clients are their node's) and removes its namespaces, mounts and cgroups.
 * Exit codes: 0 the failover happened and was safe, 1 it did not or the demo failed.
 * Not shown here: a second, undisturbed share. The libnfs writer's view: the failover
 * benchmark (bench/failover).
 */
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { formatTimeline, timelineHeading } from '../../lib/failover-timeline.ts';
import type { KernelName } from '../kernel-client/kernels.ts';
import { type KernelClient, startKernelClient } from '../kernel-client/machine.ts';
import {
  allResumed,
  checkRecords,
  eventsOf,
  filesOf,
  mountShare,
  stallLines,
  stallsOf,
  startLockProbe,
  startUserWorkloads,
  tagOf,
} from '../kernel-client/user-workloads.ts';
import { lockExclusion } from '../kernel-client/workload-analysis.ts';
import { overlappingWindows } from '../share-server/serving-window-log.ts';
import { PodTracker, timelineOf } from '../system/failover-facts.ts';
import {
  createRealNfsShare,
  GaneshaTracker,
  readRealShareFile,
  realVolumeHandle,
} from '../system/real-share.ts';
import { type RealSystem, startRealSystem } from '../system/real-system.ts';
import { type ShareStatus, shareStatus } from '../system/shares.ts';
import type { DemoArgs } from './args.ts';
import { type ClientView, demoVerdict, kernelClientViewOf, withClientSteps } from './client-view.ts';
import { say } from './progress.ts';
import { waitServingPod } from './real-pods.ts';

const SHARE = 'share-nfs';
/** How long after the crash the clients' every workload may take to succeed again. */
const RESUME_WITHIN_MS = 120_000;

const clients: KernelClient[] = [];
let ganesha: GaneshaTracker | undefined;

async function demo(sys: RealSystem, adcSync: string, kernels: readonly KernelName[]): Promise<boolean> {
  ganesha = new GaneshaTracker(sys, SHARE);
  say(
    `creating ${SHARE}: a ShareManager of the shipped NFS server (ganesha, NFSv4.1 and 4.2) on a CSI volume`,
  );
  await createRealNfsShare(sys, SHARE);
  const before = await waitServingPod(sys, SHARE, 180_000);
  const clientNode = sys.nodes.find((n) => n.name !== before.node)?.name;
  if (!clientNode) throw new Error('no node other than the serving one for the NFS clients');
  say(`${SHARE} served by ${before.pod} on ${before.node}`);
  let exported = (await shareStatus(sys, SHARE)).export;
  for (let i = 0; i < 150 && !(exported?.source && exported.mountOptions); i++) {
    await sleep(200);
    exported = (await shareStatus(sys, SHARE)).export;
  }
  if (!exported?.source || !exported.mountOptions) throw new Error(`${SHARE} published no status.export`);
  for (const [i, kernel] of kernels.entries()) {
    say(
      `booting kernel NFS client kc${i + 1}: Linux ${kernel} (User-Mode Linux) behind ${clientNode}'s kube-proxy`,
    );
    const kc = await startKernelClient(sys.node(clientNode), { name: `kc${i + 1}`, index: i + 1, kernel });
    clients.push(kc);
    await mountShare(kc, exported.source, exported.mountOptions);
    await startUserWorkloads(kc);
  }
  const [holder, prober] = clients as [KernelClient, KernelClient];
  const probeTag = await startLockProbe(prober, holder.name);
  say(
    `both mounted ${exported.source} -o ${exported.mountOptions}; each writes a 4 KiB record (pwrite + fsync) every 50 ms, reads, holds an fcntl lock, creates files; ${prober.name} probes ${holder.name}'s lock`,
  );
  for (const kc of clients)
    await kc.waitForLine((l) => l.startsWith(`${tagOf(kc.name, 'write')} ack 20`), 60_000);
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
    say(`${SHARE} served again by ${after.pod} on ${after.node}; waiting for the clients' workloads`);
    const deadline = performance.now() + RESUME_WITHIN_MS;
    while (
      performance.now() < deadline &&
      !clients.every((kc) => allResumed(kc, crashMono + (after.servingWall - crashAt.getTime())))
    )
      await sleep(250);
    await sleep(2_000);
    status = await shareStatus(sys, SHARE);
    for (let i = 0; i < 100 && !status.lastFailover?.completedAt; i++) {
      await sleep(200);
      status = await shareStatus(sys, SHARE);
    }
  } finally {
    await pods.stop();
  }
  await tracked.stop();

  const exclusion = lockExclusion(eventsOf(prober, probeTag));
  const servedMono = crashMono + (after.servingWall - crashAt.getTime());
  const views: Array<{ name: string; view: ClientView }> = [];
  const lines: string[] = [];
  for (const kc of clients) {
    const other = kc === holder ? prober : holder;
    const { readBack, seen } = await checkRecords(
      kc,
      other,
      readRealShareFile(sys, SHARE, filesOf(kc.name).write),
    );
    const violations = [
      ...(seen.kind === 'verified'
        ? []
        : [`${other.name} read other data than its acknowledged records (${JSON.stringify(seen)})`]),
      ...(kc === holder && exclusion.outcome !== 'exclusive'
        ? [
            `its lock was ${exclusion.outcome === 'violated' ? 'granted to' : 'never probed by'} ${prober.name}`,
          ]
        : []),
    ];
    const name = `${kc.name} (Linux ${kc.kernel.name})`;
    views.push({
      name,
      view: kernelClientViewOf(
        stallsOf(kc, crashMono).write,
        stallsOf(kc, servedMono).write,
        readBack,
        crashMono,
        violations,
      ),
    });
    lines.push(...stallLines(kc, crashMono, servedMono));
    lines.push(
      `${kc.name}: ${readBack.acked} acknowledged records, ${readBack.lost.length} lost (read back from the volume), ${seen.kind === 'verified' ? `all read by ${other.name} through its own mount` : `${other.name} read something else`}`,
    );
  }
  lines.push(
    `${holder.name}'s fcntl lock: ${prober.name}'s probe denied ${exclusion.denied} times, granted ${exclusion.granted.length}`,
  );

  const attach = (await sys.csi.attachments(realVolumeHandle(SHARE))).find((a) => a.node === after.node);
  const lf = { ...(status.lastFailover ?? {}), ...pods.firstFailover };
  let steps = timelineOf({
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
    faultSource: 'RealNode.crash',
  });
  for (const [i, v] of views.entries())
    steps = withClientSteps(steps, v.view, { name: v.name, source: clients[i]?.name ?? v.name });
  process.stdout.write(
    `\n${timelineHeading(`${SHARE} on real nodes`, 'the crash', lf.by)}\n${formatTimeline(steps)}\n\n`,
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
    clients: views,
  });
  const f = (x: number | undefined) => (x === undefined ? '?' : x.toFixed(2));
  const detect = steps.find((s) => s.step === 'stale lease detected')?.seconds;
  const summary = [
    `node ${before.node} crashed: ${SHARE} detected stale after ${f(detect)} s, served from ${after.node} after ${f(
      (after.servingWall - crashAt.getTime()) / 1000,
    )} s`,
    ...lines,
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
    code = (await demo(sys, args.adcSync, args.kernels)) ? 0 : 1;
  } catch (err) {
    process.stderr.write(`demo failed: ${err instanceof Error ? err.message : String(err)}\n`);
    code = 1;
  } finally {
    say('tearing down (NFS clients, real nodes with their leftover checks, CSI controller, control plane)');
    for (const kc of clients)
      await kc.stop().catch((err) => {
        process.stderr.write(
          `teardown of ${kc.name} failed: ${err instanceof Error ? err.message : String(err)}\n`,
        );
        code = 1;
      });
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
