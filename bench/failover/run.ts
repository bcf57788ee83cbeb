/**
 * The failover benchmark (not a test): node crashes on the local cluster, measured for
 *   leasehold  the chart's defaults (lease 6 s, renew 2 s, deadline 4 s; volume handoff
 *              volumes-in-use: the lost node's status.volumesInUse entry removed)
 *   leasehold-va  the same with manager.volumeHandoff=volume-attachment (the
 *              VolumeAttachment deleted; attached elsewhere after the controller's sync)
 *   longhorn   Longhorn v1.7's timings (renew 3 s, lease 7 s) given to leasehold's
 *              agent and manager; Longhorn's 1 s periodic wall-clock check is emulated
 *              from each run's last renewTime (see stats.ts), the rest is measured
 *   stock      no manager: Deployments whose pods tolerate an unreachable node for 30 s
 *              (instead of the default 300 s); one crash carrying `runs` volumes, capped
 *   leasehold-oos  (only when named in --modes) the chart's defaults plus the opt-in
 *              out-of-service taint (manager.outOfServiceTaint=true, nodeLeaseGrace = the
 *              cluster's node-monitor grace) on top of volume-attachment
 * On Kubernetes' default timings unless told otherwise: attach-detach reconcile sync 1m,
 * node-monitor grace 40s, the node heartbeat (Lease and status) every 10 s. Each result
 * file records the timings it ran under.
 *   nfs        (only when named in --modes) the client's view: a share on the shipped NFS
 *              server and a real NFS client writing through its Service address; each
 *              crash measured as clientWriteGap, acknowledged writes lost, stale handles
 *              (nfs-client-runs.ts; --nfs-versions 3|4.0,4.1,4.2 (the client speaks v3
 *              with 3, else v4.0), --nfs-grace, --nfs-lease; own result file
 *              failover-nfs-<v3|v4.0>-adc-sync-<d>-grace-<g>-nmg-<grace>.json)
 * The modes run at once, each on its own control plane with 3 simulated nodes
 * (timer-dominated figures; the machine is mostly idle while they wait).
 * Prints p50/p95 of detection and crash-to-serving and the ratios between modes from
 * this same run; writes bench/results/failover.json.
 *
 *   npm run bench -- failover [--runs N] [--adc-sync 1m] [--node-monitor-grace 40s]
 *                             [--heartbeat 10s] [--budget 150] [--stock-budget 600]
 *                             [--modes leasehold,leasehold-va,longhorn,stock,leasehold-oos,nfs]
 *                             [--nfs-versions 3] [--nfs-grace 15s] [--nfs-lease 10s]
 * Results: bench/results/failover.json on the default timings with both leasehold and
 * leasehold-va in the run, else bench/results/failover-<adc>-<grace>-<hb>-<modes>.json.
 * Exit codes: 0 done (even when capped), 2 bad arguments.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { REPO_ROOT } from '../../dev/system/helm-install.ts';
import { type System, startSystem } from '../../dev/system/system.ts';
import { type CrashSample, leaseholdCrashRuns } from './leasehold-runs.ts';
import { runNfsMode } from './nfs-client-runs.ts';
import { ratio, type Summary, summarize } from './stats.ts';
import { stockCrash, TOLERATION_SECONDS } from './stock-runs.ts';

const MODES = ['leasehold', 'leasehold-va', 'longhorn', 'stock', 'leasehold-oos', 'nfs'] as const;
type Mode = (typeof MODES)[number];

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
    `bench failover: ${problem}\nusage: bench/failover/run.ts [--runs N (1-50, default 10)] [--adc-sync DURATION (default 1m)] [--node-monitor-grace DURATION (default 40s)] [--heartbeat DURATION (node Lease and status period, default 10s)] [--budget SECONDS (per leasehold crash, default 150)] [--stock-budget SECONDS (default 600)] [--modes ${MODES.join(',')}] [--nfs-versions 3|4.0,4.1,4.2 (default 3)] [--nfs-grace 15s] [--nfs-lease 10s]\n`,
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
  const longhorn = mode === 'longhorn';
  const oos = mode === 'leasehold-oos';
  const va = mode === 'leasehold-va';
  const chartValues: Record<string, string> = longhorn
    ? { 'agent.leaseDuration': '7s', 'agent.renewInterval': '3s', 'agent.renewDeadline': '5s' }
    : oos
      ? {
          'manager.outOfServiceTaint': 'true',
          'manager.nodeLeaseGrace': grace,
          'manager.volumeHandoff': 'volume-attachment',
        }
      : va
        ? { 'manager.volumeHandoff': 'volume-attachment' }
        : {};
  const samples = await withSystem(mode, chartValues, (sys) =>
    leaseholdCrashRuns(sys, runs, budgetS * 1000, say, adcSyncMs, longhorn ? { leaseMs: 7000 } : undefined),
  );
  return {
    mode,
    settings: longhorn
      ? 'leasehold agent+manager with lease 7 s, renew 3 s (deadline 5 s), volume handoff volumes-in-use; detection = emulated Longhorn verdict: first 1 s tick after renewTime + 7 s (wall clock); crash-to-serving = measured + (emulated - measured detection)'
      : `leasehold chart defaults: lease 6 s, renew 2 s, deadline 4 s; volume handoff ${oos || va ? 'volume-attachment (VolumeAttachment deleted)' : 'volumes-in-use (default)'}${oos ? `; out-of-service taint on (node lease grace ${grace})` : ''}; detection = status.lastFailover.detectedAt`,
    lease: longhorn
      ? { duration: '7s', renewInterval: '3s', renewDeadline: '5s' }
      : { duration: '6s', renewInterval: '2s', renewDeadline: '4s' },
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

async function main(): Promise<void> {
  sayFor('bench')('compiling TypeScript to dist/');
  const tsc = spawnSync('tsc', ['-p', join(REPO_ROOT, 'tsconfig.build.json')], { stdio: 'inherit' });
  if (tsc.status !== 0) throw new Error('tsc -p tsconfig.build.json failed');
  const nfs = modes.includes('nfs')
    ? runNfsMode({
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
      })
    : undefined;
  const others = modes.filter((m) => m !== 'nfs');
  const settled = await Promise.allSettled(others.map((m) => runMode(m)));
  await nfs;
  if (others.length === 0) return;
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
  const ratios = Object.fromEntries(
    results
      .filter((r) => r.mode !== 'leasehold' && lh)
      .map((r) => [
        `${r.mode}/leasehold`,
        {
          detectionP50: ratio(r.detection.p50, lh?.detection.p50),
          detectionP95: ratio(r.detection.p95, lh?.detection.p95),
          crashToServingP50: ratio(r.crashToServing.p50, lh?.crashToServing.p50),
          crashToServingP95: ratio(r.crashToServing.p95, lh?.crashToServing.p95),
        },
      ]),
  );
  writeFileSync(
    join(dir, resultFile),
    `${JSON.stringify({ date: new Date().toISOString(), runs, adcSync, timings, results, ratios }, null, 2)}\n`,
  );
  process.stdout.write(`wrote ${join('bench', 'results', resultFile)}\n`);
}

await main();
