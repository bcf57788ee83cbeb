/**
 * Readings bench/agent/run.ts takes from the API server and from the agent's own
 * /metrics: lease request counts (kube-apiserver's apiserver_request_total), Lease
 * MicroTimes, promtool's verdict on an exposition, the agent's GC pause histogram.
 */
import { spawnSync } from 'node:child_process';
import type { Cluster } from '../../dev/cluster/types.ts';

function rawGet(cluster: Cluster, path: string): string {
  const run = spawnSync(cluster.kubectl, ['--kubeconfig', cluster.kubeconfigPath, 'get', '--raw', path], {
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  if (run.status !== 0) throw new Error(`kubectl get --raw ${path} exited ${run.status}: ${run.stderr}`);
  return run.stdout;
}

export async function leaseRequestCount(cluster: Cluster): Promise<number> {
  let total = 0;
  for (const line of rawGet(cluster, '/metrics').split('\n')) {
    if (!line.startsWith('apiserver_request_total{') || !line.includes('resource="leases"')) continue;
    if (!/verb="(GET|PUT|POST|PATCH)"/.test(line)) continue;
    total += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return total;
}

/** A Lease MicroTime ("…:27.345123Z") in epoch ms with its microseconds. */
export function microTimeMs(text: string): number {
  const frac = /\.(\d+)Z$/.exec(text)?.[1] ?? '0';
  return Date.parse(text.replace(/\.\d+Z$/, 'Z')) + Number(`0.${frac}`) * 1000;
}

/** promtool's verdict on an exposition, if promtool is installed. */
export function promtoolVerdict(
  text: string,
): { parsed: boolean; lint: string[] } | 'promtool not installed' {
  const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (run.error) return 'promtool not installed';
  const out = `${run.stdout}${run.stderr}`.split('\n').filter(Boolean);
  return { parsed: !out.some((l) => /parsing error/.test(l)), lint: out };
}

/** The agent's own GC pause histogram: how many GCs, and how many took longer than 10 ms. */
export function gcPauses(metricsText: string): { count: number; over10ms: number; over100ms: number } {
  let count = 0;
  let le10 = 0;
  let le100 = 0;
  for (const m of metricsText.matchAll(
    /^leasehold_agent_nodejs_gc_duration_seconds_bucket\{kind="\w+",le="([^"]+)"\} (\d+)$/gm,
  )) {
    if (m[1] === '+Inf') count += Number(m[2]);
    if (m[1] === '0.01') le10 += Number(m[2]);
    if (m[1] === '0.1') le100 += Number(m[2]);
  }
  return { count, over10ms: count - le10, over100ms: count - le100 };
}
