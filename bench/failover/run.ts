/**
 * The failover benchmark, `npm run bench -- failover [options]` (bench/run.ts routes it
 * here; the options: real-node-args.ts): node crashes on real nodes, measured from the
 * NFS client's side. The leasehold mode (real-node-runs.ts), and with `--modes` the
 * other managed modes (modes.ts; each put on the chart by `helm upgrade`,
 * real-mode-switch.ts, before its share is created) and stock Kubernetes
 * (real-stock-runs.ts), one mode after the other in the order given (each mode's share
 * deleted before the next starts: one share at a time), on one real-node system
 * (dev/system/real-system.ts) with the control plane on Kubernetes' defaults (ADC sync
 * 1m, node-monitor grace 40s; the kubelets' own heartbeat, 10 s). Prints the figures
 * (p50/p95), the modes' rows side by side in one table (real-node-table.ts), and writes
 * bench/results/failover-real-nodes-nfs-client-v3-adc-<adc>-nmg-<grace>-settle-<s>s-<modes joined by +>.json
 * with the load average (sampled every 15 s).
 * Exit codes: 0 done and safe (no acknowledged write lost, never two ganesha, no
 * violation; capped crashes are reported, not failures), 1 a violation or a failure,
 * 2 bad arguments. SIGINT: every component's own exit hook removes what it made.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from '../../dev/system/helm-install.ts';
import { SHARES_NAMESPACE, startRealSystem } from '../../dev/system/real-system.ts';
import { sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import type { ManagedMode } from './modes.ts';
import { installValues, switchManagedMode } from './real-mode-switch.ts';
import { parseRealNodeBenchArgs, REAL_NODE_BENCH_USAGE } from './real-node-args.ts';
import { type RealNodeResult, realModeShare, realNodeCrashRuns } from './real-node-runs.ts';
import { realNodeTable, type TableRow } from './real-node-table.ts';
import { realStockCrashRuns, TOLERATION_SECONDS } from './real-stock-runs.ts';
import { type Summary, summarizeLoad } from './stats.ts';

const args = parseRealNodeBenchArgs(process.argv.slice(2));
if ('problem' in args) {
  process.stderr.write(`bench failover: ${args.problem}\n${REAL_NODE_BENCH_USAGE}\n`);
  process.exit(2);
}

const t0 = performance.now();
const say = (line: string) =>
  process.stdout.write(`[${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s failover] ${line}\n`);
const loadSamples: number[] = [loadavg()[0] ?? Number.NaN];
const loadStart = loadavg().map((x) => Math.round(x * 100) / 100);
const loadTimer = setInterval(() => loadSamples.push(loadavg()[0] ?? Number.NaN), 15_000);
loadTimer.unref();

const modeName = (r: RealNodeResult) => r.mode.replace(/-real-nodes$/, '');
const fmt = (x: number | undefined) => (x === undefined ? '     -' : x.toFixed(2).padStart(6));
const fmtS = (s: Summary) => `${fmt(s.p50)} ${fmt(s.p95)}`;

/** Deletes a managed mode's share (its ShareManager; the manager removes its pod) and waits until its pods are gone. */
async function removeLeaseholdShare(
  sys: Awaited<ReturnType<typeof startRealSystem>>,
  share: string,
): Promise<void> {
  await sys.kc.makeApiClient(k8s.CustomObjectsApi).deleteNamespacedCustomObject(
    {
      group: 'leasehold.dev',
      version: 'v1alpha1',
      plural: 'sharemanagers',
      namespace: SHARES_NAMESPACE,
      name: share,
    },
    withDeadline(10_000),
  );
  for (const until = performance.now() + 120_000; performance.now() < until; await sleep(1_000)) {
    const pods = await sys.core.listNamespacedPod(
      { namespace: SHARES_NAMESPACE, labelSelector: `leasehold.dev/share-manager=${share}` },
      withDeadline(5_000),
    );
    if (pods.items.length === 0) return;
  }
  throw new Error(
    `the leasehold share ${share}'s pods were not gone 120 s after its ShareManager was deleted`,
  );
}

async function main(): Promise<number> {
  if ('problem' in args) return 2;
  say(`starting the control plane and ${args.nodes} real nodes`);
  const sys = await startRealSystem({
    nodes: args.nodes,
    cluster: {
      attachDetachReconcileSyncPeriod: args.adcSync,
      nodeMonitorGracePeriod: args.nodeMonitorGracePeriod,
    },
    progress: say,
  });
  const results: RealNodeResult[] = [];
  try {
    const base = await installValues(sys);
    let previous: ManagedMode | undefined;
    for (const mode of args.modes) {
      say(`mode ${mode}: ${args.runs} crashes`);
      // One share at a time: the previous managed mode's share goes first.
      if (previous) await removeLeaseholdShare(sys, realModeShare(previous));
      previous = undefined;
      if (mode !== 'stock') {
        const switched = await switchManagedMode(sys, mode, args.nodeMonitorGracePeriod, base);
        say(
          `mode ${mode}: chart values ${JSON.stringify(switched.values)} applied, managers rolled out in ${switched.seconds} s`,
        );
        const result = await realNodeCrashRuns(sys, {
          runs: args.runs,
          budgetMs: args.budgetS * 1000,
          settleMs: args.settleS * 1000,
          say,
          mode,
          grace: args.nodeMonitorGracePeriod,
        });
        results.push({ ...result, chartValues: switched.values, switchS: switched.seconds });
        previous = mode;
      } else {
        results.push(
          await realStockCrashRuns(sys, {
            runs: args.runs,
            budgetMs: args.stockBudgetS * 1000,
            settleMs: args.settleS * 1000,
            say,
          }),
        );
      }
    }
  } finally {
    say('stopping the system (every node runs its leftover check)');
    await sys.stop();
  }
  clearInterval(loadTimer);
  const load = {
    atStart: loadStart,
    atEnd: loadavg().map((x) => Math.round(x * 100) / 100),
    oneMinute: summarizeLoad(loadSamples),
    cores: availableParallelism(),
  };
  const dir = join(REPO_ROOT, 'bench', 'results');
  const rows: TableRow[] = results.map((r) => ({
    label: `${modeName(r)}, real nodes`,
    detection: r.detection,
    crashToServing: r.crashToServing,
    clientWriteGap: r.clientWriteGap,
    measured: r.crashToServing.n,
    total: r.samples.length,
    capped: r.capped,
    budgetS: r.mode === 'stock-real-nodes' ? args.stockBudgetS : args.budgetS,
  }));
  const lines = [
    '',
    `Failover after a node crash on real nodes, measured from the NFS client (libnfs v3 in a surviving node's network, through the ClusterIP): ${args.runs} crashes per mode (${args.modes.join(', ')}, one after the other on one system), each healed by a reboot and ${args.settleS} s of settling; ${args.nodes} nodes; ADC sync ${args.adcSync}, node-monitor grace ${args.nodeMonitorGracePeriod}; load average ${load.atStart.join(' ')} at start, ${load.atEnd.join(' ')} at end (1-min mean ${load.oneMinute.mean ?? '?'}, max ${load.oneMinute.max ?? '?'}) on ${load.cores} cores`,
    ...realNodeTable(rows),
    '',
    ...results.flatMap((r) => {
      const m = modeName(r);
      return [
        `${m}: server logged serving p50/p95 ${fmtS(r.crashToServerServing)} s, agent acquired ${fmtS(r.crashToAgentAcquired)} s, reboot ${fmtS(r.reboot)} s`,
        `${m}: ${r.acked} acknowledged writes, ${r.ackedWritesLost} lost (read back from the volume), ${r.duplicates} duplicates, ${r.staleHandles} stale handles; ${r.ganeshaSeen} ganesha processes seen, ${r.serverOverlaps} overlapping; ${r.capped} capped, ${r.skipped} skipped`,
        ...r.violations.map((v) => `VIOLATION (${m}): ${v}`),
        ...r.notes.map((n) => `note (${m}): ${n}`),
      ];
    }),
    '',
  ];
  process.stdout.write(lines.join('\n'));
  const file = `failover-real-nodes-nfs-client-v3-adc-${args.adcSync}-nmg-${args.nodeMonitorGracePeriod}-settle-${args.settleS}s-${args.modes.join('+')}.json`;
  mkdirSync(dir, { recursive: true });
  const record = {
    date: new Date().toISOString(),
    runs: args.runs,
    modes: args.modes,
    nodes: args.nodes,
    share: 'nfs',
    adcSync: args.adcSync,
    nodeMonitorGracePeriod: args.nodeMonitorGracePeriod,
    timings: {
      adcSync: args.adcSync,
      nodeMonitorGracePeriod: args.nodeMonitorGracePeriod,
      nodeHeartbeat: 'the kubelet default (node Lease renewed every 10 s, status every 10 s)',
      lease: 'per mode: results[].lease',
      nfs: { versions: ['3'] },
      client: 'libnfs NFSv3',
      writeIntervalMs: 20,
      budgetS: args.budgetS,
      stockBudgetS: args.stockBudgetS,
      stockTolerationSeconds: TOLERATION_SECONDS,
      settleS: args.settleS,
    },
    load,
    results,
  };
  writeFileSync(join(dir, file), `${JSON.stringify(record, null, 2)}\n`);
  process.stdout.write(`wrote ${join('bench', 'results', file)}\n`);
  return results.every((r) => r.violations.length === 0 && r.ackedWritesLost === 0 && r.serverOverlaps === 0)
    ? 0
    : 1;
}

process.exitCode = await main().catch((err: unknown) => {
  process.stderr.write(`bench failover failed: ${err instanceof Error ? err.message : String(err)}\n`);
  return 1;
});
