/**
 * Puts the real-node system's chart on one managed mode's values (modes.ts
 * modeChartValues) before that mode's crashes: `helm upgrade` with the install's own
 * values plus the mode's, every other value back to the chart's default
 * (dev/system/helm-install.ts helmUpgrade), then waits until the manager DaemonSet has
 * rolled out (every node's manager pod of the new template, ready).
 * Guarantees: it returns only when the rollout is complete; a mode's values never leak
 * into the next mode. The mode's share is created after this (its pod spec is built
 * by the new managers, so the agent runs with the mode's lease timings).
 * Not guaranteed: anything about a share that exists during the switch (the bench
 * creates its share after it and deletes it before the next switch).
 */
import { helmUpgrade, helmUserValues } from '../../dev/system/helm-install.ts';
import type { RealSystem } from '../../dev/system/real-system.ts';
import { RELEASE, SYSTEM_NAMESPACE, waitForManagers } from '../../dev/system/real-system.ts';
import { sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { type ManagedMode, modeChartValues } from './modes.ts';

/** The install's own values, read once before the first switch. */
export function installValues(sys: RealSystem): Promise<Record<string, unknown>> {
  return helmUserValues(release(sys));
}

const release = (sys: RealSystem) => ({
  kubeconfigPath: sys.cluster.kubeconfigPath,
  release: RELEASE,
  namespace: SYSTEM_NAMESPACE,
});

export async function switchManagedMode(
  sys: RealSystem,
  mode: ManagedMode,
  grace: string,
  base: Record<string, unknown>,
  timeoutMs = 240_000,
): Promise<{ seconds: number; values: Record<string, string> }> {
  const t0 = performance.now();
  const values = modeChartValues(
    mode,
    grace,
    sys.nodes.map((n) => n.name),
  );
  await helmUpgrade({ ...release(sys), base, values });
  const apps = sys.kc.makeApiClient(k8s.AppsV1Api);
  const until = performance.now() + timeoutMs;
  let last = 'no DaemonSet read yet';
  for (; performance.now() < until; await sleep(500)) {
    const list = await apps
      .listNamespacedDaemonSet({ namespace: SYSTEM_NAMESPACE }, withDeadline(5_000))
      .catch(() => undefined);
    const ds = list?.items[0];
    const st = ds?.status;
    if (!ds || !st) continue;
    const desired = st.desiredNumberScheduled;
    last = `generation ${ds.metadata?.generation} observed ${st.observedGeneration}, ${st.updatedNumberScheduled ?? 0}/${desired} updated, ${st.numberAvailable ?? 0} available`;
    if (
      (st.observedGeneration ?? 0) >= (ds.metadata?.generation ?? 1) &&
      (st.updatedNumberScheduled ?? 0) === desired &&
      (st.numberAvailable ?? 0) === desired &&
      (st.numberUnavailable ?? 0) === 0
    ) {
      await waitForManagers(
        sys.core,
        sys.nodes.map((n) => n.name),
        Math.max(1_000, until - performance.now()),
      );
      return { seconds: Math.round((performance.now() - t0) / 100) / 10, values };
    }
  }
  throw new Error(
    `mode ${mode}: the manager DaemonSet did not roll out within ${timeoutMs / 1000} s (${last})`,
  );
}
