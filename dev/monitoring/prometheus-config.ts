/**
 * The Prometheus side of the dashboard render, as pure functions: what Prometheus scrapes
 * of a real-node system, as the chart's monitors would select it (`scrapeTargets`), its
 * configuration (`prometheusConfig`), and what its HTTP API answers become
 * (`seriesOnGrid`, `instantRows`).
 *
 * Debian 12's Prometheus 2.42 is built without Kubernetes service discovery (its config
 * refuses `kubernetes_sd_configs`), so the targets come from file-based discovery: the
 * caller lists the pods and writes `scrapeTargets`' groups to the files the config names.
 * The selection follows the chart: the agents as templates/podmonitor.yaml selects them
 * (pods labelled app.kubernetes.io/component=share-manager and
 * app.kubernetes.io/managed-by=leasehold-manager, their port `agent-http`, labels `share`
 * from the pod's leasehold.dev/share-manager label and `node` from its node), the managers
 * at their port `http` as templates/servicemonitor.yaml does (by pod: the chart makes its
 * headless Service only with the ServiceMonitor, whose CRD this cluster lacks); each
 * target with the labels prometheus-operator gives (namespace, pod, container), pods that
 * ended (Failed, Succeeded) or have no IP left out, as the operator does.
 * Guarantees: the config is JSON (which is YAML); an answer that is not a successful
 * matrix or vector is an error quoting it.
 * Not modelled: the operator's job names and the `endpoint` and `service` labels (no
 * panel reads them).
 */
import { LeaseholdError } from '../../lib/errors.ts';
import type { k8s } from '../../lib/kube-client.ts';
import type { Series } from './dashboard-geometry.ts';

export const AGENTS_JOB = 'leasehold-agents';
export const MANAGERS_JOB = 'leasehold-managers';

/** A file_sd group: one target and its labels. */
export interface TargetGroup {
  targets: string[];
  labels: Record<string, string>;
}

const SELECTORS: Record<string, { labels: Record<string, string>; ports: string[] }> = {
  [AGENTS_JOB]: {
    labels: {
      'app.kubernetes.io/component': 'share-manager',
      'app.kubernetes.io/managed-by': 'leasehold-manager',
    },
    ports: ['agent-http', 'nfs-metrics'],
  },
  [MANAGERS_JOB]: {
    labels: { 'app.kubernetes.io/component': 'manager', 'app.kubernetes.io/name': 'leasehold' },
    ports: ['http'],
  },
};

/** Each job's targets among these pods. */
export function scrapeTargets(pods: readonly k8s.V1Pod[]): Record<string, TargetGroup[]> {
  const out: Record<string, TargetGroup[]> = {};
  for (const [job, sel] of Object.entries(SELECTORS)) {
    out[job] = [];
    for (const pod of pods) {
      const labels = pod.metadata?.labels ?? {};
      const ip = pod.status?.podIP;
      const phase = pod.status?.phase;
      if (!ip || phase === 'Failed' || phase === 'Succeeded') continue;
      if (!Object.entries(sel.labels).every(([k, v]) => labels[k] === v)) continue;
      for (const c of [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])])
        for (const port of c.ports ?? [])
          if (port.name !== undefined && sel.ports.includes(port.name))
            out[job].push({
              targets: [`${ip}:${port.containerPort}`],
              labels: {
                namespace: pod.metadata?.namespace ?? '',
                pod: pod.metadata?.name ?? '',
                container: c.name,
                ...(job === AGENTS_JOB
                  ? { share: labels['leasehold.dev/share-manager'] ?? '', node: pod.spec?.nodeName ?? '' }
                  : {}),
              },
            });
    }
  }
  return out;
}

/** Prometheus' config: each job reads its targets from `<dir>/<job>.json`. */
export function prometheusConfig(s: { targetsDir: string; intervalS: number }): string {
  const config = {
    global: { scrape_interval: `${s.intervalS}s`, scrape_timeout: `${Math.max(1, s.intervalS - 1)}s` },
    scrape_configs: Object.keys(SELECTORS).map((job) => ({
      job_name: job,
      file_sd_configs: [{ files: [`${s.targetsDir}/${job}.json`], refresh_interval: '5s' }],
    })),
  };
  return `${JSON.stringify(config, null, 2)}\n`;
}

interface Answer {
  status?: string;
  data?: {
    resultType?: string;
    result?: Array<{ metric?: Record<string, string>; values?: unknown[]; value?: unknown }>;
  };
}

function resultOf(body: unknown, type: 'matrix' | 'vector', query: string) {
  const a = body as Answer;
  if (a?.status !== 'success' || a.data?.resultType !== type || !Array.isArray(a.data.result))
    throw new LeaseholdError(
      'E_PROMETHEUS_ANSWER',
      `Prometheus answered ${JSON.stringify(body).slice(0, 300)} to ${query} (a ${type} expected)`,
    );
  return a.data.result;
}

/**
 * A query_range answer as series on the step grid fromS, fromS + stepS, … toS: a step
 * Prometheus returned no sample for is NaN (drawn as a gap, as Grafana does).
 */
export function seriesOnGrid(
  body: unknown,
  query: string,
  grid: { fromS: number; toS: number; stepS: number },
  name: (labels: Record<string, string>) => string,
): Series[] {
  return resultOf(body, 'matrix', query).map((r) => {
    const got = new Map<number, number>();
    for (const v of r.values ?? []) {
      const [t, x] = v as [number, string];
      got.set(Math.round(t * 1000), Number(x));
    }
    const points: Array<[number, number]> = [];
    for (let t = grid.fromS; t <= grid.toS + 1e-9; t += grid.stepS) {
      const ms = Math.round(t * 1000);
      points.push([ms, got.get(ms) ?? Number.NaN]);
    }
    return { name: name(r.metric ?? {}), points };
  });
}

/** An instant query's answer: each sample's labels and value. */
export function instantRows(
  body: unknown,
  query: string,
): Array<{ labels: Record<string, string>; value: number }> {
  return resultOf(body, 'vector', query).map((r) => ({
    labels: r.metric ?? {},
    value: Number((r.value as [number, string] | undefined)?.[1]),
  }));
}
