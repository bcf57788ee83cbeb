/**
 * Stock Kubernetes, no leasehold manager: each volume's share server runs in a
 * Deployment (replicas 1) whose pod tolerates node.kubernetes.io/{unreachable,not-ready}
 * (NoExecute) for only 30 s instead of the default 300 s. All `volumes` pods are put on
 * one node (the others cordoned meanwhile), then that node crashes once, and each
 * volume is measured: detection = the node's unreachable taint first seen (the node
 * lifecycle controller's verdict), eviction = the pod's deletionTimestamp first seen
 * (taint eviction), serving = the replacement's serving-window start. Whatever has not
 * been served `budgetMs` after the crash is reported as capped, with the reasons the
 * API shows (FailedAttachVolume / Multi-Attach events, pods stuck Terminating).
 *
 * NB: one crash carries all samples: stock timings are fixed timers (node monitor
 * grace, toleration, attach-detach controller timeouts), not phases of a renew cycle.
 * The pods carry label leasehold.dev/share-manager=<volume> only so that the shared
 * helpers find them; nothing reconciles them but the ReplicaSet controller.
 */

import { SHARE_SERVER_IMAGE } from '../../dev/sim/sim.ts';
import { createVolume, pvName, servingNow, waitServing } from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE, type System } from '../../dev/system/system.ts';
import { sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import type { CrashSample } from './leasehold-runs.ts';
import { round } from './stats.ts';

export const TOLERATION_SECONDS = 30;

export interface StockResult {
  samples: Array<CrashSample & { evictedS?: number }>;
  notes: string[];
}

export async function cordon(sys: System, node: string, unschedulable: boolean): Promise<void> {
  await sys.core.patchNode(
    { name: node, body: { spec: { unschedulable } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch, withDeadline(5_000)),
  );
}

/** NoExecute tolerations of an unreachable or not-ready node for TOLERATION_SECONDS. */
export function stockTolerations(): k8s.V1Toleration[] {
  return ['node.kubernetes.io/unreachable', 'node.kubernetes.io/not-ready'].map((key) => ({
    key,
    operator: 'Exists',
    effect: 'NoExecute',
    tolerationSeconds: TOLERATION_SECONDS,
  }));
}

/**
 * The stock way to run a share's server: a one-replica Deployment of `server` with the
 * volume's claim mounted (as `share`) and the stock tolerations; nothing fences it, and
 * it moves only when the pod is evicted.
 */
export async function createStockDeployment(
  sys: System,
  name: string,
  claim: string,
  server: k8s.V1Container,
  extraVolumes: k8s.V1Volume[] = [],
): Promise<Record<string, string>> {
  const apps = sys.kc.makeApiClient(k8s.AppsV1Api);
  const labels = { 'leasehold.dev/share-manager': name };
  await apps.createNamespacedDeployment(
    {
      namespace: SHARES_NAMESPACE,
      body: {
        metadata: { name, namespace: SHARES_NAMESPACE },
        spec: {
          replicas: 1,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              tolerations: stockTolerations(),
              containers: [server],
              volumes: [{ name: 'share', persistentVolumeClaim: { claimName: claim } }, ...extraVolumes],
            },
          },
        },
      },
    },
    withDeadline(10_000),
  );
  return labels;
}

const createDeployment = (sys: System, name: string, claim: string) =>
  createStockDeployment(sys, name, claim, {
    name: 'server',
    image: `${SHARE_SERVER_IMAGE}:dev`,
    args: ['--dir=/export'],
    ports: [{ name: 'http', containerPort: 8080 }],
    volumeMounts: [{ name: 'share', mountPath: '/export' }],
  });

export async function stockCrash(
  sys: System,
  volumes: number,
  budgetMs: number,
  say: (line: string) => void,
): Promise<StockResult> {
  const names = Array.from({ length: volumes }, (_, i) => `stock-${String(i + 1).padStart(2, '0')}`);
  const [victim, ...others] = sys.sim.nodes.map((n) => n.name) as [string, ...string[]];
  for (const n of others) await cordon(sys, n, true);
  const before = new Map<string, string>();
  try {
    for (const name of names) await createDeployment(sys, name, await createVolume(sys, name));
    for (const name of names) before.set(name, (await waitServing(sys, name, 180_000)).pod);
  } finally {
    for (const n of others) await cordon(sys, n, false);
  }
  await sleep(2_000);
  const crashAt = Date.now();
  await sys.sim.node(victim).crash();
  say(`crashed ${victim} carrying ${volumes} volumes; waiting up to ${budgetMs / 1000} s`);
  let detectS: number | undefined;
  const evictedS = new Map<string, number>();
  const servingS = new Map<string, number>();
  let lastReport = 0;
  while (Date.now() - crashAt < budgetMs && servingS.size < names.length) {
    const elapsed = (Date.now() - crashAt) / 1000;
    if (detectS === undefined) {
      const node = await sys.core.readNode({ name: victim }, withDeadline(5_000)).catch(() => undefined);
      if (node?.spec?.taints?.some((t) => t.key === 'node.kubernetes.io/unreachable'))
        detectS = round(elapsed);
    }
    for (const name of names) {
      if (servingS.has(name)) continue;
      const oldPod = before.get(name) ?? '';
      if (!evictedS.has(name)) {
        const pods = await sys.core
          .listNamespacedPod(
            { namespace: SHARES_NAMESPACE, labelSelector: `leasehold.dev/share-manager=${name}` },
            withDeadline(5_000),
          )
          .catch(() => undefined);
        const old = pods?.items.find((p) => p.metadata?.name === oldPod);
        if (pods && (!old || old.metadata?.deletionTimestamp)) evictedS.set(name, round(elapsed));
      }
      const serving = await servingNow(sys, name, oldPod).catch(() => undefined);
      if (serving) {
        const window = sys.sim.servingWindows(pvName(name)).find((w) => w.id === serving.pod);
        servingS.set(name, round((new Date(window?.startWall ?? Date.now()).getTime() - crashAt) / 1000));
      }
    }
    if (elapsed - lastReport >= 60) {
      lastReport = elapsed;
      say(
        `${Math.round(elapsed)} s after the crash: node tainted ${detectS !== undefined}, evicted ${evictedS.size}, served again ${servingS.size}/${volumes}`,
      );
    }
    await sleep(500);
  }
  const notes =
    servingS.size < names.length
      ? await cappedNotes(sys, names.length - servingS.size, volumes, budgetMs)
      : [];
  const samples = names.map((name, i) => ({
    run: i + 1,
    node: victim,
    ...(detectS === undefined ? {} : { detectS }),
    ...(evictedS.has(name) ? { evictedS: evictedS.get(name) } : {}),
    ...(servingS.has(name)
      ? { servingS: servingS.get(name) }
      : { note: `not served within ${budgetMs / 1000} s` }),
  }));
  return { samples, notes };
}

/**
 * Why volumes were not served again by the cap, as the API shows it: the attach and
 * scheduling events, and how many evicted pods are still Terminating on the dead node.
 */
export async function cappedNotes(
  sys: System,
  missing: number,
  volumes: number,
  budgetMs: number,
): Promise<string[]> {
  const events = await sys.core
    .listNamespacedEvent({ namespace: SHARES_NAMESPACE }, withDeadline(10_000))
    .catch(() => ({ items: [] as k8s.CoreV1Event[] }));
  const reasons = new Map<string, string>();
  for (const e of events.items) {
    if (['FailedAttachVolume', 'FailedMount', 'FailedScheduling'].includes(e.reason ?? ''))
      reasons.set(e.reason ?? '', (e.message ?? '').slice(0, 240));
  }
  const all = await sys.core
    .listNamespacedPod({ namespace: SHARES_NAMESPACE }, withDeadline(10_000))
    .catch(() => ({ items: [] as k8s.V1Pod[] }));
  const terminating = all.items.filter((p) => p.metadata?.deletionTimestamp).length;
  const waiting = all.items.filter(
    (p) => !p.metadata?.deletionTimestamp && p.status?.phase === 'Pending',
  ).length;
  return [
    `capped: ${missing} of ${volumes} volumes not served again within ${budgetMs / 1000} s of the crash`,
    ...[...reasons].map(([r, m]) => `event ${r}: ${m}`),
    `at the cap: ${terminating} evicted pods still Terminating on the dead node (their volumes stay in use for the attach-detach controller), ${waiting} replacements Pending`,
  ];
}
