/**
 * Benchmark (not a test): the agent renewing every 2 s for 60 s against the real API
 * server (through dev/net/tcp-proxy.ts), measured side by side, in the same run and the
 * same way, with the floors it is compared against (bench/agent/processes.ts):
 *  - bare node (`node -e` that waits): what any Node process costs;
 *  - the HTTPS floor: node keeping one keep-alive HTTPS connection to the API server
 *    and sending one GET every 2 s: what any Node process talking to the API costs;
 *  - the agent as deployed: with the env the manager gives its container
 *    (AGENT_RUNTIME_ENV in manager/share-model/pod-spec.ts: NODE_OPTIONS=--jitless … and
 *    MALLOC_ARENA_MAX), and a second agent without it, to show what the settings save.
 * Bare node and the HTTPS floor run twice too, with and without the same env, so each
 * comparison is between processes started the same way.
 * Prints the figures and writes them to bench/results/agent.json.
 *
 *   node --import tsx bench/agent/run.ts   (LEASEHOLD_BENCH_SECONDS to change 60,
 *                                           LEASEHOLD_BENCH_STARTS the start-up trials, 5)
 *
 * Figures and where they come from:
 *  - API requests: kube-apiserver's apiserver_request_total{resource="leases"} (GET, PUT,
 *    POST, PATCH) before and after the window, minus the other leases' writes (counted by
 *    a watch). Both agents' requests are in it, divided by both agents' renewals; as each
 *    agent sends at least one request per renewal, 1.0 means exactly one for each.
 *  - renewals, renew latency and intervals: the watch. Latency = when the bench saw the
 *    write − the Lease's renewTime (stamped by the agent just before it sent the PUT):
 *    send, commit and watch delivery. Interval = the gap between successive renewTimes;
 *    anything the agent's event loop suffered (a GC pause included) shows in both.
 *  - GC pauses: the agent's own nodejs_gc_duration_seconds (V8's measurement), scraped.
 *  - start-up: spawn to the "lease acquired" line, over LEASEHOLD_BENCH_STARTS fresh
 *    agents started one after another (the lease is released between them), with the
 *    deployed env and without it.
 *  - RSS over time: every process's VmRSS each LEASEHOLD_BENCH_TIMELINE_SECONDS (60) of
 *    the window (run with LEASEHOLD_BENCH_SECONDS=1800 for the half-hour trend).
 *  - memory, CPU: processes.ts. During the window each agent's /metrics is scraped every
 *    15 s. After it, LEASEHOLD_BENCH_PROBE_SECONDS (20) more with kubelet-like probes of
 *    the agent (/readyz every 1 s and every 2 s, as the pod spec sets them), CPU and RSS
 *    measured again.
 * Goals (issue 14): RSS <= 50 MB and within ~8 MB of bare node, 1.0 request per renewal,
 * <= 0.2 % of one core, <= 300 ms start to lease held, no renewal delayed beyond 50 ms.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Watch } from '@kubernetes/client-node';
import { startCluster } from '../../dev/cluster/cluster.ts';
import { startTcpProxy } from '../../dev/net/tcp-proxy.ts';
import { AGENT_RUNTIME_ENV } from '../../manager/share-model/pod-spec.ts';
import {
  BARE_NODE_SCRIPT,
  bareNodeStartMs,
  cpuPercent,
  cpuTicks,
  HTTPS_FLOOR_SCRIPT,
  latencySummary,
  type Measured,
  memoryMB,
  probeOnce,
  round,
  sampleRss,
  start,
  stop,
} from './processes.ts';
import { gcPauses, leaseRequestCount, microTimeMs, promtoolVerdict } from './readings.ts';

const WINDOW_S = Number(process.env.LEASEHOLD_BENCH_SECONDS ?? 60);
const STARTS = Number(process.env.LEASEHOLD_BENCH_STARTS ?? 5);
const PROBE_S = Number(process.env.LEASEHOLD_BENCH_PROBE_SECONDS ?? 20);
const TIMELINE_S = Number(process.env.LEASEHOLD_BENCH_TIMELINE_SECONDS ?? 60);
const R_MS = 2_000;
const LEASE = 'bench-agent';
const LEASE_NO_FLAGS = 'bench-agent-no-flags';
/** The agent container's env from the manager (NODE_OPTIONS, MALLOC_ARENA_MAX). */
const DEPLOYED_ENV: Record<string, string> = Object.fromEntries(
  AGENT_RUNTIME_ENV.map((e) => [e.name, e.value ?? '']),
);
const DEPLOYED_TEXT = Object.entries(DEPLOYED_ENV)
  .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
  .join(' ');
const root = join(import.meta.dirname, '../..');

function agentEnv(kubeconfigPath: string, lease: string, extra: Record<string, string> = {}) {
  return {
    KUBECONFIG: kubeconfigPath,
    LEASEHOLD_LEASE_NAMESPACE: 'default',
    LEASEHOLD_LEASE_NAME: lease,
    LEASEHOLD_POD_NAME: `${lease}-pod`,
    LEASEHOLD_NODE_NAME: 'bench-node',
    LEASEHOLD_HTTP_PORT: '0',
    LEASEHOLD_HTTP_HOST: '127.0.0.1',
    // On the host, not in a pod: the default `pod` fence would refuse to start here.
    LEASEHOLD_FENCE_ACTION: 'none',
    ...extra,
  };
}

function httpPort(agent: Measured): number {
  for (const line of agent.lines) {
    if (line.includes('"agent started"')) return (JSON.parse(line) as { httpPort: number }).httpPort;
  }
  throw new Error(`${agent.name} logged no "agent started" line`);
}

async function get(port: number, path: string): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(2_000) });
  return res.text();
}

async function main(): Promise<void> {
  process.stderr.write('bench agent: starting the control plane\n');
  const cluster = await startCluster({ scheduler: false, controllerManager: false });
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-bench-agent-'));
  const url = new URL(cluster.server);
  const proxy = await startTcpProxy({ target: { host: url.hostname, port: Number(url.port) } });
  const running: Measured[] = [];
  try {
    const admin = JSON.parse(await readFile(cluster.kubeconfigPath, 'utf8')) as {
      clusters: Array<{ cluster: Record<string, string> }>;
      users: Array<{ user: Record<string, string> }>;
    };
    const direct = {
      ca: admin.clusters[0]?.cluster['certificate-authority'],
      user: admin.users[0]?.user ?? {},
    };
    for (const c of admin.clusters) c.cluster.server = `https://127.0.0.1:${proxy.port}`;
    const kubeconfigPath = join(dir, 'kubeconfig.json');
    await writeFile(kubeconfigPath, JSON.stringify(admin), { mode: 0o600 });

    // Every write of every lease: the agents' renewals (with their renewTime) and the others'.
    const writes = new Map<string, Array<{ seenAtMs: number; renewTimeMs: number }>>();
    let counting = false;
    const watch = await new Watch(cluster.kubeConfig).watch(
      '/apis/coordination.k8s.io/v1/leases',
      {},
      (
        type: string,
        obj: { metadata?: { namespace?: string; name?: string }; spec?: { renewTime?: string } },
      ) => {
        if (!counting || type !== 'MODIFIED') return;
        const key = `${obj.metadata?.namespace}/${obj.metadata?.name}`;
        const list = writes.get(key) ?? [];
        list.push({
          seenAtMs: Date.now(),
          renewTimeMs: obj.spec?.renewTime ? microTimeMs(obj.spec.renewTime) : Number.NaN,
        });
        writes.set(key, list);
      },
      () => {},
    );

    process.stderr.write('bench agent: floors and start-up trials\n');
    const bareStarts: number[] = [];
    for (let i = 0; i < STARTS; i++) bareStarts.push(await bareNodeStartMs());
    const floorEnv = {
      SERVER: cluster.server,
      CA: direct.ca ?? '',
      CERT: direct.user['client-certificate'] ?? '',
      KEY: direct.user['client-key'] ?? '',
    };
    const bare = start('bare node', ['-e', BARE_NODE_SCRIPT], {}, 'no line expected');
    running.push(bare);
    const bareFlags = start(
      'bare node, agent env',
      ['-e', BARE_NODE_SCRIPT],
      DEPLOYED_ENV,
      'no line expected',
    );
    running.push(bareFlags);
    const floor = start('https floor', ['-e', HTTPS_FLOOR_SCRIPT], floorEnv, 'ready');
    running.push(floor);
    const floorFlags = start(
      'https floor, agent env',
      ['-e', HTTPS_FLOOR_SCRIPT],
      { ...floorEnv, ...DEPLOYED_ENV },
      'ready',
    );
    running.push(floorFlags);
    const floorReadyMs = await floor.readyMs;
    const floorFlagsReadyMs = await floorFlags.readyMs;
    const startupTrials = async (extra: Record<string, string>, label: string): Promise<number[]> => {
      const times: number[] = [];
      for (let i = 0; i < STARTS; i++) {
        const trial = start(
          `start-up trial ${i + 1} (${label})`,
          [join(root, 'dist/agent/main.js')],
          agentEnv(kubeconfigPath, 'bench-agent-start', extra),
          '"lease acquired"',
        );
        times.push(await trial.readyMs);
        const code = await stop(trial);
        if (code !== 0) throw new Error(`start-up trial ${i + 1} (${label}) exited ${code} on SIGTERM`);
      }
      return times;
    };
    const startups = await startupTrials(DEPLOYED_ENV, 'deployed env');
    const startupsNoFlags = await startupTrials({}, 'no flags');

    const agent = start(
      'agent',
      [join(root, 'dist/agent/main.js')],
      agentEnv(kubeconfigPath, LEASE, DEPLOYED_ENV),
      '"lease acquired"',
    );
    running.push(agent);
    await agent.readyMs;
    const noFlags = start(
      'agent without the env',
      [join(root, 'dist/agent/main.js')],
      agentEnv(kubeconfigPath, LEASE_NO_FLAGS),
      '"lease acquired"',
    );
    running.push(noFlags);
    await noFlags.readyMs;
    const ports = [httpPort(agent), httpPort(noFlags)];
    // Warm-up: let start-up work (module loading, first connection) finish before measuring.
    await new Promise((r) => setTimeout(r, 5_000));

    process.stderr.write(`bench agent: measuring for ${WINDOW_S} s\n`);
    const measured = { bare, bareFlags, floor, floorFlags, agent, noFlags };
    const requestsBefore = await leaseRequestCount(cluster);
    const ticksBefore = Object.fromEntries(
      await Promise.all(Object.entries(measured).map(async ([k, p]) => [k, await cpuTicks(p.pid)] as const)),
    );
    const connectionsBefore = proxy.connections().accepted;
    const pids = Object.fromEntries(Object.entries(measured).map(([k, p]) => [k, p.pid]));
    const sampler = sampleRss(pids);
    // Prometheus-like: each agent's /metrics every 15 s.
    const scrapes = setInterval(() => {
      for (const port of ports) void get(port, '/metrics').catch(() => {});
    }, 15_000);
    const startedAt = performance.now();
    const timeline: Array<{ atS: number } & Record<string, number>> = [];
    const snapshot = async () => {
      const row: { atS: number } & Record<string, number> = {
        atS: Math.round((performance.now() - startedAt) / 1000),
      };
      for (const [k, pid] of Object.entries(pids)) row[k] = (await memoryMB(pid)).rss;
      timeline.push(row);
    };
    await snapshot();
    const timelineTimer = setInterval(() => void snapshot().catch(() => {}), TIMELINE_S * 1000);
    counting = true;
    await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
    counting = false;
    clearInterval(scrapes);
    clearInterval(timelineTimer);
    const elapsedS = (performance.now() - startedAt) / 1000;
    await snapshot();
    // The last timer snapshot may land at the same second as the final one.
    const rssTimeline = timeline.filter((row, i) => i === 0 || row.atS !== timeline[i - 1]?.atS);
    const cpu: Record<string, number> = {};
    const memory: Record<string, Awaited<ReturnType<typeof memoryMB>>> = {};
    for (const [k, p] of Object.entries(measured)) {
      cpu[k] = cpuPercent((await cpuTicks(p.pid)) - (ticksBefore[k] as number), elapsedS);
      memory[k] = await memoryMB(p.pid);
    }
    const maxSampled = sampler.stop();
    const connectionsAfter = proxy.connections();
    await new Promise((r) => setTimeout(r, 300)); // the watch delivers the last events
    const requestsAfter = await leaseRequestCount(cluster);
    watch.abort();
    const agentMetrics = await get(ports[0] as number, '/metrics');
    const noFlagsMetrics = await get(ports[1] as number, '/metrics');

    // Then kubelet-like probes of the agent, as manager/share-model/pod-spec.ts sets them: /readyz every
    // 2 s (the agent's readiness) and every 1 s (the server's liveness), a connection each.
    process.stderr.write(`bench agent: ${PROBE_S} s with kubelet-like probes\n`);
    const probeTicksBefore = await cpuTicks(agent.pid);
    const probeStatuses: number[] = [];
    const probe = () =>
      void probeOnce(ports[0] as number, '/readyz').then(
        (s) => probeStatuses.push(s),
        () => probeStatuses.push(0),
      );
    const every1 = setInterval(probe, 1_000);
    const every2 = setInterval(probe, 2_000);
    const probeStartedAt = performance.now();
    await new Promise((r) => setTimeout(r, PROBE_S * 1000));
    clearInterval(every1);
    clearInterval(every2);
    const withProbes = {
      seconds: round((performance.now() - probeStartedAt) / 1000, 1),
      probes: probeStatuses.length,
      probesAnswered200: probeStatuses.filter((s) => s === 200).length,
      cpuPercentOfOneCore: cpuPercent(
        (await cpuTicks(agent.pid)) - probeTicksBefore,
        (performance.now() - probeStartedAt) / 1000,
      ),
      memoryMB: await memoryMB(agent.pid),
    };

    const mine = new Set([`default/${LEASE}`, `default/${LEASE_NO_FLAGS}`]);
    const ours = writes.get(`default/${LEASE}`) ?? [];
    const theirs = writes.get(`default/${LEASE_NO_FLAGS}`) ?? [];
    const renewals = ours.length + theirs.length;
    const otherWrites = [...writes].filter(([k]) => !mine.has(k)).reduce((s, [, w]) => s + w.length, 0);
    const agentRequests = requestsAfter - requestsBefore - otherWrites;
    const renewTimes = (list: typeof ours) => {
      const latencies = list.map((w) => w.seenAtMs - w.renewTimeMs);
      const intervals = list.slice(1).map((w, i) => w.renewTimeMs - (list[i]?.renewTimeMs as number));
      const worstLateMs = intervals.length === 0 ? 0 : Math.max(...intervals) - R_MS;
      return {
        renewLatencyMs: latencySummary(latencies),
        renewIntervalMs: {
          ...latencySummary(intervals, [2005, 2010, 2025, 2050, 2100, 2500]),
          worstLateMs: round(worstLateMs, 2),
        },
        worstLateMs,
        maxLatencyMs: latencySummary(latencies).max ?? 0,
      };
    };
    const deployed = renewTimes(ours);
    const plain = renewTimes(theirs);
    const mem = (k: keyof typeof measured) => ({ ...memory[k], maxSampledRss: maxSampled[k] ?? null });
    const startup = latencySummary(startups, [100, 200, 300, 500, 1000]);
    const startupNoFlags = latencySummary(startupsNoFlags, [100, 200, 300, 500, 1000]);
    const gc = gcPauses(agentMetrics);
    const gcNoFlags = gcPauses(noFlagsMetrics);
    const peakRssMB = memory.agent?.hwm ?? Number.NaN;
    const bareNodeRssMB = memory.bare?.rss ?? Number.NaN;
    const result = {
      benchmark: 'agent',
      when: new Date().toISOString(),
      node: process.version,
      agentEnv: DEPLOYED_ENV,
      windowSeconds: round(elapsedS, 1),
      renewIntervalSeconds: R_MS / 1000,
      peakRssMB,
      rssMB: memory.agent?.rss,
      bareNodeRssMB,
      bareNodePeakRssMB: memory.bare?.hwm,
      bareNodeWithAgentEnvRssMB: memory.bareFlags?.rss,
      agentOverBareNodeMB: round(peakRssMB - bareNodeRssMB, 1),
      httpsFloorPeakRssMB: memory.floor?.hwm,
      httpsFloorWithAgentEnvPeakRssMB: memory.floorFlags?.hwm,
      agentOverHttpsFloorWithAgentEnvMB: round(peakRssMB - (memory.floorFlags?.hwm ?? Number.NaN), 1),
      agentWithoutEnvPeakRssMB: memory.noFlags?.hwm,
      memoryMB: {
        agent: mem('agent'),
        agentWithoutEnv: mem('noFlags'),
        bareNode: mem('bare'),
        bareNodeWithAgentEnv: mem('bareFlags'),
        httpsFloor: mem('floor'),
        httpsFloorWithAgentEnv: mem('floorFlags'),
      },
      rssTimelineMB: rssTimeline,
      renewals: { agent: ours.length, agentWithoutEnv: theirs.length },
      apiRequestsByAgents: agentRequests,
      requestsPerRenewal: renewals === 0 ? null : round(agentRequests / renewals, 3),
      otherLeaseWritesSubtracted: otherWrites,
      proxyConnectionsDuringWindow: connectionsAfter.accepted - connectionsBefore,
      proxyConnectionsOpenAtEnd: connectionsAfter.open,
      cpuPercentOfOneCore: cpu.agent,
      cpuPercentOfOneCoreByProcess: cpu,
      startToLeaseHeldMs: startup,
      startToLeaseHeldWithoutEnvMs: startupNoFlags,
      bareNodeStartToExitMs: latencySummary(bareStarts, [50, 100, 200, 300]),
      httpsFloorStartToFirstAnswerMs: round(floorReadyMs, 1),
      httpsFloorWithAgentEnvStartToFirstAnswerMs: round(floorFlagsReadyMs, 1),
      renewLatencyMs: deployed.renewLatencyMs,
      renewIntervalMs: deployed.renewIntervalMs,
      agentGcPauses: gc,
      agentWithoutEnv: {
        renewLatencyMs: plain.renewLatencyMs,
        renewIntervalMs: plain.renewIntervalMs,
        gcPauses: gcNoFlags,
      },
      agentWithKubeletProbes: withProbes,
      agentMetricsPromtool: promtoolVerdict(agentMetrics),
      goals: {
        peakRssMB: 50,
        overBareNodeMB: 8,
        cpuPercentOfOneCore: 0.2,
        requestsPerRenewal: 1,
        startToLeaseHeldMs: 300,
        renewDelayMs: 50,
      },
      met: {
        peakRss: peakRssMB <= 50,
        overBareNode: peakRssMB - bareNodeRssMB <= 8,
        cpu: (cpu.agent ?? Number.POSITIVE_INFINITY) <= 0.2,
        requestsPerRenewal: renewals > 0 && agentRequests === renewals,
        startToLeaseHeld: (startup.max ?? Number.POSITIVE_INFINITY) <= 300,
        noRenewalDelayedBeyond50ms: deployed.worstLateMs <= 50 && deployed.maxLatencyMs <= 50,
      },
      exitCodesOnSigterm: {} as Record<string, number | null>,
    };
    for (const [k, p] of Object.entries(measured)) result.exitCodesOnSigterm[k] = await stop(p);
    running.length = 0;
    await mkdir(join(root, 'bench/results'), { recursive: true });
    await writeFile(join(root, 'bench/results/agent.json'), `${JSON.stringify(result, null, 2)}\n`);
    const lat = result.renewLatencyMs;
    const latNo = plain.renewLatencyMs;
    const m = result.memoryMB;
    process.stdout.write(
      [
        `agent benchmark, ${result.windowSeconds} s, renew interval 2 s, ${process.version}; agent env ${DEPLOYED_TEXT}`,
        '  peak RSS MB          with the agent env | without',
        `    agent              ${m.agent.hwm} | ${m.agentWithoutEnv.hwm}   (goal <= 50, <= bare node + 8)`,
        `    https floor        ${m.httpsFloorWithAgentEnv.hwm} | ${m.httpsFloor.hwm}`,
        `    bare node          ${m.bareNodeWithAgentEnv.hwm} | ${m.bareNode.hwm}`,
        `  private (RssAnon) MB: agent ${m.agent.anon} | ${m.agentWithoutEnv.anon}; floor ${m.httpsFloorWithAgentEnv.anon} | ${m.httpsFloor.anon}; bare ${m.bareNodeWithAgentEnv.anon} | ${m.bareNode.anon}`,
        `  renewals ${ours.length} + ${theirs.length}; API requests ${agentRequests} -> ${result.requestsPerRenewal} per renewal (goal 1.0)`,
        `  proxy connections in window ${result.proxyConnectionsDuringWindow} (open at end ${connectionsAfter.open})`,
        `  CPU % of one core: agent ${cpu.agent} | without env ${cpu.noFlags} | floor ${cpu.floorFlags} | ${cpu.floor} | bare ${cpu.bareFlags} | ${cpu.bare} (goal <= 0.2)`,
        `  start to lease held: p50 ${startup.p50} ms, max ${startup.max} ms over ${STARTS} (goal <= 300); without env p50 ${startupNoFlags.p50}, max ${startupNoFlags.max}; bare node start to exit p50 ${result.bareNodeStartToExitMs.p50} ms`,
        `  renew latency (watch): p50 ${lat.p50} p99 ${lat.p99} max ${lat.max} ms, interval worst late ${result.renewIntervalMs.worstLateMs} ms; GCs ${gc.count} (over 10 ms: ${gc.over10ms})`,
        `    without env: p50 ${latNo.p50} p99 ${latNo.p99} max ${latNo.max} ms, worst late ${plain.renewIntervalMs.worstLateMs} ms; GCs ${gcNoFlags.count} (over 10 ms: ${gcNoFlags.over10ms})`,
        `  RSS timeline (MB, agent | without env | floor with env | bare): ${rssTimeline.map((r) => `${r.atS}s ${r.agent}|${r.noFlags}|${r.floorFlags}|${r.bare}`).join(', ')}`,
        `  with kubelet-like probes (1.5/s): CPU ${withProbes.cpuPercentOfOneCore} %, RSS ${withProbes.memoryMB.rss} MB (peak ${withProbes.memoryMB.hwm}), ${withProbes.probesAnswered200}/${withProbes.probes} answered 200`,
        `  exit codes on SIGTERM ${JSON.stringify(result.exitCodesOnSigterm)}`,
        '  written to bench/results/agent.json',
        '',
      ].join('\n'),
    );
  } finally {
    for (const p of running) p.child.kill('SIGKILL');
    await proxy.close();
    await cluster.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
