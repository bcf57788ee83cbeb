/**
 * Keeps the surviving managers' container logs of each crash (logging only, no figure):
 * after the crash's failover, before the reboot, every manager pod not on the crashed
 * node has its log (as its node's kubelet wrote it, dev/system/real-share.ts podLog)
 * copied to `$LEASEHOLD_BENCH_LOG_DIR/run-<n>-<node>-manager.log`, headed by the crash's
 * wall time, and one line is said per log: when (s since the crash) its manager last
 * logged `manager started`, its Lease watch opened after that, and it logged the stale
 * verdict (managerTimeline). `describeManagerPod` says what the API shows of a manager
 * pod (Ready condition, container start, restarts) when the reboot is declared done.
 * Nothing is kept when the variable is unset. A failure to read or write is said, never
 * fatal: the benchmark's figures do not depend on it.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { podLog } from '../../dev/system/real-share.ts';
import type { RealSystem } from '../../dev/system/real-system.ts';
import { managerPodsByNode } from '../../dev/system/real-system.ts';
import type { k8s } from '../../lib/kube-client.ts';

export async function keepManagerLogs(
  sys: RealSystem,
  run: number,
  crashWallMs: number,
  crashedNode: string,
  say: (line: string) => void,
): Promise<void> {
  const dir = process.env.LEASEHOLD_BENCH_LOG_DIR;
  if (!dir) return;
  try {
    mkdirSync(dir, { recursive: true });
    const pods = await managerPodsByNode(sys.core);
    for (const [nodeName, pod] of pods) {
      if (nodeName === crashedNode) continue;
      const node = sys.nodes.find((n) => n.name === nodeName);
      if (!node) continue;
      const file = join(dir, `run-${run}-${nodeName}-manager.log`);
      const header = `# crash of ${crashedNode} at ${new Date(crashWallMs).toISOString()}; pod ${pod.metadata?.name} started ${pod.status?.startTime?.toISOString?.() ?? pod.status?.startTime}\n`;
      const text = podLog(node, pod, 'manager');
      writeFileSync(file, header + text);
      const t = managerTimeline(text, crashWallMs);
      say(
        `run ${run}: kept ${file}; ${nodeName}'s manager started ${t.startedS ?? '?'} s, lease watch open ${t.leaseWatchOpenS ?? '?'} s, stale verdict ${t.staleS ?? '?'} s since the crash`,
      );
    }
  } catch (err) {
    say(`run ${run}: manager logs not kept: ${(err as Error).message}`);
  }
}

/** Seconds since the crash of the last `manager started`, the lease watch open after it, the stale verdict (pure). */
export function managerTimeline(
  log: string,
  crashWallMs: number,
): { startedS?: number; leaseWatchOpenS?: number; staleS?: number } {
  const since = (iso: string) => Math.round(Date.parse(iso) - crashWallMs) / 1000;
  const out: { startedS?: number; leaseWatchOpenS?: number; staleS?: number } = {};
  for (const line of log.split('\n')) {
    const json = line.indexOf('{');
    if (json < 0) continue;
    let entry: { time?: string; msg?: string; resource?: string };
    try {
      entry = JSON.parse(line.slice(json)) as typeof entry;
    } catch {
      continue;
    }
    if (!entry.time) continue;
    if (entry.msg === 'manager started') {
      out.startedS = since(entry.time);
      out.leaseWatchOpenS = undefined;
      out.staleS = undefined;
    } else if (entry.msg === 'watch open' && entry.resource === 'leases')
      out.leaseWatchOpenS = since(entry.time);
    else if (entry.msg === 'lease stale by our observation') out.staleS ??= since(entry.time);
  }
  return out;
}

/** What the API shows of `node`'s manager pod now: Ready (since), its container's start and restarts. */
export async function describeManagerPod(sys: RealSystem, node: string): Promise<string> {
  if (!process.env.LEASEHOLD_BENCH_LOG_DIR) return '';
  const pod = (await managerPodsByNode(sys.core).catch(() => new Map<string, k8s.V1Pod>())).get(node);
  if (!pod) return `${node}: no manager pod`;
  const ready = pod.status?.conditions?.find((c) => c.type === 'Ready');
  const c = pod.status?.containerStatuses?.find((s) => s.name === 'manager');
  const iso = (d: Date | string | undefined) => (d instanceof Date ? d.toISOString() : d);
  return `${node}'s manager pod as the API shows it: Ready=${ready?.status} since ${iso(ready?.lastTransitionTime)}, container started ${iso(c?.state?.running?.startedAt)}, restarts ${c?.restartCount}`;
}
