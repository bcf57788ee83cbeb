/**
 * What the real-node demo and benchmark read of a share's pods: the Ready pod (other
 * than one named) and when its NFS server's entrypoint first logged `serving` (the
 * JSON `time` of that line, wall ms, from the log the node's kubelet wrote). Polled by
 * `waitServingPod`, which rejects naming the share and the wait when time runs out.
 * NB: the same reading as test/e2e/e2e-support.ts readyRealPod/realLogLineWall (which a
 * dev/ module must not import); the log line is the server's own word, the Ready
 * condition the kubelet's probe.
 * Not guaranteed: a pod that is Ready and logged `serving` still serves when read.
 */
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import type { k8s } from '../../lib/kube-client.ts';
import { podLog } from '../system/real-share.ts';
import type { RealSystem } from '../system/real-system.ts';
import { sharePods } from '../system/shares.ts';

export interface ServingPod {
  pod: string;
  node: string;
  object: k8s.V1Pod;
  /** When its server logged `serving` (wall ms). */
  servingWall: number;
}

/** The wall ms of the first JSON log line whose msg is `msg`, or undefined. */
export function logLineWall(text: string, msg: string): number | undefined {
  const quoted = JSON.stringify(msg);
  for (const line of text.split('\n')) {
    const at = line.indexOf('{');
    if (at < 0 || !line.includes(quoted)) continue;
    try {
      const entry = JSON.parse(line.slice(at)) as { msg?: string; time?: string | number };
      if (entry.msg !== msg || entry.time === undefined) continue;
      const ms = typeof entry.time === 'number' ? entry.time : Date.parse(entry.time);
      if (Number.isFinite(ms)) return ms;
    } catch {}
  }
  return undefined;
}

/** The share's Ready pod (not `notPod`) whose server logged `serving`, or undefined. */
export async function servingPod(
  sys: RealSystem,
  share: string,
  notPod?: string,
): Promise<ServingPod | undefined> {
  for (const p of await sharePods(sys, share).catch(() => [])) {
    const name = p.metadata?.name ?? '';
    const node = p.spec?.nodeName;
    if (name === notPod || !node) continue;
    if (!p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) continue;
    const n = sys.nodes.find((x) => x.name === node);
    const servingWall = n ? logLineWall(podLog(n, p, 'server'), 'serving') : undefined;
    if (servingWall !== undefined) return { pod: name, node, object: p, servingWall };
  }
  return undefined;
}

export async function waitServingPod(
  sys: RealSystem,
  share: string,
  timeoutMs: number,
  notPod?: string,
): Promise<ServingPod> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const p = await servingPod(sys, share, notPod);
    if (p) return p;
    await sleep(200);
  }
  throw new LeaseholdError(
    'E_DEMO_NOT_SERVING',
    `share ${share}: no Ready pod${notPod ? ` other than ${notPod}` : ''} whose NFS server logged serving within ${timeoutMs / 1000} s`,
  );
}
