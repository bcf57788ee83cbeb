/**
 * The leasehold mode of the failover benchmark on real nodes (issue 12 item 7): one
 * share on the shipped NFS server (NFSv3) on a static CSI volume, on the real-node
 * system (dev/system/real-system.ts), and `runs` times:
 *   1. the serving pod (Ready, its server logged `serving`); a fresh libnfs writer
 *      (dev/demo/real-nfs-client.ts) in another node's network namespace writing a
 *      committed record every 20 ms through the Service's ClusterIP, to its own file;
 *      20 acks, then a random pause of up to 2 s (the crash at a random phase of the
 *      agent's 2 s renewal) and the same pod still serving with the client flowing;
 *   2. crash of the serving node (RealNode.crash);
 *   3. wait for a replacement that serves and 20 acks after the crash, or `budgetMs`;
 *   4. the writer stopped, its file read back from the volume (write-analysis.ts);
 *   5. heal: the node reboots (RealNode.heal) and its manager container has run again
 *      and is ready (its restart count went up: the pod's Ready in the API is the
 *      pre-crash one until the node-monitor grace or the new kubelet's first status),
 *      then `settleMs` before the next crash.
 * Per crash (s since the crash): detection (status.lastFailover.detectedAt, first
 * value), replacement created, volume attached (the CSI controller's record), agent
 * acquired, server logged serving, writes resumed (the first ack of the first flow of
 * 20 acks after the crash, stats.ts resumedAt: crash-to-serving), clientWriteGap (to
 * that ack from the last before it), the reboot's length. Over the run: acknowledged
 * writes lost (0), duplicates, stale handles, and never two ganesha of the share
 * (GaneshaTracker over the whole run, reboots included: `serverOverlaps` must be 0).
 * A crash whose client was not flowing, or whose share moved during the pause, is
 * skipped with a note, never measured.
 * Not measured: a kernel NFS client (none here); NFSv4 (libnfs 4.0 waits out grace).
 */

import { startNodeNfsClient } from '../../dev/demo/real-nfs-client.ts';
import { servingPod, waitServingPod } from '../../dev/demo/real-pods.ts';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import { PodTracker } from '../../dev/system/failover-facts.ts';
import { createRealNfsShare, GaneshaTracker, podLog, realVolumeHandle } from '../../dev/system/real-share.ts';
import type { RealSystem } from '../../dev/system/real-system.ts';
import { managerPodsByNode, SHARES_NAMESPACE, waitForManagers } from '../../dev/system/real-system.ts';
import { shareStatus } from '../../dev/system/shares.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { LONGHORN_LEASE_MS, type ManagedMode, modeLease, modeSettings } from './modes.ts';
import { describeManagerPod, keepManagerLogs } from './real-node-logs.ts';
import {
  clientFlowing,
  emulateLonghornVerdict,
  RESUMED_ACKS,
  resumedAt,
  resumedGapMs,
  round,
  type Summary,
  summarize,
  victimStillServing,
} from './stats.ts';

export const REAL_SHARE = 'benchreal';
/** Each managed mode's share (its own static PV): `benchreal`, `benchreal-va`, `benchreal-longhorn`, `benchreal-oos`. */
export const realModeShare = (mode: ManagedMode) =>
  mode === 'leasehold' ? REAL_SHARE : `${REAL_SHARE}-${mode.replace(/^leasehold-/, '')}`;

export interface RealCrashSample {
  run: number;
  node: string;
  clientNode: string;
  newNode?: string;
  detectS?: number;
  replacementCreatedS?: number;
  attachedS?: number;
  agentAcquiredS?: number;
  serverServingS?: number;
  /** With witnesses: each witness that did not clear the replacement at first (a wait, or no answer), and why (its agent's log). */
  clearanceWaits?: { witness: string; reason: string; retryInMs: number }[];
  writesResumedS?: number;
  clientWriteGapS?: number;
  rebootS?: number;
  acked?: number;
  lost?: number;
  clientErrors?: Array<[number, string, string]>;
  outcome: 'measured' | 'capped' | 'skipped';
  note?: string;
}

export interface RealNodeResult {
  mode: `${ManagedMode}-real-nodes` | 'stock-real-nodes';
  settings: string;
  /** The agent's lease timings the mode ran with (stock: none). */
  lease?: { duration: string; renewInterval: string; renewDeadline: string };
  /** The chart values the mode set on top of the install's (real-mode-switch.ts), and how long the switch took. */
  chartValues?: Record<string, string>;
  switchS?: number;
  samples: RealCrashSample[];
  detection: Summary;
  crashToServing: Summary;
  clientWriteGap: Summary;
  crashToServerServing: Summary;
  crashToAgentAcquired: Summary;
  reboot: Summary;
  capped: number;
  skipped: number;
  acked: number;
  ackedWritesLost: number;
  duplicates: number;
  staleHandles: number;
  ganeshaSeen: number;
  serverOverlaps: number;
  violations: string[];
  notes: string[];
}

/** The share Lease's renewTime in wall ms, or undefined when it has none. */
async function lastRenewMs(sys: RealSystem, share: string): Promise<number | undefined> {
  const lease = await sys.kc
    .makeApiClient(k8s.CoordinationV1Api)
    .readNamespacedLease({ namespace: SHARES_NAMESPACE, name: share }, withDeadline(5_000));
  const renew = lease.spec?.renewTime as unknown as string | Date | undefined;
  return renew === undefined ? undefined : new Date(renew).getTime();
}

const sinceS = (wallMs: number | undefined, crashWallMs: number) =>
  wallMs === undefined ? undefined : round((wallMs - crashWallMs) / 1000);

export async function realNodeCrashRuns(
  sys: RealSystem,
  opts: {
    runs: number;
    budgetMs: number;
    settleMs: number;
    say: (line: string) => void;
    /** The managed mode the chart is on (real-mode-switch.ts); default `leasehold`. */
    mode?: ManagedMode;
    /** The node-monitor grace the system runs with (for the mode's settings line). */
    grace?: string;
  },
): Promise<RealNodeResult> {
  const mode = opts.mode ?? 'leasehold';
  const share = realModeShare(mode);
  const { say } = opts;
  const ganesha = new GaneshaTracker(sys, share);
  const samples: RealCrashSample[] = [];
  const violations: string[] = [];
  let acked = 0;
  let lost = 0;
  let duplicates = 0;
  let stale = 0;
  try {
    await createRealNfsShare(sys, share, { nfs: { versions: ['3'] } });
    for (let run = 1; run <= opts.runs; run++) {
      const victim = await waitServingPod(sys, share, 180_000);
      const clientNode = sys.nodes.find((n) => n.name !== victim.node)?.name ?? '';
      const client = await startNodeNfsClient(sys, share, clientNode, { file: `records-${run}.bin` });
      const sample: RealCrashSample = { run, node: victim.node, clientNode, outcome: 'skipped' };
      samples.push(sample);
      try {
        await client.writer.waitForAck(RESUMED_ACKS, 60_000);
        await sleep(Math.random() * 2_000);
        const now = await servingPod(sys, share);
        const lastAck = client.writer.events.filter((e) => e.event === 'ack').at(-1)?.ms;
        if (!victimStillServing(victim, now) || !clientFlowing(lastAck, monotonicMs())) {
          sample.note = !victimStillServing(victim, now)
            ? `the share moved from ${victim.pod} to ${now?.pod ?? 'none'} during the pause`
            : 'the client was not flowing at the crash';
          say(`run ${run}: skipped (${sample.note})`);
          continue;
        }
        const pods = new PodTracker(sys, share);
        const acks = () => client.writer.events.flatMap((e) => (e.event === 'ack' ? [e.ms] : []));
        const crashWall = Date.now();
        const crashMono = monotonicMs();
        say(`run ${run}: crashing ${victim.node} (serving ${victim.pod}; the client on ${clientNode})`);
        await sys.node(victim.node).crash();
        // Longhorn's verdict is emulated from the renewTime the crash left (modes.ts).
        const renewMs =
          mode === 'longhorn' ? await lastRenewMs(sys, share).catch(() => undefined) : undefined;
        const deadline = performance.now() + opts.budgetMs;
        let after: Awaited<ReturnType<typeof servingPod>>;
        try {
          after = await waitServingPod(sys, share, opts.budgetMs, victim.pod).catch(() => undefined);
          while (performance.now() < deadline && resumedAt(acks(), crashMono, RESUMED_ACKS) === undefined)
            await sleep(200);
        } finally {
          await pods.stop();
        }
        await client.stop();
        const status = await shareStatus(sys, share).catch(() => undefined);
        // Read before the reboot: the surviving managers' logs (the detector's among them).
        await keepManagerLogs(sys, run, crashWall, victim.node, say);
        const lf = { ...(status?.lastFailover ?? {}), ...pods.firstFailover };
        const report = client.report([crashMono]);
        // Resumed = the first of a flow of RESUMED_ACKS acks after the crash (stats.ts
        // resumedAt), not a lone ack of a write in flight at the crash.
        const resumedMs = resumedAt(acks(), crashMono, RESUMED_ACKS);
        const attach = after
          ? (await sys.csi.attachments(realVolumeHandle(share))).find((a) => a.node === after?.node)
          : undefined;
        const wall = (iso: string | undefined) => (iso ? Date.parse(iso) : undefined);
        Object.assign(sample, {
          newNode: after?.node,
          detectS: sinceS(wall(lf.detectedAt), crashWall),
          replacementCreatedS: sinceS(wall(lf.replacementCreatedAt), crashWall),
          attachedS: sinceS(attach?.atMs, crashWall),
          agentAcquiredS: sinceS(wall(lf.completedAt), crashWall),
          serverServingS: sinceS(after?.servingWall, crashWall),
          ...(mode === 'leasehold-witnesses' && after
            ? { clearanceWaits: clearanceWaitsOf(sys, after) }
            : {}),
          writesResumedS: resumedMs === undefined ? undefined : round((resumedMs - crashMono) / 1000),
          clientWriteGapS:
            resumedMs === undefined ? undefined : round(resumedGapMs(acks(), resumedMs) / 1000),
          acked: report.acked,
          lost: report.ackedWritesLost,
          clientErrors: client.writer.events.flatMap((e) =>
            e.event === 'error' && e.ms >= crashMono && (resumedMs === undefined || e.ms <= resumedMs)
              ? [[round((e.ms - crashMono) / 1000), e.op, e.kind] as [number, string, string]]
              : [],
          ),
          outcome: resumedMs === undefined ? 'capped' : 'measured',
        } satisfies Partial<RealCrashSample>);
        if (mode === 'longhorn')
          emulateLonghornVerdict(
            sample,
            ['writesResumedS', 'clientWriteGapS', 'serverServingS'] as const,
            renewMs,
            LONGHORN_LEASE_MS,
            crashWall,
            crashWall + Math.random() * 1000,
          );
        acked += report.acked;
        lost += report.ackedWritesLost;
        duplicates += report.duplicates.length;
        stale += report.staleHandles;
        violations.push(...report.violations.map((v) => `run ${run}: ${v}`));
        say(
          `run ${run}: detected ${sample.detectS ?? '?'} s, server serving ${sample.serverServingS ?? '?'} s, client resumed ${sample.writesResumedS ?? '?'} s (gap ${sample.clientWriteGapS ?? '?'} s); ${report.acked} acked, ${report.ackedWritesLost} lost`,
        );
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
        const seen = await describeManagerPod(sys, victim.node);
        if (seen) say(`run ${run}: at ${new Date().toISOString()} ${seen}`);
        say(
          `run ${run}: ${victim.node} rebooted, its manager Ready (${sample.rebootS} s); settling ${opts.settleMs / 1000} s`,
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
  const of = (k: keyof RealCrashSample) =>
    summarize(
      samples.filter((s) => s.outcome === 'measured').map((s) => (s[k] as number | undefined) ?? Number.NaN),
    );
  return {
    mode: `${mode}-real-nodes`,
    settings: `${modeSettings(mode, opts.grace ?? '40s')}; on real nodes (kubelet, containerd, runc, kube-proxy; the project images; the chart by helm); the shipped NFS server, NFSv3, on a static CSI volume (testbed driver, real external-attacher); client libnfs NFSv3 in a surviving node's network namespace through the Service ClusterIP (kube-proxy), a committed 64-byte record every 20 ms; crash-to-serving = crash to the first of 20 acks in a row after it; each crash healed by a reboot before the next`,
    lease: modeLease(mode),
    samples,
    detection: of('detectS'),
    crashToServing: of('writesResumedS'),
    clientWriteGap: of('clientWriteGapS'),
    crashToServerServing: of('serverServingS'),
    crashToAgentAcquired: of('agentAcquiredS'),
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
    notes: samples.filter((s) => s.note).map((s) => `run ${s.run}: ${s.note}`),
  };
}

/** The manager on `node` as it is now: its pod's uid and its container's restart count. */
export interface ManagerIncarnation {
  uid: string | undefined;
  restarts: number;
}

export function managerRestarts(pods: Map<string, k8s.V1Pod>, node: string): ManagerIncarnation {
  const pod = pods.get(node);
  return { uid: pod?.metadata?.uid, restarts: pod?.status?.containerStatuses?.[0]?.restartCount ?? 0 };
}

/**
 * Waits until the manager on the rebooted `node` runs again: its container restarted
 * (restart count above `before`'s) and ready, or another pod of the DaemonSet there
 * ready (the out-of-service taint's force-delete of the node's pods, leasehold-oos).
 * NB: right after the reboot the API still shows the pre-crash container as Ready, so
 * a Ready check alone passes before the new manager runs; the next crash then hits a
 * manager that has not started, which detects it D after its own Lease watch opens
 * (measured: 6.7-12.9 s instead of ~5 s).
 */
export async function waitManagerRestarted(
  sys: RealSystem,
  node: string,
  before: ManagerIncarnation,
  timeoutMs: number,
) {
  for (const until = performance.now() + timeoutMs; performance.now() < until; await sleep(250)) {
    const pod = (await managerPodsByNode(sys.core)).get(node);
    const c = pod?.status?.containerStatuses?.[0];
    const again = pod?.metadata?.uid !== before.uid || (c?.restartCount ?? 0) > before.restarts;
    if (pod && again && c?.ready) return;
  }
  throw new Error(`the manager on ${node} did not run again within ${timeoutMs / 1000} s of the reboot`);
}

/** The replacement agent's "clearance not given yet" lines (agent/witness-promises.ts). */
function clearanceWaitsOf(
  sys: RealSystem,
  serving: { node: string; object: k8s.V1Pod },
): { witness: string; reason: string; retryInMs: number }[] {
  const node = sys.nodes.find((n) => n.name === serving.node);
  if (!node) return [];
  return podLog(node, serving.object, 'agent')
    .split('\n')
    .flatMap((line) => {
      const at = line.indexOf('{');
      if (at < 0) return [];
      try {
        const l = JSON.parse(line.slice(at)) as Record<string, unknown>;
        return l.msg === 'clearance not given yet'
          ? [
              {
                witness: String(l.witness),
                reason: String(l.reason),
                retryInMs: l.retryInMs === undefined ? 0 : Number(l.retryInMs),
              },
            ]
          : [];
      } catch {
        return [];
      }
    });
}
