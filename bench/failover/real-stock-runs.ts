/**
 * The stock mode of the failover benchmark on real nodes (issue 12 item 7): what a user
 * without leasehold runs. A one-replica Deployment of the shipped NFS server (the same
 * image and container the manager builds, nfs-server-preset.ts; without the lease gate:
 * there is no agent) tolerating an unreachable / not-ready node for 30 s
 * (stockTolerations), a Service of its own (publishing not-ready pods),
 * on the same kind of static CSI PV + claim as the leasehold share (dev/csi,
 * attachRequired: the real attach-detach controller and external-attacher move it).
 * Its pods carry no leasehold label and no ShareManager names it: the managers (still
 * installed, the system is shared with the leasehold mode) never act on it.
 * The same cycle and client as real-node-runs.ts: per crash the serving pod, a libnfs
 * writer on another node, 20 acks, a random pause of up to 2 s, the crash, then until
 * 20 acks after it or `budgetMs` (capped, with the API's reasons: real-stock-cap.ts),
 * the writer's file read back, the node rebooted. Per crash (s since the crash):
 * detection (the node's unreachable taint first seen), eviction (the old pod's
 * deletionTimestamp), replacement created, first Multi-Attach event, the old node's
 * VolumeAttachment gone, attached on the new node, server logged serving, the client's
 * first ack (crash-to-serving), clientWriteGap; over the run the same safety figures as
 * the leasehold mode. NB: nothing fences stock: never two ganesha is measured
 * (GaneshaTracker) and reported as a violation when seen, as for leasehold.
 * Not measured: a kernel NFS client, NFSv4.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startNodeNfsClient } from '../../dev/demo/real-nfs-client.ts';
import { logLineWall } from '../../dev/demo/real-pods.ts';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import {
  createRealVolume,
  GaneshaTracker,
  podLog,
  REAL_NFS_EXPORT,
  realPvName,
  realVolumeHandle,
} from '../../dev/system/real-share.ts';
import type { RealSystem } from '../../dev/system/real-system.ts';
import { managerPodsByNode, SHARES_NAMESPACE, waitForManagers } from '../../dev/system/real-system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import {
  NFS_RUN_MOUNT,
  NFS_RUN_VOLUME,
  NFS_TMP_MOUNT,
  NFS_TMP_SUBPATH,
  nfsPorts,
  nfsServerContainer,
} from '../../manager/share-model/nfs-server-preset.ts';
import type { RealCrashSample, RealNodeResult } from './real-node-runs.ts';
import { managerRestarts, waitManagerRestarted } from './real-node-runs.ts';
import { judgeStockSample, stockCapReasons, stockResumePath } from './real-stock-cap.ts';
import { clientFlowing, RESUMED_ACKS, resumedAt, resumedGapMs, round, summarize } from './stats.ts';

export const STOCK_SHARE = 'stockreal';
/** How long the stock pod tolerates an unreachable or not-ready node (Kubernetes' default: 300 s). */
export const TOLERATION_SECONDS = 30;
const LABEL = 'bench.leasehold.dev/stock-share';
const NFS = { versions: ['3' as const] };

export interface RealStockSample extends RealCrashSample {
  evictedS?: number;
  multiAttachS?: number;
  oldAttachmentGoneS?: number;
  resumePath?: string;
  capReasons?: string[];
}

/** NoExecute tolerations of an unreachable or not-ready node for TOLERATION_SECONDS. */
function stockTolerations(): k8s.V1Toleration[] {
  return ['node.kubernetes.io/unreachable', 'node.kubernetes.io/not-ready'].map((key) => ({
    key,
    operator: 'Exists',
    effect: 'NoExecute',
    tolerationSeconds: TOLERATION_SECONDS,
  }));
}

/** The stock share: the volume createRealNfsShare makes, without the ShareManager; a Deployment and a Service. */
async function createStockShare(sys: RealSystem, share: string): Promise<void> {
  const claim = await createRealVolume(sys, share);
  const server = nfsServerContainer(sys.images.nfsGanesha.ref, REAL_NFS_EXPORT, NFS);
  const labels = { [LABEL]: share };
  await sys.kc.makeApiClient(k8s.AppsV1Api).createNamespacedDeployment(
    {
      namespace: SHARES_NAMESPACE,
      body: {
        metadata: { name: share, namespace: SHARES_NAMESPACE },
        spec: {
          replicas: 1,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              tolerations: stockTolerations(),
              containers: [
                {
                  ...server,
                  imagePullPolicy: 'Never',
                  volumeMounts: [
                    { name: 'share', mountPath: REAL_NFS_EXPORT },
                    { name: NFS_RUN_VOLUME, mountPath: NFS_RUN_MOUNT },
                    { name: NFS_RUN_VOLUME, mountPath: NFS_TMP_MOUNT, subPath: NFS_TMP_SUBPATH },
                  ],
                },
              ],
              volumes: [
                { name: 'share', persistentVolumeClaim: { claimName: claim } },
                { name: NFS_RUN_VOLUME, emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } },
              ],
            },
          },
        },
      },
    },
    withDeadline(10_000),
  );
  await sys.core.createNamespacedService(
    {
      namespace: SHARES_NAMESPACE,
      body: {
        metadata: { name: share, namespace: SHARES_NAMESPACE },
        spec: {
          selector: labels,
          publishNotReadyAddresses: true,
          ports: nfsPorts(NFS).map((p) => ({
            name: p.name,
            port: p.containerPort,
            targetPort: p.containerPort as unknown as k8s.IntOrString,
            protocol: p.protocol,
          })),
        },
      },
    },
    withDeadline(10_000),
  );
}

const stockPods = async (sys: RealSystem, share: string) =>
  (
    await sys.core.listNamespacedPod(
      { namespace: SHARES_NAMESPACE, labelSelector: `${LABEL}=${share}` },
      withDeadline(5_000),
    )
  ).items;

/** The stock share's Ready, not deleted pod (not `notPod`) whose server logged serving. */
async function stockServing(sys: RealSystem, share: string, notPod?: string) {
  for (const p of await stockPods(sys, share).catch(() => [])) {
    const name = p.metadata?.name ?? '';
    const node = p.spec?.nodeName;
    if (name === notPod || !node || p.metadata?.deletionTimestamp) continue;
    if (!p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) continue;
    const n = sys.nodes.find((x) => x.name === node);
    const servingWall = n ? logLineWall(podLog(n, p, 'server'), 'serving') : undefined;
    if (servingWall !== undefined) return { pod: name, node, servingWall };
  }
  return undefined;
}

async function waitStockServing(sys: RealSystem, share: string, timeoutMs: number) {
  for (const until = performance.now() + timeoutMs; performance.now() < until; await sleep(500)) {
    const p = await stockServing(sys, share);
    if (p) return p;
  }
  throw new Error(
    `stock share ${share}: no Ready pod whose NFS server logged serving within ${timeoutMs / 1000} s`,
  );
}

const attachmentsOf = async (storage: k8s.StorageV1Api, pv: string) =>
  (await storage.listVolumeAttachment({}, withDeadline(5_000))).items
    .filter((a) => a.spec?.source?.persistentVolumeName === pv)
    .map((a) => ({
      node: a.spec?.nodeName ?? '',
      attached: a.status?.attached === true,
      deleting: a.metadata?.deletionTimestamp !== undefined,
    }));

/** kube-controller-manager log lines naming the PV written at or after `sinceWall` (klog: no year, so by order). */
function controllerLogLines(sys: RealSystem, pv: string, skipChars: number): string[] {
  try {
    const text = readFileSync(join(sys.cluster.logDir, 'kube-controller-manager.log'), 'utf8').slice(
      skipChars,
    );
    return text.split('\n').filter((l) => l.includes(pv) || l.includes(realVolumeHandle(STOCK_SHARE)));
  } catch {
    return [];
  }
}
const controllerLogSize = (sys: RealSystem) => {
  try {
    return readFileSync(join(sys.cluster.logDir, 'kube-controller-manager.log'), 'utf8').length;
  } catch {
    return 0;
  }
};

export async function realStockCrashRuns(
  sys: RealSystem,
  opts: { runs: number; budgetMs: number; settleMs: number; say: (line: string) => void },
): Promise<RealNodeResult & { samples: RealStockSample[] }> {
  const { say } = opts;
  const share = STOCK_SHARE;
  const pv = realPvName(share);
  const storage = sys.kc.makeApiClient(k8s.StorageV1Api);
  const ganesha = new GaneshaTracker(sys, share, 100, (pod) => pod.metadata?.labels?.[LABEL] === share);
  const samples: RealStockSample[] = [];
  const violations: string[] = [];
  let acked = 0;
  let lost = 0;
  let duplicates = 0;
  let stale = 0;
  try {
    await createStockShare(sys, share);
    for (let run = 1; run <= opts.runs; run++) {
      const victim = await waitStockServing(sys, share, 300_000);
      const clientNode = sys.nodes.find((n) => n.name !== victim.node)?.name ?? '';
      const client = await startNodeNfsClient(sys, share, clientNode, { file: `records-${run}.bin` });
      const sample: RealStockSample = { run, node: victim.node, clientNode, outcome: 'skipped' };
      samples.push(sample);
      try {
        await client.writer.waitForAck(RESUMED_ACKS, 60_000);
        await sleep(Math.random() * 2_000);
        const now = await stockServing(sys, share);
        const lastAck = client.writer.events.filter((e) => e.event === 'ack').at(-1)?.ms;
        if (now?.pod !== victim.pod || !clientFlowing(lastAck, monotonicMs())) {
          sample.note =
            now?.pod !== victim.pod
              ? `the share moved from ${victim.pod} to ${now?.pod ?? 'none'} during the pause`
              : 'the client was not flowing at the crash';
          say(`stock run ${run}: skipped (${sample.note})`);
          continue;
        }
        const logFrom = controllerLogSize(sys);
        const crashWall = Date.now();
        const crashMono = monotonicMs();
        say(`stock run ${run}: crashing ${victim.node} (serving ${victim.pod}; the client on ${clientNode})`);
        await sys.node(victim.node).crash();
        const elapsedS = () => round((Date.now() - crashWall) / 1000);
        let after: Awaited<ReturnType<typeof stockServing>>;
        let replacementCreatedS: number | undefined;
        let lastReport = 0;
        const acks = () => client.writer.events.flatMap((e) => (e.event === 'ack' ? [e.ms] : []));
        const resumed = () => resumedAt(acks(), crashMono, RESUMED_ACKS) !== undefined;
        while (Date.now() - crashWall < opts.budgetMs && !resumed()) {
          if (sample.detectS === undefined) {
            const node = await sys.core
              .readNode({ name: victim.node }, withDeadline(5_000))
              .catch(() => undefined);
            if (node?.spec?.taints?.some((t) => t.key === 'node.kubernetes.io/unreachable'))
              sample.detectS = elapsedS();
          }
          const pods = await stockPods(sys, share).catch(() => undefined);
          if (pods && sample.evictedS === undefined) {
            const old = pods.find((p) => p.metadata?.name === victim.pod);
            if (!old || old.metadata?.deletionTimestamp) sample.evictedS = elapsedS();
          }
          const fresh = pods?.find((p) => p.metadata?.name !== victim.pod);
          if (fresh && replacementCreatedS === undefined) {
            const at = fresh.metadata?.creationTimestamp;
            replacementCreatedS = at ? round((new Date(at).getTime() - crashWall) / 1000) : elapsedS();
          }
          if (sample.multiAttachS === undefined && fresh) {
            const evs = await sys.core
              .listNamespacedEvent({ namespace: SHARES_NAMESPACE }, withDeadline(5_000))
              .catch(() => undefined);
            if (
              evs?.items.some(
                (e) => e.reason === 'FailedAttachVolume' && /Multi-Attach/.test(e.message ?? ''),
              )
            )
              sample.multiAttachS = elapsedS();
          }
          if (sample.oldAttachmentGoneS === undefined) {
            const vas = await attachmentsOf(storage, pv).catch(() => undefined);
            if (vas && !vas.some((a) => a.node === victim.node && !a.deleting))
              sample.oldAttachmentGoneS = elapsedS();
          }
          if (!after) after = await stockServing(sys, share, victim.pod);
          if (elapsedS() - lastReport >= 60) {
            lastReport = elapsedS();
            say(
              `stock run ${run}: ${Math.round(lastReport)} s after the crash: tainted ${sample.detectS ?? '-'} s, evicted ${sample.evictedS ?? '-'} s, replacement ${replacementCreatedS ?? '-'} s, Multi-Attach ${sample.multiAttachS ?? '-'} s, old attachment gone ${sample.oldAttachmentGoneS ?? '-'} s`,
            );
          }
          await sleep(1_000);
        }
        if (!after) after = await stockServing(sys, share, victim.pod);
        await client.stop();
        const report = client.report([crashMono]);
        const resumedMs = resumedAt(acks(), crashMono, RESUMED_ACKS);
        const judged = judgeStockSample(crashMono, acks(), opts.budgetMs, RESUMED_ACKS);
        const kcm = controllerLogLines(sys, pv, logFrom);
        if (judged.outcome === 'capped') {
          const [evs, pods, vas] = await Promise.all([
            sys.core
              .listNamespacedEvent({ namespace: SHARES_NAMESPACE }, withDeadline(10_000))
              .catch(() => undefined),
            stockPods(sys, share).catch(() => []),
            attachmentsOf(storage, pv).catch(() => []),
          ]);
          sample.capReasons = stockCapReasons({
            deadNode: victim.node,
            budgetS: opts.budgetMs / 1000,
            events: (evs?.items ?? []).map((e) => ({
              reason: e.reason,
              message: e.message,
              object: e.involvedObject?.name,
            })),
            pods: pods.map((p) => ({
              name: p.metadata?.name ?? '',
              node: p.spec?.nodeName,
              terminating: p.metadata?.deletionTimestamp !== undefined,
              phase: p.status?.phase,
            })),
            attachments: vas,
          });
        } else if (judged.outcome === 'measured')
          sample.resumePath = stockResumePath({
            evictedS: sample.evictedS,
            oldAttachmentGoneS: sample.oldAttachmentGoneS,
            controllerLog: kcm,
          });
        const attach = after
          ? (await sys.csi.attachments(realVolumeHandle(share))).find((a) => a.node === after?.node)
          : undefined;
        Object.assign(sample, {
          newNode: after?.node,
          replacementCreatedS,
          attachedS: attach && attach.atMs > crashWall ? round((attach.atMs - crashWall) / 1000) : undefined,
          serverServingS: after ? round((after.servingWall - crashWall) / 1000) : undefined,
          writesResumedS: judged.outcome === 'measured' ? judged.writesResumedS : undefined,
          // From the last ack before the resumed flow to its first (a lone in-flight ack is not a resumption).
          clientWriteGapS:
            judged.outcome === 'measured' && resumedMs !== undefined
              ? round(resumedGapMs(acks(), resumedMs) / 1000)
              : undefined,
          acked: report.acked,
          lost: report.ackedWritesLost,
          outcome: judged.outcome === 'rejected' ? 'skipped' : judged.outcome,
          ...(judged.outcome === 'measured' ? {} : { note: judged.reason }),
        } satisfies Partial<RealStockSample>);
        acked += report.acked;
        lost += report.ackedWritesLost;
        duplicates += report.duplicates.length;
        stale += report.staleHandles;
        // NB: writes still stalled at the cap are stock's expected outcome, not a violation.
        violations.push(
          ...report.violations
            .filter(
              (v) => judged.outcome === 'measured' || !v.startsWith('writes did not resume after the fault'),
            )
            .map((v) => `stock run ${run}: ${v}`),
        );
        say(
          `stock run ${run}: ${judged.outcome}${judged.outcome === 'measured' ? ` ${judged.writesResumedS} s (${sample.resumePath})` : ''}; tainted ${sample.detectS ?? '-'} s, evicted ${sample.evictedS ?? '-'} s, Multi-Attach ${sample.multiAttachS ?? '-'} s, old attachment gone ${sample.oldAttachmentGoneS ?? '-'} s; ${report.acked} acked, ${report.ackedWritesLost} lost`,
        );
        for (const r of sample.capReasons ?? []) say(`stock run ${run}: ${r}`);
        for (const l of kcm.slice(0, 8)) say(`stock run ${run}: kube-controller-manager: ${l.slice(0, 300)}`);
        const rebootStart = performance.now();
        const restartsBefore = managerRestarts(await managerPodsByNode(sys.core), victim.node);
        await sys.node(victim.node).heal();
        await waitForManagers(
          sys.core,
          sys.nodes.map((n) => n.name),
          180_000,
        );
        await waitManagerRestarted(sys, victim.node, restartsBefore, 120_000);
        sample.rebootS = round((performance.now() - rebootStart) / 1000);
        say(
          `stock run ${run}: ${victim.node} rebooted (${sample.rebootS} s); settling ${opts.settleMs / 1000} s`,
        );
        if (run < opts.runs) await sleep(opts.settleMs);
      } finally {
        await client.stop();
      }
    }
  } finally {
    await ganesha.stop();
  }
  const windows = ganesha.windows();
  const overlaps = overlappingWindows(windows, monotonicMs());
  for (const [a, b] of overlaps)
    violations.push(
      `two ganesha at once: ${a.id}[${a.startWall}..${a.stopWall ?? 'open'}] x ${b.id}[${b.startWall}..${b.stopWall ?? 'open'}]`,
    );
  const measured = samples.filter((s) => s.outcome === 'measured');
  const of = (k: keyof RealStockSample) =>
    summarize(measured.map((s) => (s[k] as number | undefined) ?? Number.NaN));
  return {
    mode: 'stock-real-nodes',
    settings:
      'no leasehold: a one-replica Deployment of the shipped NFS server (NFSv3, the same image and container as the manager builds, no lease gate) tolerating unreachable/not-ready for 30 s, its own Service (publishNotReadyAddresses), a static CSI PV + claim (testbed driver, real external-attacher, the real attach-detach controller); the same libnfs client and crash/reboot cycle as leasehold',
    samples,
    // detection for stock: the node's unreachable taint (the node lifecycle controller's verdict).
    detection: summarize(samples.map((s) => s.detectS ?? Number.NaN)),
    crashToServing: of('writesResumedS'),
    clientWriteGap: of('clientWriteGapS'),
    crashToServerServing: of('serverServingS'),
    crashToAgentAcquired: { n: 0 },
    reboot: summarize(samples.map((s) => s.rebootS ?? Number.NaN)),
    capped: samples.filter((s) => s.outcome === 'capped').length,
    skipped: samples.filter((s) => s.outcome === 'skipped').length,
    acked,
    ackedWritesLost: lost,
    duplicates,
    staleHandles: stale,
    ganeshaSeen: new Set(windows.map((w) => w.id)).size,
    serverOverlaps: overlaps.length,
    violations,
    notes: samples.filter((s) => s.note).map((s) => `stock run ${s.run}: ${s.note}`),
  };
}
