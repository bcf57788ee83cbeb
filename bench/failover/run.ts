/**
 * The failover benchmark (not a test): node crashes on the local cluster, in one run,
 * each mode on its own control plane with 3 simulated nodes (modes.ts says what each
 * mode installs):
 *   leasehold      the chart's defaults (lease 6 s, renew 2 s, deadline 4 s; volume
 *                  handoff volumes-in-use: the lost node's status.volumesInUse entry removed)
 *   leasehold-va   the same with manager.volumeHandoff=volume-attachment
 *   longhorn       Longhorn v1.7's timings (renew 3 s, lease 7 s) given to leasehold's
 *                  agent and manager; Longhorn's 1 s wall-clock verdict emulated (stats.ts)
 *   stock          no manager: Deployments whose pods tolerate an unreachable node for
 *                  30 s (instead of 300 s); one crash carrying `runs` volumes, capped
 *   leasehold-oos  the chart's defaults plus the opt-in out-of-service taint on top of
 *                  volume-attachment
 *   nfs            (only when named) the issue-9 run: leasehold defaults with the
 *                  --nfs-* settings, its own result file (nfs-client-runs.ts runNfsMode)
 * With --share nfs (the default) every mode's crashed share is a share on the shipped
 * NFS server with a real libnfs writer through the Service's address (nfs-modes.ts), and
 * each crash is measured from the client's side: crash-to-serving = crash to the first
 * acknowledged write after it, clientWriteGap, ackedWritesLost, stale handles. With
 * --share toy the share is the toy HTTP record server (leasehold-runs.ts, stock-runs.ts)
 * and crash-to-serving is its serving-window start.
 * On Kubernetes' default timings unless told otherwise: attach-detach reconcile sync 1m,
 * node-monitor grace 40s, the node heartbeat (Lease and status) every 10 s. The result
 * file records the timings it ran under (and each mode's lease timings) and the load
 * average (sampled every 15 s). At most --parallel modes run at once (default: all).
 * Prints p50/p95 per mode and the ratios to leasehold from this same run.
 *
 *   npm run bench -- failover [--runs N] [--adc-sync 1m] [--node-monitor-grace 40s]
 *                             [--heartbeat 10s] [--budget 150] [--stock-budget 600]
 *                             [--modes leasehold,leasehold-va,longhorn,stock,leasehold-oos,nfs]
 *                             [--share nfs|toy] [--parallel N]
 *                             [--nfs-versions 3] [--nfs-grace 15s] [--nfs-lease 10s]
 * Results (bench/results/): --share nfs: failover-nfs-client-<v3|v4.0>-adc-<adc>-nmg-<grace>-hb-<hb>-<modes, or
 * five-modes>.json; --share toy: failover.json on the default timings with both leasehold
 * and leasehold-va in the run, else failover-adc-<adc>-grace-<grace>-hb-<hb>-<modes>.json.
 * Exit codes: 0 done (even when capped), 2 bad arguments.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { REPO_ROOT } from '../../dev/system/helm-install.ts';
import { type System, startSystem } from '../../dev/system/system.ts';
import { inLanes } from './lanes.ts';
import { type CrashSample, leaseholdCrashRuns } from './leasehold-runs.ts';
import { LONGHORN_LEASE_MS, MODES, type Mode, modeChartValues, modeLease, modeSettings } from './modes.ts';
import { parseNfsOptions, runNfsMode } from './nfs-client-runs.ts';
import { type NfsModeResult, runNfsModes } from './nfs-modes.ts';
import { ratio, ratiosToLeasehold, type Summary, summarize, summarizeLoad } from './stats.ts';
import { stockCrash, TOLERATION_SECONDS } from './stock-runs.ts';

const FIVE_MODES: readonly Exclude<Mode, 'nfs'>[] = [
  'leasehold',
  'leasehold-va',
  'longhorn',
  'stock',
  'leasehold-oos',
];

interface ModeResult {
  mode: Mode;
  settings: string;
  /** The share lease timings of this mode (agent). */
  lease?: { duration: string; renewInterval: string; renewDeadline: string };
  samples: CrashSample[];
  detection: Summary;
  crashToServing: Summary;
  /** Seconds from the crash to each step (leasehold modes; measured, never shifted). */
  phases?: Record<'handoff' | 'oldDetached' | 'attached' | 'acquired', Summary>;
  notes: string[];
}

function usage(problem: string): never {
  process.stderr.write(
    `bench failover: ${problem}\nusage: bench/failover/run.ts [--runs N (1-50, default 10)] [--adc-sync DURATION (default 1m)] [--node-monitor-grace DURATION (default 40s)] [--heartbeat DURATION (node Lease and status period, default 10s)] [--budget SECONDS (per leasehold crash, default 150)] [--stock-budget SECONDS (default 600)] [--modes ${MODES.join(',')}] [--share nfs|toy (default nfs)] [--parallel N (modes at once, default all)] [--nfs-versions 3|4.0,4.1,4.2 (default 3)] [--nfs-grace 15s] [--nfs-lease 10s]\n`,
  );
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '10' },
    'adc-sync': { type: 'string', default: '1m' },
    'node-monitor-grace': { type: 'string', default: '40s' },
    heartbeat: { type: 'string', default: '10s' },
    budget: { type: 'string', default: '150' },
    'stock-budget': { type: 'string', default: '600' },
    modes: { type: 'string', default: 'leasehold,leasehold-va,longhorn,stock,leasehold-oos' },
    'nfs-versions': { type: 'string', default: '3' },
    'nfs-grace': { type: 'string', default: '15s' },
    'nfs-lease': { type: 'string', default: '10s' },
    share: { type: 'string', default: 'nfs' },
    parallel: { type: 'string' },
  },
  strict: true,
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1 || runs > 50)
  usage(`--runs=${values.runs}: must be a whole number 1-50`);
const budgetS = Number(values.budget);
const stockBudgetS = Number(values['stock-budget']);
if (!(budgetS >= 10)) usage(`--budget=${values.budget}: must be a number of seconds >= 10`);
if (!(stockBudgetS >= 30))
  usage(`--stock-budget=${values['stock-budget']}: must be a number of seconds >= 30`);
const adcSync = values['adc-sync'] ?? '1m';
if (!/^\d+(s|m)$/.test(adcSync)) usage(`--adc-sync=${adcSync}: must be like 2s or 1m`);
const modes = (values.modes ?? '').split(',').filter((m) => m !== '') as Mode[];
for (const m of modes)
  if (!(MODES as readonly string[]).includes(m))
    usage(`--modes=${values.modes}: ${m} is not one of ${MODES.join(', ')}`);
if (modes.length === 0) usage(`--modes: name at least one of ${MODES.join(', ')}`);
const grace = values['node-monitor-grace'] ?? '40s';
if (!/^\d+(s|m)$/.test(grace)) usage(`--node-monitor-grace=${grace}: must be like 8s or 40s`);
const heartbeat = values.heartbeat ?? '10s';
if (!/^\d+s$/.test(heartbeat)) usage(`--heartbeat=${heartbeat}: must be like 2s or 10s`);
const share = values.share ?? 'nfs';
if (share !== 'nfs' && share !== 'toy') usage(`--share=${share}: must be nfs or toy`);
const parallel = values.parallel === undefined ? modes.length : Number(values.parallel);
if (!Number.isInteger(parallel) || parallel < 1 || parallel > 6)
  usage(`--parallel=${values.parallel}: must be a whole number 1-6 (modes run at once)`);
const nfsOptions = parseNfsOptions({
  versions: values['nfs-versions'] ?? '',
  grace: values['nfs-grace'] ?? '',
  lease: values['nfs-lease'] ?? '',
});
if ('problem' in nfsOptions) usage(nfsOptions.problem);
const toMs = (d: string) => Number.parseInt(d, 10) * (d.endsWith('m') ? 60_000 : 1000);
const adcSyncMs = toMs(adcSync);
const heartbeatMs = toMs(heartbeat);
/** The timings every result of this run ran under (written into the result file). */
const timings = {
  adcSync,
  nodeMonitorGracePeriod: grace,
  nodeHeartbeatPeriod: heartbeat,
  nodeStatusPeriod: heartbeat,
  nodeMonitorPeriod: '1s',
};

const t0 = performance.now();
const sayFor = (mode: string) => (line: string) =>
  process.stdout.write(
    `[${((performance.now() - t0) / 1000).toFixed(0).padStart(4)}s ${mode.padEnd(9)}] ${line}\n`,
  );

const running = new Set<System>();
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    process.stderr.write(`bench failover: ${signal}: stopping ${running.size} clusters\n`);
    void Promise.allSettled([...running].map((s) => s.stop())).then(() => process.exit(130));
  });
}

async function withSystem<T>(
  mode: Mode,
  managerValues: Record<string, string> | false,
  body: (sys: System) => Promise<T>,
): Promise<T> {
  const sys = await startSystem({
    nodes: 3,
    cluster: { attachDetachReconcileSyncPeriod: adcSync, nodeMonitorGracePeriod: grace },
    sim: { leaseRenewMs: heartbeatMs, statusMs: heartbeatMs },
    managers: managerValues !== false,
    values: managerValues === false ? {} : managerValues,
    progress: sayFor(mode),
  });
  running.add(sys);
  try {
    return await body(sys);
  } finally {
    running.delete(sys);
    await sys.stop();
  }
}

async function runMode(mode: Mode): Promise<ModeResult> {
  const say = sayFor(mode);
  if (mode === 'stock') {
    const result = await withSystem(mode, false, (sys) => stockCrash(sys, runs, stockBudgetS * 1000, say));
    return {
      mode,
      settings: `no manager; Deployment pods tolerate node.kubernetes.io/unreachable and not-ready for ${TOLERATION_SECONDS} s (default 300 s); detection = the node lifecycle controller's unreachable taint`,
      samples: result.samples,
      detection: summarize(result.samples.map((s) => s.detectS ?? Number.NaN)),
      crashToServing: summarize(result.samples.map((s) => s.servingS ?? Number.NaN)),
      notes: result.notes,
    };
  }
  if (mode === 'nfs') throw new Error('the nfs mode runs on its own (runNfsMode)');
  const longhorn = mode === 'longhorn';
  const samples = await withSystem(mode, modeChartValues(mode, grace), (sys) =>
    leaseholdCrashRuns(
      sys,
      runs,
      budgetS * 1000,
      say,
      adcSyncMs,
      longhorn ? { leaseMs: LONGHORN_LEASE_MS } : undefined,
    ),
  );
  return {
    mode,
    settings: modeSettings(mode, grace),
    lease: modeLease(mode),
    samples,
    detection: summarize(samples.map((s) => s.detectS ?? Number.NaN)),
    crashToServing: summarize(samples.map((s) => s.servingS ?? Number.NaN)),
    phases: {
      handoff: summarize(samples.map((s) => s.handoffS ?? Number.NaN)),
      oldDetached: summarize(samples.map((s) => s.oldDetachedS ?? Number.NaN)),
      attached: summarize(samples.map((s) => s.attachedS ?? Number.NaN)),
      acquired: summarize(samples.map((s) => s.acquiredS ?? Number.NaN)),
    },
    notes: samples.filter((s) => s.note).map((s) => `run ${s.run}: ${s.note}`),
  };
}

function fmt(x: number | undefined): string {
  return x === undefined ? '     -' : x.toFixed(1).padStart(6);
}

/** The toy share runs (--share toy): the serving-window figures of the HTTP record server. */
async function mainToy(): Promise<void> {
  const others = modes.filter((m) => m !== 'nfs');
  const settled = await inLanes(others, parallel, runMode);
  const results: ModeResult[] = [];
  settled.forEach((s, i) => {
    if (s.status === 'fulfilled') results.push(s.value);
    else
      process.stderr.write(
        `mode ${others[i]} failed: ${s.reason instanceof Error ? s.reason.message : String(s.reason)}\n`,
      );
  });
  const by = (m: Mode) => results.find((r) => r.mode === m);
  const lh = by('leasehold');
  const lines = [
    '',
    `Failover after a node crash: ${runs} runs per mode, kube-controller-manager --attach-detach-reconcile-sync-period=${adcSync}, --node-monitor-grace-period=${grace}; node heartbeat (Lease and status) every ${heartbeat}`,
    `${'mode'.padEnd(15)}detection p50/p95 (s)   crash-to-serving p50/p95 (s)   n`,
    ...results.map(
      (r) =>
        `${r.mode.padEnd(13)}  ${fmt(r.detection.p50)} ${fmt(r.detection.p95)}          ${fmt(r.crashToServing.p50)} ${fmt(r.crashToServing.p95)}            ${r.crashToServing.n}/${r.samples.length}`,
    ),
    '',
    ...results
      .filter((r) => r.mode !== 'leasehold' && lh)
      .map(
        (r) =>
          `${r.mode} / leasehold: detection x${ratio(r.detection.p50, lh?.detection.p50) ?? '?'} (p50), x${ratio(r.detection.p95, lh?.detection.p95) ?? '?'} (p95); crash-to-serving x${ratio(r.crashToServing.p50, lh?.crashToServing.p50) ?? '?'} (p50), x${ratio(r.crashToServing.p95, lh?.crashToServing.p95) ?? '?'} (p95)`,
      ),
    ...results.map((r) => `${r.mode}: ${r.settings}`),
    ...results.flatMap((r) => r.notes.map((n) => `${r.mode}: ${n}`)),
    '',
  ];
  process.stdout.write(lines.join('\n'));
  const dir = join(REPO_ROOT, 'bench', 'results');
  // Kubernetes' default timings with both handoffs side by side give the headline file;
  // anything else its own, named after its settings.
  const headline =
    adcSync === '1m' &&
    grace === '40s' &&
    heartbeat === '10s' &&
    modes.includes('leasehold') &&
    modes.includes('leasehold-va');
  const resultFile = headline
    ? 'failover.json'
    : `failover-adc-${adcSync}-grace-${grace}-hb-${heartbeat}-${modes.join('+')}.json`;
  mkdirSync(dir, { recursive: true });
  const ratios = ratiosToLeasehold(results, {
    detection: (r) => r.detection,
    crashToServing: (r) => r.crashToServing,
  });
  writeFileSync(
    join(dir, resultFile),
    `${JSON.stringify({ date: new Date().toISOString(), runs, share: 'toy', adcSync, timings: { ...timings, leases: Object.fromEntries(results.filter((r) => r.lease).map((r) => [r.mode, r.lease])) }, load: loadRecord(), results, ratios }, null, 2)}\n`,
  );
  process.stdout.write(`wrote ${join('bench', 'results', resultFile)}\n`);
}

/** The load average, sampled every 15 s for the result file (the machine is shared). */
const loadSamples: number[] = [loadavg()[0] ?? Number.NaN];
const loadStart = loadavg().map((x) => Math.round(x * 100) / 100);
const loadTimer = setInterval(() => loadSamples.push(loadavg()[0] ?? Number.NaN), 15_000);
loadTimer.unref();

function loadRecord() {
  return {
    atStart: loadStart,
    atEnd: loadavg().map((x) => Math.round(x * 100) / 100),
    oneMinute: summarizeLoad(loadSamples),
    cores: availableParallelism(),
  };
}

function fmtS(s: Summary): string {
  return `${fmt(s.p50)} ${fmt(s.p95)}`;
}

/** The five modes (or those named) with an NFS share and a real client each (--share nfs). */
async function mainNfs(others: Exclude<Mode, 'nfs'>[]): Promise<void> {
  if ('problem' in nfsOptions) return;
  const outcomes = await runNfsModes(others, {
    runs,
    budgetMs: budgetS * 1000,
    stockBudgetMs: stockBudgetS * 1000,
    adcSync,
    adcSyncMs,
    nodeMonitorGracePeriod: grace,
    heartbeat,
    nfs: nfsOptions.nfs,
    clientVersion: nfsOptions.clientVersion,
    parallel,
    sayFor,
    withSystem,
  });
  const results: NfsModeResult[] = [];
  for (const o of outcomes) {
    if (o.result) results.push(o.result);
    else process.stderr.write(`mode ${o.mode} failed: ${o.error}\n`);
  }
  const load = loadRecord();
  const lh = results.find((r) => r.mode === 'leasehold');
  const client = nfsOptions.clientVersion === 3 ? 'v3' : 'v4.0';
  const lines = [
    '',
    `Failover after a node crash, measured from the NFS client (libnfs ${client}): ${runs} crashes per mode (stock: one crash carrying ${runs} volumes), ADC sync ${adcSync}, node-monitor grace ${grace}, node heartbeat ${heartbeat}; ${parallel} mode(s) at once; load average ${load.atStart.join(' ')} at start, ${load.atEnd.join(' ')} at end (1-min mean ${load.oneMinute.mean ?? '?'}, max ${load.oneMinute.max ?? '?'})`,
    `${'mode'.padEnd(15)}detection p50/p95   crash-to-serving p50/p95   clientWriteGap p50/p95   n    capped  rejected  ackedLost  stale  overlaps`,
    ...results.map(
      (r) =>
        `${r.mode.padEnd(13)}  ${fmtS(r.detection)}      ${fmtS(r.crashToServing)}              ${fmtS(r.clientWriteGap)}            ${String(r.crashToServing.n).padStart(2)}/${r.samples.length}  ${String(r.capped).padStart(3)}  ${String(r.rejected).padStart(6)}  ${String(r.ackedWritesLost).padStart(6)}/${r.acked}  ${r.staleHandles}  ${r.serverOverlaps}`,
    ),
    '',
    ...results
      .filter((r) => r.mode !== 'leasehold' && lh)
      .map(
        (r) =>
          `${r.mode} / leasehold: crash-to-serving x${ratio(r.crashToServing.p50, lh?.crashToServing.p50) ?? '?'} (p50), x${ratio(r.crashToServing.p95, lh?.crashToServing.p95) ?? '?'} (p95); clientWriteGap x${ratio(r.clientWriteGap.p50, lh?.clientWriteGap.p50) ?? '?'} (p50), x${ratio(r.clientWriteGap.p95, lh?.clientWriteGap.p95) ?? '?'} (p95)`,
      ),
    ...results.map((r) => `${r.mode}: ${r.settings}`),
    ...results.flatMap((r) => [
      ...r.violations.map((v) => `${r.mode}: VIOLATION: ${v}`),
      ...r.notes.map((n) => `${r.mode}: ${n}`),
    ]),
    '',
  ];
  process.stdout.write(lines.join('\n'));
  const named = others.length === FIVE_MODES.length && FIVE_MODES.every((m) => others.includes(m));
  const file = `failover-nfs-client-${client}-adc-${adcSync}-nmg-${grace}-hb-${heartbeat}-${named ? 'five-modes' : others.join('+')}.json`;
  const dir = join(REPO_ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const ratios = ratiosToLeasehold(results, {
    crashToServing: (r) => r.crashToServing,
    clientWriteGap: (r) => r.clientWriteGap,
  });
  const record = {
    date: new Date().toISOString(),
    runs,
    share: 'nfs',
    adcSync,
    nodeMonitorGracePeriod: grace,
    timings: {
      ...timings,
      leases: Object.fromEntries(results.filter((r) => r.lease).map((r) => [r.mode, r.lease])),
      nfs: nfsOptions.nfs,
      client: `libnfs NFS${client}`,
      writeIntervalMs: 20,
      budgetS,
      stockBudgetS,
    },
    schedule: { parallel, order: others },
    load,
    results,
    failed: outcomes.filter((o) => o.error).map((o) => ({ mode: o.mode, error: o.error })),
    ratios,
  };
  writeFileSync(join(dir, file), `${JSON.stringify(record, null, 2)}\n`);
  process.stdout.write(`wrote ${join('bench', 'results', file)}\n`);
}

/** The issue-9 `nfs` mode (its own system and result file). */
function runNfs(): Promise<void> {
  return runNfsMode({
    runs,
    budgetMs: budgetS * 1000,
    adcSync,
    adcSyncMs,
    versions: values['nfs-versions'] ?? '',
    grace: values['nfs-grace'] ?? '',
    lease: values['nfs-lease'] ?? '',
    nodeMonitorGracePeriod: grace,
    heartbeat,
    say: sayFor('nfs'),
    withSystem: (body) => withSystem('nfs', {}, body),
  });
}

async function main(): Promise<void> {
  sayFor('bench')('compiling TypeScript to dist/');
  const tsc = spawnSync('tsc', ['-p', join(REPO_ROOT, 'tsconfig.build.json')], { stdio: 'inherit' });
  if (tsc.status !== 0) throw new Error('tsc -p tsconfig.build.json failed');
  const others = modes.filter((m): m is Exclude<Mode, 'nfs'> => m !== 'nfs');
  await Promise.all([
    modes.includes('nfs') ? runNfs() : undefined,
    others.length === 0 ? undefined : share === 'nfs' ? mainNfs(others) : mainToy(),
  ]);
  clearInterval(loadTimer);
}

await main();
