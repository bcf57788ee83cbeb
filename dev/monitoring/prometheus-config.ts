/**
 * The Prometheus side of the dashboard render, as pure functions: the configuration that
 * scrapes a real-node system as the chart's monitors would (`prometheusConfig`), and what
 * the HTTP API's answers become (`seriesOnGrid`, `instantRows`).
 *
 * The scrape follows the chart: the agents as templates/podmonitor.yaml does (every pod
 * labelled app.kubernetes.io/component=share-manager and managed-by=leasehold-manager, port
 * `agent-http`, labels `share` from the pod's leasehold.dev/share-manager label and `node`
 * from its node), the managers at their port `http` as templates/servicemonitor.yaml does
 * (through pods, not its headless Service: the chart creates the Service only with the
 * ServiceMonitor, whose CRD this cluster lacks), each with the labels prometheus-operator
 * gives a target (namespace, pod, container). Targets come from Kubernetes service
 * discovery against the real API server, so a replacement pod is scraped as it appears.
 * Guarantees: the config is JSON (which is YAML); an answer that is not a successful
 * matrix or vector is an error quoting it.
 * Not modelled: the operator's job names and the `endpoint` and `service` labels (no
 * panel reads them).
 */
import { LeaseholdError } from '../../lib/errors.ts';
import type { Series } from './dashboard-geometry.ts';

export interface ScrapeSetup {
  /** https://host:port of the API server as seen from where Prometheus runs. */
  apiServer: string;
  caFile: string;
  certFile: string;
  keyFile: string;
  intervalS: number;
}

export function prometheusConfig(s: ScrapeSetup): string {
  const sd = [
    {
      role: 'pod',
      api_server: s.apiServer,
      tls_config: { ca_file: s.caFile, cert_file: s.certFile, key_file: s.keyFile },
    },
  ];
  const keep = (label: string, regex: string) => ({
    source_labels: [label],
    regex,
    action: 'keep',
  });
  const copy = (from: string, to: string) => ({ source_labels: [from], target_label: to });
  const operatorLabels = [
    // prometheus-operator skips pods that ended.
    { source_labels: ['__meta_kubernetes_pod_phase'], regex: 'Failed|Succeeded', action: 'drop' },
    copy('__meta_kubernetes_namespace', 'namespace'),
    copy('__meta_kubernetes_pod_name', 'pod'),
    copy('__meta_kubernetes_pod_container_name', 'container'),
  ];
  const config = {
    global: { scrape_interval: `${s.intervalS}s`, scrape_timeout: `${Math.max(1, s.intervalS - 1)}s` },
    scrape_configs: [
      {
        job_name: 'leasehold-agents',
        kubernetes_sd_configs: sd,
        relabel_configs: [
          keep('__meta_kubernetes_pod_label_app_kubernetes_io_component', 'share-manager'),
          keep('__meta_kubernetes_pod_label_app_kubernetes_io_managed_by', 'leasehold-manager'),
          keep('__meta_kubernetes_pod_container_port_name', 'agent-http'),
          ...operatorLabels,
          copy('__meta_kubernetes_pod_label_leasehold_dev_share_manager', 'share'),
          copy('__meta_kubernetes_pod_node_name', 'node'),
        ],
      },
      {
        job_name: 'leasehold-managers',
        kubernetes_sd_configs: sd,
        relabel_configs: [
          keep('__meta_kubernetes_pod_label_app_kubernetes_io_component', 'manager'),
          keep('__meta_kubernetes_pod_label_app_kubernetes_io_name', 'leasehold'),
          keep('__meta_kubernetes_pod_container_port_name', 'http'),
          ...operatorLabels,
        ],
      },
    ],
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
