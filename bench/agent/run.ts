/**
 * Benchmark (not a test): one agent renewing every 2 s for 60 s against the real API
 * server, through dev/net/tcp-proxy.ts. Prints the figures and writes them to
 * bench/results/agent.json.
 *
 *   node --import tsx bench/agent/run.ts            (LEASEHOLD_BENCH_SECONDS to change 60)
 *
 * What is measured, and where (never by the agent's own counters):
 *  - API requests: kube-apiserver's own apiserver_request_total{resource="leases"} for
 *    verbs GET/PUT/POST/PATCH, before and after the window, minus the writes of the
 *    other leases in the cluster (the API server's identity lease, counted by a watch).
 *  - renewals: modifications of the agent's Lease during the window, seen by a watch.
 *  - connections: accepted by the proxy (shows whether keep-alive connections are reused).
 *  - memory: VmRSS and VmHWM of the agent from /proc/PID/status at the end.
 *  - CPU: utime + stime of the agent from /proc/PID/stat across the window.
 * Goal (issue 3): < 80 MB RSS, < 0.5 % of one core, 1.0 request per renewal.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Watch } from '@kubernetes/client-node';
import { startCluster } from '../../dev/cluster/cluster.ts';
import type { Cluster } from '../../dev/cluster/types.ts';
import { startTcpProxy } from '../../dev/net/tcp-proxy.ts';

const WINDOW_S = Number(process.env.LEASEHOLD_BENCH_SECONDS ?? 60);
const LEASE = 'bench-agent';
const CLOCK_TICKS_PER_S = 100; // USER_HZ on Linux
const root = join(import.meta.dirname, '../..');

async function leaseRequestCount(cluster: Cluster): Promise<number> {
  const text = await rawGet(cluster, '/metrics');
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith('apiserver_request_total{') || !line.includes('resource="leases"')) continue;
    if (!/verb="(GET|PUT|POST|PATCH)"/.test(line)) continue;
    total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

async function rawGet(cluster: Cluster, path: string): Promise<string> {
  const child = spawn(cluster.kubectl, ['--kubeconfig', cluster.kubeconfigPath, 'get', '--raw', path]);
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`kubectl get --raw ${path} exited ${code}`);
  return out;
}

async function cpuTicks(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
}

async function memoryKb(pid: number): Promise<{ rssKb: number; hwmKb: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN);
  return { rssKb: field('VmRSS'), hwmKb: field('VmHWM') };
}

async function main(): Promise<void> {
  process.stderr.write('bench agent: starting the control plane\n');
  const cluster = await startCluster({ scheduler: false, controllerManager: false });
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-bench-agent-'));
  const url = new URL(cluster.server);
  const proxy = await startTcpProxy({ target: { host: url.hostname, port: Number(url.port) } });
  const agentPid: { pid?: number } = {};
  try {
    const kubeconfig = JSON.parse(await readFile(cluster.kubeconfigPath, 'utf8')) as {
      clusters: Array<{ cluster: { server: string } }>;
    };
    for (const c of kubeconfig.clusters) c.cluster.server = `https://127.0.0.1:${proxy.port}`;
    const kubeconfigPath = join(dir, 'kubeconfig.json');
    await writeFile(kubeconfigPath, JSON.stringify(kubeconfig), { mode: 0o600 });

    // Count lease modifications per lease during the window (the agent's and everyone else's).
    const modifications = new Map<string, number>();
    let counting = false;
    const watch = await new Watch(cluster.kubeConfig).watch(
      '/apis/coordination.k8s.io/v1/leases',
      {},
      (type: string, obj: { metadata?: { namespace?: string; name?: string } }) => {
        if (!counting || type !== 'MODIFIED') return;
        const key = `${obj.metadata?.namespace}/${obj.metadata?.name}`;
        modifications.set(key, (modifications.get(key) ?? 0) + 1);
      },
      () => {},
    );

    const agent = spawn(process.execPath, [join(root, 'dist/agent/main.js')], {
      env: {
        PATH: process.env.PATH ?? '',
        KUBECONFIG: kubeconfigPath,
        LEASEHOLD_LEASE_NAMESPACE: 'default',
        LEASEHOLD_LEASE_NAME: LEASE,
        LEASEHOLD_POD_NAME: 'bench-pod',
        LEASEHOLD_NODE_NAME: 'bench-node',
        LEASEHOLD_HTTP_PORT: '0',
        LEASEHOLD_HTTP_HOST: '127.0.0.1',
        // On the host, not in a pod: the default `pod` fence would refuse to start here.
        LEASEHOLD_FENCE_ACTION: 'none',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    agentPid.pid = agent.pid;
    const exited = new Promise<number | null>((resolve) => agent.once('exit', resolve));
    await new Promise<void>((resolve, reject) => {
      agent.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        if (chunk.includes('"lease acquired"')) resolve();
      });
      agent.once('exit', (code) => reject(new Error(`agent exited ${code} before acquiring`)));
    });
    // Warm-up: let start-up work (module loading, first connection) finish before measuring.
    await new Promise((r) => setTimeout(r, 5_000));

    process.stderr.write(`bench agent: measuring for ${WINDOW_S} s\n`);
    const pid = agent.pid as number;
    const requestsBefore = await leaseRequestCount(cluster);
    const ticksBefore = await cpuTicks(pid);
    const connectionsBefore = proxy.connections().accepted;
    const startedAt = performance.now();
    counting = true;
    await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
    counting = false;
    const elapsedS = (performance.now() - startedAt) / 1000;
    const ticksAfter = await cpuTicks(pid);
    const memory = await memoryKb(pid);
    const connectionsAfter = proxy.connections();
    // Let the watch deliver the last events before the final count.
    await new Promise((r) => setTimeout(r, 300));
    const requestsAfter = await leaseRequestCount(cluster);
    watch.abort();

    const renewals = modifications.get(`default/${LEASE}`) ?? 0;
    const otherWrites = [...modifications]
      .filter(([k]) => k !== `default/${LEASE}`)
      .reduce((s, [, n]) => s + n, 0);
    const agentRequests = requestsAfter - requestsBefore - otherWrites;
    const cpuPercent = ((ticksAfter - ticksBefore) / CLOCK_TICKS_PER_S / elapsedS) * 100;
    const result = {
      benchmark: 'agent',
      when: new Date().toISOString(),
      windowSeconds: Math.round(elapsedS * 10) / 10,
      renewIntervalSeconds: 2,
      renewals,
      apiRequestsByAgent: agentRequests,
      requestsPerRenewal: renewals === 0 ? null : Math.round((agentRequests / renewals) * 1000) / 1000,
      otherLeaseWritesSubtracted: otherWrites,
      proxyConnectionsDuringWindow: connectionsAfter.accepted - connectionsBefore,
      proxyConnectionsOpenAtEnd: connectionsAfter.open,
      rssMB: Math.round((memory.rssKb / 1024) * 10) / 10,
      peakRssMB: Math.round((memory.hwmKb / 1024) * 10) / 10,
      cpuPercentOfOneCore: Math.round(cpuPercent * 1000) / 1000,
      goals: { rssMB: 80, cpuPercentOfOneCore: 0.5, requestsPerRenewal: 1 },
      met: {
        rss: memory.rssKb / 1024 < 80,
        cpu: cpuPercent < 0.5,
        requestsPerRenewal: renewals > 0 && agentRequests === renewals,
      },
    };
    agent.kill('SIGTERM');
    const code = await exited;
    agentPid.pid = undefined;
    const out = join(root, 'bench/results');
    await mkdir(out, { recursive: true });
    await writeFile(
      join(out, 'agent.json'),
      `${JSON.stringify({ ...result, agentExitCode: code }, null, 2)}\n`,
    );
    process.stdout.write(
      [
        `agent benchmark, ${result.windowSeconds} s, renew interval 2 s`,
        `  renewals (seen by watch)        ${renewals}`,
        `  API requests (kube-apiserver)   ${agentRequests}  -> ${result.requestsPerRenewal} per renewal (goal 1.0)`,
        `  proxy connections in window     ${result.proxyConnectionsDuringWindow} (open at end: ${connectionsAfter.open})`,
        `  RSS                             ${result.rssMB} MB (peak ${result.peakRssMB} MB; goal < 80)`,
        `  CPU                             ${result.cpuPercentOfOneCore} % of one core (goal < 0.5)`,
        `  agent exit on SIGTERM           ${code}`,
        '  written to bench/results/agent.json',
        '',
      ].join('\n'),
    );
  } finally {
    if (agentPid.pid !== undefined) process.kill(agentPid.pid, 'SIGKILL');
    await proxy.close();
    await cluster.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
