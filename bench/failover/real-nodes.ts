/**
 * `npm run bench -- failover --real-nodes [options]` (bench/run.ts routes it here; the
 * options: real-node-args.ts): the leasehold mode on real nodes with the NFS client
 * (real-node-runs.ts), on one real-node system (dev/system/real-system.ts) with the
 * control plane on the sim benchmark's Kubernetes defaults (ADC sync 1m, node-monitor
 * grace 40s; the kubelets' own heartbeat, 10 s). Prints the figures (p50/p95), next to
 * the sim nodes' leasehold figures from the newest sim result file on the same
 * timings (sim-reference.ts: labelled as another run, with its date and load), and
 * writes bench/results/failover-real-nodes-nfs-client-v3-adc-<adc>-nmg-<grace>-settle-<s>s-leasehold.json
 * with the load average (sampled every 15 s).
 * Exit codes: 0 done and safe (no acknowledged write lost, never two ganesha, no
 * violation; capped crashes are reported, not failures), 1 a violation or a failure,
 * 2 bad arguments. SIGINT: every component's own exit hook removes what it made.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from '../../dev/system/helm-install.ts';
import { startRealSystem } from '../../dev/system/real-system.ts';
import { parseRealNodeBenchArgs, REAL_NODE_BENCH_USAGE } from './real-node-args.ts';
import { realNodeCrashRuns } from './real-node-runs.ts';
import { readSimReference } from './sim-reference.ts';
import { type Summary, summarizeLoad } from './stats.ts';

const args = parseRealNodeBenchArgs(process.argv.slice(2));
if ('problem' in args) {
  process.stderr.write(`bench failover --real-nodes: ${args.problem}\n${REAL_NODE_BENCH_USAGE}\n`);
  process.exit(2);
}

const t0 = performance.now();
const say = (line: string) =>
  process.stdout.write(`[${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s real-nodes] ${line}\n`);
const loadSamples: number[] = [loadavg()[0] ?? Number.NaN];
const loadStart = loadavg().map((x) => Math.round(x * 100) / 100);
const loadTimer = setInterval(() => loadSamples.push(loadavg()[0] ?? Number.NaN), 15_000);
loadTimer.unref();

const fmt = (x: number | undefined) => (x === undefined ? '     -' : x.toFixed(2).padStart(6));
const fmtS = (s: Summary) => `${fmt(s.p50)} ${fmt(s.p95)}`;

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
  let result: Awaited<ReturnType<typeof realNodeCrashRuns>>;
  try {
    result = await realNodeCrashRuns(sys, {
      runs: args.runs,
      budgetMs: args.budgetS * 1000,
      settleMs: args.settleS * 1000,
      say,
    });
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
  const sim = readSimReference(dir, {
    adcSync: args.adcSync,
    nodeMonitorGracePeriod: args.nodeMonitorGracePeriod,
  });
  const r = result;
  const lines = [
    '',
    `Failover after a node crash on real nodes, measured from the NFS client (libnfs v3 in a surviving node's network, through the ClusterIP): ${args.runs} crashes, each healed by a reboot and ${args.settleS} s of settling; ${args.nodes} nodes; ADC sync ${args.adcSync}, node-monitor grace ${args.nodeMonitorGracePeriod}; load average ${load.atStart.join(' ')} at start, ${load.atEnd.join(' ')} at end (1-min mean ${load.oneMinute.mean ?? '?'}, max ${load.oneMinute.max ?? '?'}) on ${load.cores} cores`,
    `${'run'.padEnd(36)}detection p50/p95   crash-to-serving p50/p95   clientWriteGap p50/p95   n`,
    `${'leasehold, real nodes (this run)'.padEnd(34)}  ${fmtS(r.detection)}      ${fmtS(r.crashToServing)}              ${fmtS(r.clientWriteGap)}            ${r.crashToServing.n}/${r.samples.length}`,
    sim
      ? `${'leasehold, sim nodes (OTHER run)'.padEnd(34)}  ${fmtS(sim.detection)}      ${fmtS(sim.crashToServing)}              ${fmtS(sim.clientWriteGap)}            ${sim.crashToServing.n}/${sim.runs}   (${sim.file}, ${sim.date}, load mean ${sim.loadMean ?? '?'})`
      : `leasehold, sim nodes: no sim result file on ADC sync ${args.adcSync} / grace ${args.nodeMonitorGracePeriod} in bench/results`,
    '',
    `real nodes: server logged serving p50/p95 ${fmtS(r.crashToServerServing)} s, agent acquired ${fmtS(r.crashToAgentAcquired)} s, reboot to a Ready manager ${fmtS(r.reboot)} s`,
    `real nodes: ${r.acked} acknowledged writes, ${r.ackedWritesLost} lost (read back from the volume), ${r.duplicates} duplicates, ${r.staleHandles} stale handles; ${r.ganeshaSeen} ganesha processes seen, ${r.serverOverlaps} overlapping; ${r.capped} capped, ${r.skipped} skipped`,
    ...r.violations.map((v) => `VIOLATION: ${v}`),
    ...r.notes.map((n) => `note: ${n}`),
    '',
  ];
  process.stdout.write(lines.join('\n'));
  const file = `failover-real-nodes-nfs-client-v3-adc-${args.adcSync}-nmg-${args.nodeMonitorGracePeriod}-settle-${args.settleS}s-leasehold.json`;
  mkdirSync(dir, { recursive: true });
  const record = {
    date: new Date().toISOString(),
    runs: args.runs,
    nodes: args.nodes,
    share: 'nfs',
    adcSync: args.adcSync,
    nodeMonitorGracePeriod: args.nodeMonitorGracePeriod,
    timings: {
      adcSync: args.adcSync,
      nodeMonitorGracePeriod: args.nodeMonitorGracePeriod,
      nodeHeartbeat: 'the kubelet default (node Lease renewed every 10 s, status every 10 s)',
      lease: { duration: '6s', renewInterval: '2s', renewDeadline: '4s' },
      nfs: { versions: ['3'] },
      client: 'libnfs NFSv3',
      writeIntervalMs: 20,
      budgetS: args.budgetS,
      settleS: args.settleS,
    },
    load,
    results: [r],
    simReference: sim ? { ...sim, note: 'from another run (the sim benchmark), not this one' } : null,
  };
  writeFileSync(join(dir, file), `${JSON.stringify(record, null, 2)}\n`);
  process.stdout.write(`wrote ${join('bench', 'results', file)}\n`);
  return r.violations.length === 0 && r.ackedWritesLost === 0 && r.serverOverlaps === 0 ? 0 : 1;
}

process.exitCode = await main().catch((err: unknown) => {
  process.stderr.write(
    `bench failover --real-nodes failed: ${err instanceof Error ? err.message : String(err)}\n`,
  );
  return 1;
});
