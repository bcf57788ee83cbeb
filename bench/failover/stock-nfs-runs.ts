/**
 * Stock Kubernetes, no leasehold manager, measured from the NFS client's side: each
 * volume is served by the shipped NFS server (server/nfs-ganesha/, the same container
 * the manager would build: manager/share-model/nfs-server-preset.ts) in a Deployment
 * (replicas 1) whose pod tolerates an unreachable or not-ready node for 30 s (not the
 * default 300 s), behind a Service of its own (publishing not-ready pods, as the
 * manager's does), with one real NFS client (libnfs nfs-writer, through the Service's
 * stable address) per volume. All `volumes` pods are put on one node (the others
 * cordoned meanwhile), then that node crashes once; per volume: detection = the node's
 * unreachable taint first seen, eviction = the old pod's deletionTimestamp first seen,
 * crash-to-serving = the client's first acknowledged write after the crash, and the
 * clientWriteGap. Whatever is not served `budgetMs` after the crash is capped, with the
 * reasons the API shows (stock-runs.ts cappedNotes). Over the run: ackedWritesLost and
 * stale handles per writer (every acknowledged record read back from the volume).
 *
 * NB: one crash carries all samples (as stock-runs.ts): stock timings are fixed timers.
 * No lease gate (no agent): nothing but the ReplicaSet controller and the attach-detach
 * controller decide where a server runs, which is the point of this mode.
 * Not guaranteed: that the server windows never overlap (nothing fences them; it is
 * reported, as `serverOverlaps`, not required).
 */
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import { NFS_SERVER_IMAGE } from '../../dev/sim/sim.ts';
import {
  analyzeShareWriter,
  NFS_EXPORT,
  ServerProcessTracker,
  type ShareWriter,
  startShareWriter,
  waitReadyNfsPod,
} from '../../dev/system/nfs-share.ts';
import { createVolume } from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE, type System } from '../../dev/system/system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { type k8s, withDeadline } from '../../lib/kube-client.ts';
import {
  NFS_RUN_MOUNT,
  NFS_RUN_VOLUME,
  nfsPorts,
  nfsServerContainer,
} from '../../manager/share-model/nfs-server-preset.ts';
import type { NfsCrashSample, NfsSettingsUsed } from './nfs-client-runs.ts';
import { crashToServing, round } from './stats.ts';
import { cappedNotes, cordon, createStockDeployment } from './stock-runs.ts';

const FILE = 'records.bin';
const LABEL = 'leasehold.dev/share-manager';

export interface StockNfsResult {
  samples: Array<NfsCrashSample & { evictedS?: number }>;
  notes: string[];
  ackedWritesLost: number;
  acked: number;
  staleHandles: number;
  duplicates: number;
  serverOverlaps: number;
  violations: string[];
}

async function createNfsDeployment(sys: System, name: string, claim: string, nfs: NfsSettingsUsed) {
  const settings = {
    versions: nfs.versions as ('3' | '4.0' | '4.1' | '4.2')[],
    gracePeriod: nfs.gracePeriod,
    leaseLifetime: nfs.leaseLifetime,
  };
  const server = nfsServerContainer(`${NFS_SERVER_IMAGE}:dev`, NFS_EXPORT, settings);
  const labels = await createStockDeployment(
    sys,
    name,
    claim,
    {
      ...server,
      volumeMounts: [
        { name: 'share', mountPath: NFS_EXPORT },
        { name: NFS_RUN_VOLUME, mountPath: NFS_RUN_MOUNT },
      ],
    },
    [{ name: NFS_RUN_VOLUME, emptyDir: {} }],
  );
  await sys.core.createNamespacedService(
    {
      namespace: SHARES_NAMESPACE,
      body: {
        metadata: { name, namespace: SHARES_NAMESPACE },
        spec: {
          selector: labels,
          publishNotReadyAddresses: true,
          ports: nfsPorts(settings).map((p) => ({
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

export async function stockNfsCrash(
  sys: System,
  opts: {
    volumes: number;
    budgetMs: number;
    nfs: NfsSettingsUsed;
    clientVersion: 3 | 4;
    say: (line: string) => void;
  },
): Promise<StockNfsResult> {
  const { say, budgetMs } = opts;
  const names = Array.from({ length: opts.volumes }, (_, i) => `stocknfs-${String(i + 1).padStart(2, '0')}`);
  const [victim, ...others] = sys.sim.nodes.map((n) => n.name) as [string, ...string[]];
  const trackers = new Map(names.map((n) => [n, new ServerProcessTracker(sys, n, 200)]));
  const writers = new Map<string, ShareWriter>();
  const before = new Map<string, string>();
  try {
    for (const n of others) await cordon(sys, n, true);
    try {
      for (const name of names) await createNfsDeployment(sys, name, await createVolume(sys, name), opts.nfs);
      for (const name of names) before.set(name, (await waitReadyNfsPod(sys, name, 240_000)).pod);
    } finally {
      for (const n of others) await cordon(sys, n, false);
    }
    // Each writer process registers an exit listener: `volumes` of them are expected.
    process.setMaxListeners(Math.max(process.getMaxListeners(), opts.volumes + 10));
    for (const name of names) writers.set(name, await startShareWriter(sys, name, opts.clientVersion, FILE));
    for (const w of writers.values()) await w.writer.waitForAck(50, 120_000);
    const crashMono = monotonicMs();
    const crashWall = Date.now();
    await sys.sim.node(victim).crash();
    say(
      `crashed ${victim} carrying ${opts.volumes} NFS shares with a writer each; waiting up to ${budgetMs / 1000} s`,
    );
    let detectS: number | undefined;
    const evictedS = new Map<string, number>();
    const resumed = new Set<string>();
    let lastReport = 0;
    while (Date.now() - crashWall < budgetMs && resumed.size < names.length) {
      const elapsed = (Date.now() - crashWall) / 1000;
      if (detectS === undefined) {
        const node = await sys.core.readNode({ name: victim }, withDeadline(5_000)).catch(() => undefined);
        if (node?.spec?.taints?.some((t) => t.key === 'node.kubernetes.io/unreachable'))
          detectS = round(elapsed);
      }
      for (const name of names) {
        if (!evictedS.has(name)) {
          const pods = await sys.core
            .listNamespacedPod(
              { namespace: SHARES_NAMESPACE, labelSelector: `${LABEL}=${name}` },
              withDeadline(5_000),
            )
            .catch(() => undefined);
          const old = pods?.items.find((p) => p.metadata?.name === before.get(name));
          if (pods && (!old || old.metadata?.deletionTimestamp)) evictedS.set(name, round(elapsed));
        }
        const w = writers.get(name);
        if (w && w.writer.events.filter((e) => e.event === 'ack' && e.ms > crashMono).length >= 20)
          resumed.add(name);
      }
      if (elapsed - lastReport >= 60) {
        lastReport = elapsed;
        say(
          `${Math.round(elapsed)} s after the crash: node tainted ${detectS !== undefined}, evicted ${evictedS.size}, writes resumed ${resumed.size}/${opts.volumes}`,
        );
      }
      await sleep(500);
    }
    const notes =
      resumed.size < names.length
        ? await cappedNotes(sys, names.length - resumed.size, opts.volumes, budgetMs)
        : [];
    const samples: StockNfsResult['samples'] = [];
    let ackedWritesLost = 0;
    let acked = 0;
    let staleHandles = 0;
    let duplicates = 0;
    const violations: string[] = [];
    for (const [i, name] of names.entries()) {
      const w = writers.get(name) as ShareWriter;
      const report = analyzeShareWriter(sys, name, w, [crashMono]);
      const gap = report.clientWriteGaps[0];
      const judged = crashToServing(crashMono, gap?.firstAck?.ms, budgetMs);
      ackedWritesLost += report.ackedWritesLost;
      acked += report.acked;
      staleHandles += report.staleHandles;
      duplicates += report.duplicates.length;
      // NB: a gap still open at the cap is the expected stock outcome, not a violation.
      violations.push(
        ...report.violations
          .filter((v) => judged.kind === 'measured' || !v.startsWith('writes did not resume after the fault'))
          .map((v) => `${name}: ${v}`),
      );
      samples.push({
        run: i + 1,
        node: victim,
        ...(detectS === undefined ? {} : { detectS }),
        ...(evictedS.has(name) ? { evictedS: evictedS.get(name) } : {}),
        ...(judged.kind === 'measured'
          ? {
              writesResumedS: judged.s,
              ...(gap?.gapMs === undefined ? {} : { clientWriteGapS: round(gap.gapMs / 1000) }),
            }
          : { note: `capped: ${judged.reason}` }),
      });
    }
    const now = monotonicMs();
    const serverOverlaps = names.reduce(
      (n, name) => n + overlappingWindows(trackers.get(name)?.windows() ?? [], now).length,
      0,
    );
    return { samples, notes, ackedWritesLost, acked, staleHandles, duplicates, serverOverlaps, violations };
  } finally {
    for (const w of writers.values()) await w.writer.stop();
    for (const t of trackers.values()) await t.stop();
  }
}
