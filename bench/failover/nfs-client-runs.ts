/**
 * The `nfs` mode of the failover benchmark: node crashes measured from the client's side
 * (issue 9). One share on the shipped NFS server (the default server, `spec.nfs` as
 * given), one long-lived real NFS client (dev/nfs-client nfs-writer, libnfs; NFSv3 or
 * NFSv4.0) writing a numbered, committed record every 20 ms through the Service's stable
 * address, and `runs` times: crash the node serving the share, wait until writes resume
 * (20 acknowledged after the crash) or `budgetMs` passes, heal (reboot) the node, wait
 * until it is Ready, repeat. Each crash comes after a random pause of up to the
 * attach-detach controller's sync period (as in leasehold-runs.ts).
 *
 * Per crash (seconds since the crash): detection (status.lastFailover.detectedAt, first
 * value), replacement pod created, volume attached to the new node (the sim's attacher),
 * server process started and server Ready (the pod's Ready condition, polled), writes
 * resumed, and the clientWriteGap (write-analysis.ts: last ack before the crash to the
 * first after it). Over the run: ackedWritesLost (every acknowledged record read back
 * byte for byte from the volume at the end), duplicates, stale handles, and the
 * no-two-servers check on the ganesha processes the kubelets ran
 * (dev/system/server-process-windows.ts): `serverOverlaps` must be 0.
 * Not measured: a kernel NFS client (none on this machine); NFSv4.1 (no user-space
 * client here reclaims v4.1 state, see dev/nfs-client/README.md).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import { PodTracker } from '../../dev/system/failover-facts.ts';
import { REPO_ROOT } from '../../dev/system/helm-install.ts';
import {
  analyzeShareWriter,
  createNfsShare,
  readyNfsPod,
  ServerProcessTracker,
  type ShareWriter,
  startShareWriter,
  waitReadyNfsPod,
} from '../../dev/system/nfs-share.ts';
import { pvName } from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE, type System } from '../../dev/system/system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { withDeadline } from '../../lib/kube-client.ts';
import { lastRenewMs } from './leasehold-runs.ts';
import {
  clientFlowing,
  clientStalledBeforeCrashS,
  crashToServing,
  emulateLonghornVerdict,
  round,
  type Summary,
  summarize,
  victimStillServing,
} from './stats.ts';

const SHARE = 'benchnfs';
const FILE = 'records.bin';

export interface NfsSettingsUsed {
  versions: string[];
  gracePeriod: string;
  leaseLifetime: string;
}

export interface NfsCrashSample {
  run: number;
  node: string;
  detectS?: number;
  replacementCreatedS?: number;
  attachedS?: number;
  /** The server container started (with the entrypoint's lease gate: before the lease is held). */
  serverStartedS?: number;
  /** The entrypoint is up and asks the agent for the lease (its first line of the gate; not before this change). */
  gateBeganS?: number;
  /** The replacement's agent logged `lease acquired`. */
  agentAcquiredS?: number;
  /** The entrypoint started ganesha.nfsd (its `ganesha started` log line). */
  ganeshaStartedS?: number;
  serverReadyS?: number;
  /** Crash to the client's first acknowledged write after it: crash-to-serving, as the client sees it. */
  writesResumedS?: number;
  clientWriteGapS?: number;
  /** The client's failed calls between the crash and the resume: [s since the crash, op, kind]. */
  clientErrors?: Array<[number, string, string]>;
  /** The client's (re)connections in that time (mount + open succeeded), s since the crash. */
  clientConnectedS?: number[];
  /** measured; capped (not served within the budget); rejected (not this crash's failover, see note); not-crashed. */
  outcome?: 'measured' | 'capped' | 'rejected' | 'not-crashed';
  note?: string;
}

export interface NfsClientResult {
  /** `nfs` (its own file), or the failover mode this is (leasehold, leasehold-va, ...). */
  mode: string;
  settings: string;
  timings: {
    adcSync: string;
    nodeMonitorGracePeriod: string;
    nodeHeartbeatPeriod?: string;
    lease: { duration: string; renewInterval: string; renewDeadline: string };
    nfs: NfsSettingsUsed;
    client: string;
    writeIntervalMs: number;
  };
  samples: NfsCrashSample[];
  clientWriteGap: Summary;
  detection: Summary;
  /** Crash to the client's first acknowledged write after it (samples' writesResumedS). */
  crashToServing: Summary;
  crashToServerReady: Summary;
  /** Crash to the server container's start, and to ganesha's (samples' serverStartedS, ganeshaStartedS). */
  crashToServerContainerStarted: Summary;
  crashToGaneshaStarted: Summary;
  crashToAgentAcquired: Summary;
  ackedWritesLost: number;
  acked: number;
  duplicates: number;
  staleHandles: number;
  serverOverlaps: number;
  violations: string[];
  notes: string[];
}

async function nodeReady(sys: System, node: string): Promise<boolean> {
  const n = await sys.core.readNode({ name: node }, withDeadline(5_000));
  return n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

const sinceS = (wallMs: number | undefined, crashWallMs: number) =>
  wallMs === undefined ? undefined : round((wallMs - crashWallMs) / 1000);

/**
 * The node to crash, chosen so that the crash measures a failover: a Ready server pod,
 * the client's writes flowing again (10 more acks), the random pause, then the same pod
 * still Ready and the client acknowledged within the tolerance (stats.ts
 * victimStillServing, clientFlowing; the Ready condition can lag a share that already
 * moved or stalled). Up to 5 tries; else the problem, naming what was not so (never
 * thrown: one stalled run must not cost the mode its other samples).
 */
async function steadyVictim(
  sys: System,
  w: ShareWriter,
  phaseSpreadMs: number,
): Promise<{ pod: string; node: string } | { problem: string; node?: string }> {
  let chosen: { pod: string; node: string } | undefined;
  let last = 'no try made';
  for (let tries = 0; tries < 5; tries++) {
    try {
      chosen = await waitReadyNfsPod(sys, SHARE, 120_000);
      await w.writer.waitForMoreAcks(10, 60_000);
    } catch (err) {
      last = err instanceof Error ? err.message : String(err);
      continue;
    }
    // The random pause only once: later tries only re-check.
    if (tries === 0) await sleep(Math.random() * phaseSpreadMs);
    const now = await readyNfsPod(sys, SHARE);
    const acks = w.writer.events.filter((e) => e.event === 'ack');
    const lastAck = acks[acks.length - 1]?.ms;
    if (victimStillServing(chosen, now) && clientFlowing(lastAck, monotonicMs())) return chosen;
    last = !victimStillServing(chosen, now)
      ? `the Ready server moved from ${chosen.pod} to ${now?.pod ?? 'none'} during the pause`
      : `the client's last acknowledged write was ${lastAck === undefined ? 'never' : `${round((monotonicMs() - lastAck) / 1000)} s ago`}`;
  }
  return {
    problem: `no steady client through one Ready server of ${SHARES_NAMESPACE}/${SHARE} in 5 tries (last: ${last})`,
    ...(chosen ? { node: chosen.node } : {}),
  };
}

export async function nfsClientCrashRuns(
  sys: System,
  opts: {
    runs: number;
    budgetMs: number;
    phaseSpreadMs: number;
    adcSync: string;
    nodeMonitorGracePeriod: string;
    nfs: NfsSettingsUsed;
    clientVersion: 3 | 4;
    say: (line: string) => void;
    /** The failover mode measured (default `nfs`), its settings line and lease timings. */
    mode?: string;
    settings?: string;
    lease?: { duration: string; renewInterval: string; renewDeadline: string };
    nodeHeartbeatPeriod?: string;
    /** Longhorn's 1 s wall-clock verdict emulated (stats.ts) from each crash's last renewTime. */
    longhorn?: { leaseMs: number };
  },
): Promise<NfsClientResult> {
  const { say } = opts;
  const lease = opts.lease ?? { duration: '6s', renewInterval: '2s', renewDeadline: '4s' };
  const tracker = new ServerProcessTracker(sys, SHARE);
  await createNfsShare(sys, SHARE, { nfs: opts.nfs });
  await waitReadyNfsPod(sys, SHARE, 180_000);
  const w = await startShareWriter(sys, SHARE, opts.clientVersion, FILE);
  const samples: NfsCrashSample[] = [];
  const faults: number[] = [];
  try {
    await w.writer.waitForAck(50, 120_000);
    for (let run = 1; run <= opts.runs; run++) {
      const victim = await steadyVictim(sys, w, opts.phaseSpreadMs);
      if ('problem' in victim) {
        // Not crashed: recorded as a sample without figures, the next run proceeds.
        samples.push({
          run,
          node: victim.node ?? '',
          outcome: 'not-crashed',
          note: `not crashed: ${victim.problem}`,
        });
        say(`run ${run}/${opts.runs}: not crashed: ${victim.problem}`);
        continue;
      }
      const before = victim;
      const pods = new PodTracker(sys, SHARE);
      const crashWall = Date.now();
      const crashMono = monotonicMs();
      faults.push(crashMono);
      await sys.sim.node(before.node).crash();
      const renewMs = opts.longhorn ? await lastRenewMs(sys, SHARE).catch(() => undefined) : undefined;
      const sample: NfsCrashSample = { run, node: before.node };
      const deadline = performance.now() + opts.budgetMs;
      let readyAt: number | undefined;
      let resumed = false;
      while (performance.now() < deadline) {
        if (readyAt === undefined && (await readyNfsPod(sys, SHARE, before.pod))) readyAt = Date.now();
        if (w.writer.events.filter((e) => e.event === 'ack' && e.ms > crashMono).length >= 20) {
          resumed = true;
          if (readyAt !== undefined) break;
        }
        await sleep(100);
      }
      await pods.stop();
      if (!resumed) sample.note = `writes did not resume within ${opts.budgetMs / 1000} s`;
      const ff = pods.firstFailover;
      // NB: a field of an earlier failover may still stand next to this one's detectedAt.
      const parse = (v: string | undefined) => {
        const ms = v === undefined ? undefined : Date.parse(v);
        return ms !== undefined && ms >= crashWall - 1_000 ? ms : undefined;
      };
      const setIf = <K extends keyof NfsCrashSample>(k: K, v: NfsCrashSample[K] | undefined) => {
        if (v !== undefined) sample[k] = v;
      };
      setIf('detectS', sinceS(parse(ff.detectedAt), crashWall));
      // Else the pod tracker's first sight of a pod other than the old one (polled every 100 ms).
      const seen = [...pods.created].filter(([name]) => name !== before.pod).map(([, at]) => at.getTime());
      setIf(
        'replacementCreatedS',
        sinceS(
          parse(ff.replacementCreatedAt) ?? (seen.length > 0 ? Math.min(...seen) : undefined),
          crashWall,
        ),
      );
      const attach = sys.sim.attacher.timings.find(
        (t) => t.op === 'attach' && t.pv === pvName(SHARE) && t.doneWall.getTime() > crashWall,
      );
      setIf('attachedS', sinceS(attach?.doneWall.getTime(), crashWall));
      const started = tracker.windows().find((x) => x.startMonoMs > crashMono);
      setIf('serverStartedS', started ? round((started.startMonoMs - crashMono) / 1000) : undefined);
      const logged = (msg: string) =>
        started ? sinceS(tracker.logLineWall(started.id, msg), crashWall) : undefined;
      setIf('gateBeganS', logged('waiting for the agent to hold the lease'));
      setIf(
        'agentAcquiredS',
        started ? sinceS(tracker.logLineWall(started.id, 'lease acquired', 'agent'), crashWall) : undefined,
      );
      setIf('ganeshaStartedS', logged('ganesha started'));
      setIf('serverReadyS', sinceS(readyAt, crashWall));
      const gap = analyzeShareWriter(sys, SHARE, w, [crashMono]).clientWriteGaps[0];
      setIf(
        'writesResumedS',
        gap?.resumedAfterMs === undefined ? undefined : round(gap.resumedAfterMs / 1000),
      );
      setIf('clientWriteGapS', gap?.gapMs === undefined ? undefined : round(gap.gapMs / 1000));
      // The client's crash-to-serving, judged (a resume without a failover is no sample).
      const judged = crashToServing(crashMono, gap?.firstAck?.ms, opts.budgetMs);
      if (judged.kind !== 'measured') {
        delete sample.writesResumedS;
        delete sample.clientWriteGapS;
        sample.note ??= judged.reason;
      } else if (clientStalledBeforeCrashS(judged.s, sample.clientWriteGapS) !== undefined) {
        sample.note ??= `the client had been without an acknowledged write for ${clientStalledBeforeCrashS(judged.s, sample.clientWriteGapS)} s at the crash: the gap is an earlier stall's, not this crash's`;
        delete sample.writesResumedS;
        delete sample.clientWriteGapS;
      } else if (sample.detectS === undefined) {
        delete sample.writesResumedS;
        delete sample.clientWriteGapS;
        sample.note ??= `writes resumed ${judged.s} s after the crash but no failover was recorded: the crashed node was not serving the share`;
      }
      if (opts.longhorn)
        emulateLonghornVerdict(
          sample,
          ['writesResumedS', 'clientWriteGapS', 'serverReadyS'] as const,
          renewMs,
          opts.longhorn.leaseMs,
          crashWall,
          crashWall + Math.random() * 1000,
        );
      const resumedMono = gap?.firstAck?.ms ?? Number.POSITIVE_INFINITY;
      const between = w.writer.events.filter((e) => e.ms > crashMono && e.ms <= resumedMono);
      sample.clientErrors = between.flatMap((e) =>
        e.event === 'error'
          ? [[round((e.ms - crashMono) / 1000), e.op, e.kind] as [number, string, string]]
          : [],
      );
      sample.clientConnectedS = between.flatMap((e) =>
        e.event === 'connected' ? [round((e.ms - crashMono) / 1000)] : [],
      );
      sample.outcome = sample.writesResumedS !== undefined ? 'measured' : resumed ? 'rejected' : 'capped';
      samples.push(sample);
      say(
        `run ${run}/${opts.runs}: crashed ${before.node}: detected ${sample.detectS ?? '?'} s, replacement ${sample.replacementCreatedS ?? '?'} s, attached ${sample.attachedS ?? '?'} s, server container started ${sample.serverStartedS ?? '?'} s, gate began ${sample.gateBeganS ?? '-'} s, agent acquired ${sample.agentAcquiredS ?? '?'} s, ganesha started ${sample.ganeshaStartedS ?? '?'} s, Ready ${sample.serverReadyS ?? '?'} s, writes resumed ${sample.writesResumedS ?? '?'} s; clientWriteGap ${sample.clientWriteGapS ?? '?'} s${sample.note ? ` (${sample.note})` : ''}`,
      );
      sys.sim.node(before.node).heal();
      const readyDeadline = performance.now() + 60_000;
      while (performance.now() < readyDeadline && !(await nodeReady(sys, before.node).catch(() => false)))
        await sleep(250);
    }
  } finally {
    await w.writer.stop();
    await tracker.stop();
  }
  const report = analyzeShareWriter(sys, SHARE, w, faults);
  const overlaps = overlappingWindows(tracker.windows(), monotonicMs());
  const violations = [
    ...report.violations,
    ...overlaps.map(([a, b]) => `two ganesha servers alive at once: ${a.id} and ${b.id}`),
  ];
  const client = opts.clientVersion === 3 ? 'libnfs NFSv3' : 'libnfs NFSv4.0';
  return {
    mode: opts.mode ?? 'nfs',
    settings: `${opts.settings ?? 'leasehold chart defaults (lease 6 s, renew 2 s, deadline 4 s)'}; default NFS server with spec.nfs versions ${opts.nfs.versions.join(',')}, grace ${opts.nfs.gracePeriod}, lease ${opts.nfs.leaseLifetime}; client ${client}, a committed 64-byte record every 20 ms through the Service address; crash-to-serving = crash to the client's first acknowledged write after it; clientWriteGap = last acknowledged write before the crash to the first after it`,
    timings: {
      adcSync: opts.adcSync,
      nodeMonitorGracePeriod: opts.nodeMonitorGracePeriod,
      ...(opts.nodeHeartbeatPeriod ? { nodeHeartbeatPeriod: opts.nodeHeartbeatPeriod } : {}),
      lease,
      nfs: opts.nfs,
      client,
      writeIntervalMs: 20,
    },
    samples,
    clientWriteGap: summarize(samples.map((s) => s.clientWriteGapS ?? Number.NaN)),
    detection: summarize(samples.map((s) => s.detectS ?? Number.NaN)),
    crashToServing: summarize(samples.map((s) => s.writesResumedS ?? Number.NaN)),
    crashToServerReady: summarize(samples.map((s) => s.serverReadyS ?? Number.NaN)),
    crashToServerContainerStarted: summarize(samples.map((s) => s.serverStartedS ?? Number.NaN)),
    crashToGaneshaStarted: summarize(samples.map((s) => s.ganeshaStartedS ?? Number.NaN)),
    crashToAgentAcquired: summarize(samples.map((s) => s.agentAcquiredS ?? Number.NaN)),
    ackedWritesLost: report.ackedWritesLost,
    acked: report.acked,
    duplicates: report.duplicates.length,
    staleHandles: report.staleHandles,
    serverOverlaps: overlaps.length,
    violations,
    notes: samples.filter((s) => s.note).map((s) => `run ${s.run}: ${s.note}`),
  };
}

/** The lines the benchmark prints for an `nfs` result. */
export function nfsResultLines(r: NfsClientResult): string[] {
  const f = (s: Summary) =>
    `p50 ${s.p50 ?? '-'} s / p95 ${s.p95 ?? '-'} s / max ${s.max ?? '-'} s (n ${s.n})`;
  return [
    `${r.mode} (${r.timings.client}, versions ${r.timings.nfs.versions.join(',')}, grace ${r.timings.nfs.gracePeriod}, lease ${r.timings.nfs.leaseLifetime}; ADC sync ${r.timings.adcSync}): ${r.samples.length} crashes`,
    `  clientWriteGap ${f(r.clientWriteGap)}`,
    `  crash-to-serving (the client's first acknowledged write) ${f(r.crashToServing)}`,
    `  detection ${f(r.detection)}; crash to server Ready ${f(r.crashToServerReady)}`,
    `  crash to server container started ${f(r.crashToServerContainerStarted)}; to the agent's acquisition ${f(r.crashToAgentAcquired)}; to ganesha started ${f(r.crashToGaneshaStarted)}`,
    `  ackedWritesLost ${r.ackedWritesLost} of ${r.acked} acknowledged; duplicates ${r.duplicates}; staleHandles ${r.staleHandles}; serverOverlaps ${r.serverOverlaps}`,
    ...r.violations.map((v) => `  VIOLATION: ${v}`),
    ...r.notes.map((n) => `  ${n}`),
  ];
}

const NFS_VERSION_LIST = ['3', '4.0', '4.1', '4.2'];

/**
 * The --nfs-* options checked (pure): the settings and the client's version, or the
 * problem naming the option and its rule.
 */
export function parseNfsOptions(o: {
  versions: string;
  grace: string;
  lease: string;
}): { nfs: NfsSettingsUsed; clientVersion: 3 | 4 } | { problem: string } {
  const versions = o.versions.split(',').filter((v) => v !== '');
  for (const v of versions)
    if (!NFS_VERSION_LIST.includes(v))
      return { problem: `--nfs-versions=${o.versions}: ${v} is not one of ${NFS_VERSION_LIST.join(', ')}` };
  if (!versions.includes('3') && !versions.includes('4.0'))
    return {
      problem: `--nfs-versions=${o.versions}: needs 3 or 4.0 (the libnfs client speaks NFSv3 and NFSv4.0 only)`,
    };
  for (const [name, v] of [
    ['--nfs-grace', o.grace],
    ['--nfs-lease', o.lease],
  ] as const)
    if (!/^\d+s$/.test(v)) return { problem: `${name}=${v}: must be whole seconds like 15s` };
  return {
    nfs: { versions, gracePeriod: o.grace, leaseLifetime: o.lease },
    clientVersion: versions.includes('3') ? 3 : 4,
  };
}

/**
 * The `nfs` mode as bench/failover/run.ts calls it: checks its options (exit 2 naming
 * the option), runs the crashes on a system of its own, prints the figures and writes
 * bench/results/failover-nfs-<client>-adc-sync-<d>-grace-<g>-nmg-<node-monitor grace>.json. A failure is
 * printed, not thrown (the other modes' results still count).
 */
export async function runNfsMode(o: {
  runs: number;
  budgetMs: number;
  adcSync: string;
  adcSyncMs: number;
  versions: string;
  grace: string;
  lease: string;
  /** The cluster's timings this run is on (recorded with the result). */
  nodeMonitorGracePeriod: string;
  heartbeat: string;
  say: (line: string) => void;
  withSystem: <T>(body: (sys: System) => Promise<T>) => Promise<T>;
}): Promise<void> {
  const parsed = parseNfsOptions(o);
  if ('problem' in parsed) {
    process.stderr.write(`bench failover: ${parsed.problem}\n`);
    process.exit(2);
  }
  const { clientVersion } = parsed;
  try {
    const result = await o.withSystem((sys) =>
      nfsClientCrashRuns(sys, {
        runs: o.runs,
        budgetMs: o.budgetMs,
        phaseSpreadMs: o.adcSyncMs,
        adcSync: o.adcSync,
        nodeMonitorGracePeriod: o.nodeMonitorGracePeriod,
        nfs: parsed.nfs,
        clientVersion,
        say: o.say,
      }),
    );
    process.stdout.write(`\n${nfsResultLines(result).join('\n')}\n`);
    const file = `failover-nfs-${clientVersion === 3 ? 'v3' : 'v4.0'}-adc-sync-${o.adcSync}-grace-${o.grace}-nmg-${o.nodeMonitorGracePeriod}.json`;
    const dir = join(REPO_ROOT, 'bench', 'results');
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, file),
      `${JSON.stringify({ date: new Date().toISOString(), runs: o.runs, adcSync: o.adcSync, nodeMonitorGracePeriod: o.nodeMonitorGracePeriod, nodeHeartbeat: o.heartbeat, result }, null, 2)}\n`,
    );
    process.stdout.write(`wrote ${join('bench', 'results', file)}\n`);
  } catch (err) {
    process.stderr.write(`mode nfs failed: ${err instanceof Error ? err.message : String(err)}\n`);
  }
}
