/**
 * The five failover modes (modes.ts) measured from the NFS client's side, for
 * bench/failover/run.ts: each mode's crashed share is a share on the shipped NFS server
 * with a real libnfs writer through the Service's address. The managed modes run
 * nfs-client-runs.ts (`runs` crashes of one share, each after a random pause of up to
 * the attach-detach sync) with the mode's chart values; stock runs stock-nfs-runs.ts
 * (one crash carrying `runs` shares, capped). Every mode reports the same figures:
 * detection, crash-to-serving (crash to the client's first acknowledged write after it),
 * clientWriteGap, ackedWritesLost, stale handles, server overlaps.
 *
 * Guarantees: a mode that fails is reported as failed (with its error), the other
 * modes' results still stand; at most `parallel` modes run at once (each on its own
 * control plane with 3 simulated nodes), in the order given.
 * Not guaranteed: that modes run at the same time see the same load (the load average
 * is recorded with the run, run.ts).
 */
import type { System } from '../../dev/system/system.ts';
import { inLanes } from './lanes.ts';
import {
  LONGHORN_LEASE_MS,
  type ManagedMode,
  type Mode,
  modeChartValues,
  modeLease,
  modeSettings,
} from './modes.ts';
import { type NfsCrashSample, type NfsSettingsUsed, nfsClientCrashRuns } from './nfs-client-runs.ts';
import { type Summary, summarize } from './stats.ts';
import { stockNfsCrash } from './stock-nfs-runs.ts';
import { TOLERATION_SECONDS } from './stock-runs.ts';

export interface NfsModeResult {
  mode: Mode;
  settings: string;
  lease?: { duration: string; renewInterval: string; renewDeadline: string };
  samples: Array<NfsCrashSample & { evictedS?: number }>;
  detection: Summary;
  /** Crash to the client's first acknowledged write after it. */
  crashToServing: Summary;
  clientWriteGap: Summary;
  crashToServerReady?: Summary;
  crashToAgentAcquired?: Summary;
  /** Samples not served within the budget (stock: the expected outcome). */
  capped: number;
  /** Samples that measured no failover of their crash (rejected, or not crashed; see their notes). */
  rejected: number;
  ackedWritesLost: number;
  acked: number;
  staleHandles: number;
  duplicates: number;
  serverOverlaps: number;
  violations: string[];
  notes: string[];
}

export interface NfsModesOptions {
  runs: number;
  budgetMs: number;
  stockBudgetMs: number;
  adcSync: string;
  adcSyncMs: number;
  nodeMonitorGracePeriod: string;
  heartbeat: string;
  nfs: NfsSettingsUsed;
  clientVersion: 3 | 4;
  parallel: number;
  sayFor: (mode: string) => (line: string) => void;
  withSystem: <T>(
    mode: Mode,
    values: Record<string, string> | false,
    body: (sys: System) => Promise<T>,
  ) => Promise<T>;
}

async function runOne(mode: Exclude<Mode, 'nfs'>, o: NfsModesOptions): Promise<NfsModeResult> {
  const say = o.sayFor(mode);
  if (mode === 'stock') {
    const r = await o.withSystem(mode, false, (sys) =>
      stockNfsCrash(sys, {
        volumes: o.runs,
        budgetMs: o.stockBudgetMs,
        nfs: o.nfs,
        clientVersion: o.clientVersion,
        say,
      }),
    );
    return {
      mode,
      settings: `no manager; one Deployment of the shipped NFS server per volume, its pod tolerating node.kubernetes.io/unreachable and not-ready for ${TOLERATION_SECONDS} s (default 300 s), a Service publishing not-ready pods; all ${o.runs} on the crashed node (one crash); detection = the node lifecycle controller's unreachable taint; crash-to-serving = crash to the client's first acknowledged write after it`,
      samples: r.samples,
      detection: summarize(r.samples.map((s) => s.detectS ?? Number.NaN)),
      crashToServing: summarize(r.samples.map((s) => s.writesResumedS ?? Number.NaN)),
      clientWriteGap: summarize(r.samples.map((s) => s.clientWriteGapS ?? Number.NaN)),
      capped: r.samples.filter((s) => s.writesResumedS === undefined).length,
      rejected: 0,
      ackedWritesLost: r.ackedWritesLost,
      acked: r.acked,
      staleHandles: r.staleHandles,
      duplicates: r.duplicates,
      serverOverlaps: r.serverOverlaps,
      violations: r.violations,
      notes: r.notes,
    };
  }
  const managed: ManagedMode = mode;
  const r = await o.withSystem(mode, modeChartValues(managed, o.nodeMonitorGracePeriod), (sys) =>
    nfsClientCrashRuns(sys, {
      runs: o.runs,
      budgetMs: o.budgetMs,
      phaseSpreadMs: o.adcSyncMs,
      adcSync: o.adcSync,
      nodeMonitorGracePeriod: o.nodeMonitorGracePeriod,
      nodeHeartbeatPeriod: o.heartbeat,
      nfs: o.nfs,
      clientVersion: o.clientVersion,
      say,
      mode,
      settings: modeSettings(managed, o.nodeMonitorGracePeriod),
      lease: modeLease(managed),
      ...(managed === 'longhorn' ? { longhorn: { leaseMs: LONGHORN_LEASE_MS } } : {}),
    }),
  );
  return {
    mode,
    settings: r.settings,
    lease: r.timings.lease,
    samples: r.samples,
    detection: r.detection,
    crashToServing: r.crashToServing,
    clientWriteGap: r.clientWriteGap,
    crashToServerReady: r.crashToServerReady,
    crashToAgentAcquired: r.crashToAgentAcquired,
    capped: r.samples.filter((s) => s.outcome === 'capped').length,
    rejected: r.samples.filter((s) => s.outcome === 'rejected' || s.outcome === 'not-crashed').length,
    ackedWritesLost: r.ackedWritesLost,
    acked: r.acked,
    staleHandles: r.staleHandles,
    duplicates: r.duplicates,
    serverOverlaps: r.serverOverlaps,
    violations: r.violations,
    notes: r.notes,
  };
}

/** Runs the modes, at most `parallel` at once; a failed mode is returned as its error. */
export async function runNfsModes(
  modes: Exclude<Mode, 'nfs'>[],
  o: NfsModesOptions,
): Promise<Array<{ mode: Mode; result?: NfsModeResult; error?: string }>> {
  const settled = await inLanes(modes, o.parallel, (mode) => runOne(mode, o));
  return settled.map((s, i) => {
    const mode = modes[i] as Mode;
    if (s.status === 'fulfilled') return { mode, result: s.value };
    return { mode, error: s.reason instanceof Error ? s.reason.message : String(s.reason) };
  });
}
