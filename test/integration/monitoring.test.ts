/**
 * The chart's alerts (templates/prometheusrule.yaml) and Grafana dashboard
 * (dashboards/leasehold.json) against what the components really export: one compiled
 * agent holding a Lease and one compiled manager watching it, on a real control plane,
 * and the compiled NFS server entrypoint running Debian's ganesha with its metrics on
 * (as the manager's preset sets them), each scraped at /metrics. Checks:
 *  - every alert and every panel query reads only metrics, labels and label values in
 *    those scrapes (plus the labels the chart's ServiceMonitor and PodMonitor give a
 *    target), and a metric renamed in a component is reported naming the alert;
 *  - `promtool test rules`: each alert fires on a case and stays quiet on another, on
 *    input series whose names and label sets are the scraped ones (a case needing a
 *    series the scrape lacks fails naming it), and the cases fail when a rule reads a
 *    renamed metric;
 *  - `promtool check rules` parses the rendered rules and every panel query (each as a
 *    recording rule), and refuses a broken query;
 *  - the manager counts a share pod whose agent ended fenced (agent_fences_total), as the
 *    kubelet reports it (played here: no real node);
 *  - the slow-failover threshold can only be a bucket bound of the histogram scraped.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import { addScrape, type Catalogue, problemsOf } from '../support/metric-catalogue.ts';
import { chartDir, helm, repoRoot } from '../support/tools.ts';
import { agentEnv, cleanup, spawnAgent } from './agent-harness.ts';
import { applyCrd, createNamespace, startManager, stopAllManagers } from './manager-harness.ts';
import {
  cleanup as cleanupNfs,
  freePort,
  tempDir as nfsTempDir,
  spawnNfsServer,
} from './nfs-ganesha-harness.ts';

const cluster = useCluster({ scheduler: false, controllerManager: false });
after(cleanup);
after(stopAllManagers);
after(cleanupNfs);

/**
 * The labels prometheus-operator gives every target of a ServiceMonitor (the manager)
 * and a PodMonitor (the agents), besides the chart's relabelings read from the render.
 */
const SERVICE_MONITOR_LABELS = ['job', 'instance', 'namespace', 'service', 'pod', 'container', 'endpoint'];
const POD_MONITOR_LABELS = ['job', 'instance', 'namespace', 'pod', 'container', 'endpoint'];

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface Panel {
  title: string;
  type: string;
  targets?: Array<{ refId: string; expr: string }>;
  panels?: Panel[];
}

function promtool(args: string[]): { code: number | null; output: string } {
  const run = spawnSync('promtool', args, { encoding: 'utf8' });
  if (run.error) throw new Error(`promtool not runnable (apt-get install prometheus): ${run.error.message}`);
  return { code: run.status, output: `${run.stdout}${run.stderr}` };
}

async function scrape(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(3_000) });
  return res.text();
}

function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** Grafana's own variables, as a Prometheus query would get them. */
function asPromQL(expr: string, where: string): string {
  const out = expr.replace(/\$__(rate_interval|interval|range)\b/g, '5m');
  const unknown = /\$\{?\w+/.exec(out);
  if (unknown) throw new Error(`${where}: unknown Grafana variable ${unknown[0]} in: ${expr}`);
  return out;
}

function panelsOf(panels: readonly Panel[]): Panel[] {
  return panels.flatMap((p) => [p, ...panelsOf(p.panels ?? [])]);
}

describe('the chart alerts and dashboard against the real components /metrics', () => {
  let dir: string;
  let catalogue: Catalogue;
  let rules: Rule[];
  let panels: Panel[];
  /** Target label names per source: the operator's plus the chart's relabelings. */
  const targetLabels = new Map<string, string[]>();

  before(async () => {
    const c = cluster();
    dir = await mkdtemp(join(tmpdir(), 'leasehold-monitoring-'));
    await applyCrd(c);
    const agent = spawnAgent({
      ...agentEnv('vol-a', 'vol-a-pod', {
        LEASEHOLD_LEASE_DURATION: '4s',
        LEASEHOLD_RENEW_INTERVAL: '1s',
        LEASEHOLD_RENEW_DEADLINE: '2500ms',
        LEASEHOLD_RETRY_PERIOD: '250ms',
      }),
      KUBECONFIG: c.kubeconfigPath,
    });
    const agentPort = (await agent.waitForLog('agent started')).httpPort as number;
    await agent.waitForLog('lease acquired');
    const manager = startManager(c, 'monitoring-m1');
    const managerPort = await eventually('the manager started', async () => {
      const port = (await manager.lines()).find((l) => l.msg === 'manager started')?.port;
      return typeof port === 'number' ? port : undefined;
    });
    await eventually('the manager watches pods', async () =>
      sample(await scrape(managerPort), 'leasehold_manager_watch_healthy{resource="pods"}') === 1
        ? true
        : undefined,
    );

    // Plays the kubelet of a share pod whose agent (a native sidecar) runs, then ends fenced.
    const shares = 'shares';
    await createNamespace(c.kubeConfig, shares);
    const core = c.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const pod = await core.createNamespacedPod({
      namespace: shares,
      body: {
        metadata: { name: 'vol-f-pod', labels: { [LABEL_SHARE_MANAGER]: 'vol-f' } },
        spec: {
          initContainers: [{ name: 'agent', image: 'leasehold.dev/leasehold:dev', restartPolicy: 'Always' }],
          containers: [{ name: 'server', image: 'leasehold.dev/nfs-ganesha:dev' }],
        },
      },
    });
    const agentState = async (state: k8s.V1ContainerState) => {
      const current = await core.readNamespacedPod({ namespace: shares, name: 'vol-f-pod' });
      current.status = {
        ...current.status,
        phase: 'Running',
        initContainerStatuses: [
          {
            name: 'agent',
            image: 'leasehold.dev/leasehold:dev',
            imageID: '',
            ready: false,
            restartCount: 0,
            state,
          },
        ],
      };
      await core.replaceNamespacedPodStatus({ namespace: shares, name: 'vol-f-pod', body: current });
    };
    await agentState({ running: { startedAt: new Date() } });
    await agentState({ terminated: { exitCode: 1, reason: 'Error' } });
    assert.ok(pod.metadata?.uid);

    const managerText = await eventually(
      'the manager tracking the agent lease and counting the fenced pod',
      async () => {
        const text = await scrape(managerPort);
        return sample(text, 'leasehold_manager_leases_tracked') === 1 &&
          sample(text, 'leasehold_manager_watch_healthy{resource="leases"}') === 1 &&
          sample(text, 'leasehold_manager_agent_fences_total') === 1
          ? text
          : undefined;
      },
      20_000,
    );
    const agentText = await scrape(agentPort);
    assert.equal(sample(agentText, 'leasehold_agent_lease_held'), 1);

    // The shipped NFS server with its metrics on, as in every default-NFS share pod.
    const nfsBase = await nfsTempDir('monitoring');
    const nfsMetricsPort = await freePort();
    const nfs = spawnNfsServer({
      LEASEHOLD_NFS_EXPORT_PATH: nfsBase,
      LEASEHOLD_NFS_PSEUDO_PATH: '/export',
      // Off the export, as in a pod (the emptyDir on /run).
      LEASEHOLD_NFS_RUN_DIR: join(dir, 'nfs-run'),
      LEASEHOLD_NFS_BIND_ADDR: '127.0.0.1',
      LEASEHOLD_NFS_PORT: String(await freePort()),
      LEASEHOLD_NFS_METRICS_PORT: String(nfsMetricsPort),
    });
    await nfs.waitForLog('serving');
    const nfsText = await eventually('the NFS server reads its statistics', async () => {
      const text = await scrape(nfsMetricsPort);
      return sample(text, 'leasehold_nfs_stats_up') === 1 ? text : undefined;
    });

    const rendered = await helm([
      'template',
      'leasehold',
      chartDir,
      '--namespace',
      'leasehold-system',
      '--set',
      'prometheusRule.enabled=true,podMonitor.enabled=true,serviceMonitor.enabled=true,grafanaDashboard.enabled=true,prometheusRule.alertLabels.team=storage',
    ]);
    assert.equal(rendered.code, 0, rendered.stderr);
    const docs = k8s.loadAllYaml(rendered.stdout) as Array<{ kind?: string; spec?: never; data?: never }>;
    const ofKind = (kind: string) => {
      const doc = docs.find((d) => d?.kind === kind);
      if (!doc) throw new Error(`helm template rendered no ${kind}`);
      return doc as Record<string, unknown>;
    };
    const relabelTargets = (endpoints: Array<{ relabelings?: Array<{ targetLabel?: string }> }>) =>
      endpoints.flatMap((e) => (e.relabelings ?? []).map((r) => r.targetLabel ?? ''));
    const serviceMonitor = ofKind('ServiceMonitor').spec as { endpoints: [] };
    const podMonitor = ofKind('PodMonitor').spec as { podMetricsEndpoints: [] };
    targetLabels.set('manager', [...SERVICE_MONITOR_LABELS, ...relabelTargets(serviceMonitor.endpoints)]);
    const podEndpoint = (port: string) => {
      const endpoints = (
        podMonitor.podMetricsEndpoints as Array<{
          port?: string;
          relabelings?: Array<{ targetLabel?: string }>;
        }>
      ).filter((e) => e.port === port);
      assert.equal(endpoints.length, 1, `the PodMonitor scrapes port ${port}`);
      return [...POD_MONITOR_LABELS, ...relabelTargets(endpoints)];
    };
    targetLabels.set('agent', podEndpoint('agent-http'));
    targetLabels.set('nfs-server', podEndpoint('nfs-metrics'));
    assert.ok(targetLabels.get('agent')?.includes('share'), 'the PodMonitor gives agents a share label');

    catalogue = new Map();
    addScrape(catalogue, 'manager', managerText, targetLabels.get('manager') ?? []);
    addScrape(catalogue, 'agent', agentText, targetLabels.get('agent') ?? []);
    addScrape(catalogue, 'nfs-server', nfsText, targetLabels.get('nfs-server') ?? []);

    const prometheusRule = ofKind('PrometheusRule').spec as { groups: Array<{ rules: Rule[] }> };
    rules = prometheusRule.groups.flatMap((g) => g.rules);
    const configMap = docs.find(
      (d) => d?.kind === 'ConfigMap' && (d.data as Record<string, string> | undefined)?.['leasehold.json'],
    ) as { data: Record<string, string> } | undefined;
    if (!configMap) throw new Error('helm template rendered no dashboard ConfigMap');
    panels = panelsOf((JSON.parse(configMap.data['leasehold.json'] as string) as { panels: Panel[] }).panels);
  });

  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('every alert reads only metrics, labels and values the manager and the agent export', () => {
    assert.equal(rules.length, 7, rules.map((r) => r.alert).join(', '));
    const problems = rules.flatMap((r) => problemsOf(`alert ${r.alert}`, r.expr, catalogue));
    assert.deepEqual(problems, []);
  });

  it('a metric renamed in a component is caught, naming the alert and the metric', () => {
    const renamed: Catalogue = new Map(catalogue);
    renamed.delete('leasehold_manager_storm_guard_active');
    const problems = rules.flatMap((r) => problemsOf(`alert ${r.alert}`, r.expr, renamed));
    assert.equal(problems.length, 1, problems.join('\n'));
    assert.match(
      problems[0] ?? '',
      /^alert LeaseholdStormGuardPaused: metric leasehold_manager_storm_guard_active is not exported/,
    );
    // A renamed label value too (the manager's replacement_lost result).
    const values: Catalogue = new Map(catalogue);
    const failovers = values.get('leasehold_manager_failovers_total');
    assert.ok(failovers);
    values.set('leasehold_manager_failovers_total', {
      ...failovers,
      series: failovers.series.filter((s) => s.result !== 'replacement_lost'),
    });
    assert.match(
      rules.flatMap((r) => problemsOf(`alert ${r.alert}`, r.expr, values)).join('\n'),
      /^alert LeaseholdReplacementLost: leasehold_manager_failovers_total\{result="replacement_lost"\} matches no series/,
    );
  });

  it('promtool: the rendered rules parse; each alert fires on its case and stays quiet on the other', async () => {
    const rulesFile = join(dir, 'rules.json');
    await writeFile(rulesFile, JSON.stringify({ groups: [{ name: 'leasehold', rules }] }));
    const checked = promtool(['check', 'rules', rulesFile]);
    assert.equal(checked.code, 0, checked.output);

    const cases = alertCases(catalogue, targetLabels, rules);
    assert.deepEqual([...new Set(cases.map((t) => t.alert))].sort(), rules.map((r) => r.alert).sort());
    for (const rule of rules) {
      const fired = cases.filter((t) => t.alert === rule.alert && t.fires);
      assert.ok(fired.length > 0 && cases.some((t) => t.alert === rule.alert && !t.fires), rule.alert);
      // An annotation naming a label the alert does not carry would print nothing.
      for (const [, label] of JSON.stringify(rule.annotations ?? {}).matchAll(/\$labels\.(\w+)/g))
        for (const t of fired)
          assert.ok(
            label && label in (t.expLabels ?? {}),
            `${rule.alert}'s annotations name $labels.${label}`,
          );
    }
    const result = await runPromtoolTests(dir, rules, cases);
    assert.equal(result.code, 0, result.output);
  });

  it('promtool: the cases fail when a rule reads a renamed metric', async () => {
    const cases = alertCases(catalogue, targetLabels, rules);
    const broken = rules.map((r) =>
      r.alert === 'LeaseholdStormGuardPaused'
        ? { ...r, expr: r.expr.replace('storm_guard_active', 'storm_guard_on') }
        : r,
    );
    const result = await runPromtoolTests(dir, broken, cases);
    assert.notEqual(result.code, 0);
    assert.match(result.output, /alertname: LeaseholdStormGuardPaused/);
  });

  it('a case needing a series the scrape lacks fails, naming it', () => {
    const renamed: Catalogue = new Map(catalogue);
    renamed.delete('leasehold_manager_shares_awaiting_node_down');
    assert.throws(
      () => alertCases(renamed, targetLabels, rules),
      /needs leasehold_manager_shares_awaiting_node_down, which neither component's \/metrics exports/,
    );
  });

  it('failoverSlow.thresholdSeconds: the schema allows only bucket bounds the manager exports', async () => {
    const schema = JSON.parse(await readFile(join(repoRoot, 'charts/leasehold/values.schema.json'), 'utf8'));
    const allowed: number[] =
      schema.properties.prometheusRule.properties.failoverSlow.properties.thresholdSeconds.enum;
    const bounds = (catalogue.get('leasehold_manager_failover_phase_duration_seconds_bucket')?.series ?? [])
      .filter((s) => s.phase === 'total')
      .map((s) => s.le);
    assert.ok(bounds.length > 5);
    assert.deepEqual(
      allowed.filter((t) => !bounds.includes(String(t))),
      [],
      `bounds: ${bounds.join(', ')}`,
    );
    const refused = await helm([
      'template',
      'x',
      chartDir,
      '--set',
      'prometheusRule.failoverSlow.thresholdSeconds=45',
    ]);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /thresholdSeconds/);
  });

  it('dashboard: every panel query parses (promtool) and reads only what the components export', async () => {
    const queries = panels.flatMap((p) =>
      (p.targets ?? []).map((t) => ({
        where: `panel "${p.title}" ${t.refId}`,
        expr: asPromQL(t.expr, p.title),
      })),
    );
    assert.ok(queries.length >= 15, `${queries.length} queries`);
    assert.deepEqual(
      queries.flatMap((q) => problemsOf(q.where, q.expr, catalogue)),
      [],
    );
    const file = join(dir, 'panels.json');
    const asRules = (exprs: string[]) =>
      JSON.stringify({
        groups: [
          { name: 'panels', rules: exprs.map((expr, i) => ({ record: `leasehold:panel_query_${i}`, expr })) },
        ],
      });
    await writeFile(file, asRules(queries.map((q) => q.expr)));
    const checked = promtool(['check', 'rules', file]);
    assert.equal(checked.code, 0, checked.output);
    // The same check refuses a query that does not parse.
    await writeFile(file, asRules([...queries.map((q) => q.expr), `${queries[0]?.expr})`]));
    const refused = promtool(['check', 'rules', file]);
    assert.notEqual(refused.code, 0, refused.output);
    assert.match(refused.output, /parse error|unexpected/);
  });
});

// ---- promtool test cases ---------------------------------------------------------------

interface AlertCase {
  alert: string;
  fires: boolean;
  evalTime: string;
  series: Array<{ series: string; values: string }>;
  expLabels?: Record<string, string>;
}

/**
 * One promtool case per alert that fires and one where it must not, on series picked
 * from the catalogue by name and label subset: the label set given to promtool is the
 * scraped one plus target labels of target `n` (the values are invented, the names not).
 */
function alertCases(
  catalogue: Catalogue,
  targetLabels: Map<string, string[]>,
  rules: readonly Rule[],
): AlertCase[] {
  const pick = (metric: string, want: Record<string, string>, target: number, values: string) => {
    const entry = catalogue.get(metric);
    if (!entry) throw new Error(`an alert case needs ${metric}, which neither component's /metrics exports`);
    const scraped = entry.series.find((s) => Object.entries(want).every(([k, v]) => s[k] === v));
    if (!scraped)
      throw new Error(
        `an alert case needs ${metric}${JSON.stringify(want)}; ${entry.source} exports only ${JSON.stringify(entry.series)}`,
      );
    const labels: Record<string, string> = { ...scraped };
    for (const l of targetLabels.get(entry.source) ?? []) labels[l] = `${l}-${target}`;
    const text = Object.entries(labels)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(',');
    return { series: `${metric}{${text}}`, values, labels };
  };
  const ruleLabels = (alert: string) => rules.find((r) => r.alert === alert)?.labels ?? {};
  const threshold = /le=~"([0-9.]+)\(/.exec(
    rules.find((r) => r.alert === 'LeaseholdFailoverSlow')?.expr ?? '',
  )?.[1];
  if (!threshold) throw new Error('LeaseholdFailoverSlow: no le matcher found in its expression');
  const m = 'leasehold_manager_';
  const a = 'leasehold_agent_';
  const bucket = `${m}failover_phase_duration_seconds_bucket`;
  const count = `${m}failover_phase_duration_seconds_count`;
  const blind = pick(`${m}watch_healthy`, { resource: 'leases' }, 1, '0x15');
  const prometheus3Bucket = pick(bucket, { phase: 'total', le: threshold }, 1, '0x15');
  prometheus3Bucket.series = prometheus3Bucket.series.replace(`le="${threshold}"`, `le="${threshold}.0"`);
  const aggregated = (alert: string, fires: boolean, series: AlertCase['series']): AlertCase => ({
    alert,
    fires,
    evalTime: '10m',
    series,
    ...(fires ? { expLabels: ruleLabels(alert) } : {}),
  });
  return [
    // Two shares tracked, one agent holds its lease: one share not served.
    aggregated('LeaseholdShareNotServed', true, [
      pick(`${m}leases_tracked`, {}, 1, '2x15'),
      pick(`${a}lease_held`, {}, 1, '1x15'),
      pick(`${a}lease_held`, {}, 2, '0x15'),
    ]),
    // Every agent gone (pods ended, nodes lost): no agent series at all.
    aggregated('LeaseholdShareNotServed', true, [pick(`${m}leases_tracked`, {}, 1, '1x15')]),
    aggregated('LeaseholdShareNotServed', false, [
      pick(`${m}leases_tracked`, {}, 1, '2x15'),
      pick(`${a}lease_held`, {}, 1, '1x15'),
      pick(`${a}lease_held`, {}, 2, '1 1 1 1 1 0 1 1 1 1 1 1 1 1 1'),
    ]),
    // A failover completed at 5 m over the threshold; quiet: one within it.
    aggregated('LeaseholdFailoverSlow', true, [
      pick(count, { phase: 'total' }, 1, '0 0 0 0 0 1x10'),
      pick(bucket, { phase: 'total', le: threshold }, 1, '0x15'),
    ]),
    // Prometheus 3 stores le as a float ("60.0"): the rule must match it too.
    aggregated('LeaseholdFailoverSlow', true, [
      pick(count, { phase: 'total' }, 1, '0 0 0 0 0 1x10'),
      { series: prometheus3Bucket.series, values: '0x15' },
    ]),
    aggregated('LeaseholdFailoverSlow', false, [
      pick(count, { phase: 'total' }, 1, '0 0 0 0 0 1x10'),
      pick(bucket, { phase: 'total', le: threshold }, 1, '0 0 0 0 0 1x10'),
    ]),
    aggregated('LeaseholdShareAwaitingNodeDown', true, [
      pick(`${m}shares_awaiting_node_down`, {}, 1, '1x15'),
    ]),
    aggregated('LeaseholdShareAwaitingNodeDown', false, [
      pick(`${m}shares_awaiting_node_down`, {}, 1, '0x15'),
    ]),
    aggregated('LeaseholdStormGuardPaused', true, [pick(`${m}storm_guard_active`, {}, 1, '0 0 1x13')]),
    aggregated('LeaseholdStormGuardPaused', false, [pick(`${m}storm_guard_active`, {}, 1, '0x15')]),
    // Per manager and resource: the alert carries the series' labels.
    {
      alert: 'LeaseholdManagerBlind',
      fires: true,
      evalTime: '10m',
      series: [blind, pick(`${m}watch_healthy`, { resource: 'pods' }, 1, '1x15')],
      expLabels: { ...blind.labels, ...ruleLabels('LeaseholdManagerBlind') },
    },
    // A watch that broke and re-opened within a minute (the server ends watches routinely).
    aggregated('LeaseholdManagerBlind', false, [
      pick(`${m}watch_healthy`, { resource: 'leases' }, 1, '1 1 1 1 1 1 1 1 0 1 1 1 1 1 1'),
    ]),
    // Two managers count the same fenced pod: one alert.
    aggregated('LeaseholdAgentsFencing', true, [
      pick(`${m}agent_fences_total`, {}, 1, '0 0 0 1x12'),
      pick(`${m}agent_fences_total`, {}, 2, '0 0 0 1x12'),
    ]),
    aggregated('LeaseholdAgentsFencing', false, [pick(`${m}agent_fences_total`, {}, 1, '0x15')]),
    aggregated('LeaseholdReplacementLost', true, [
      pick(`${m}failovers_total`, { result: 'replacement_lost' }, 1, '0 0 0 1x12'),
    ]),
    aggregated('LeaseholdReplacementLost', false, [
      pick(`${m}failovers_total`, { result: 'replacement_lost' }, 1, '0x15'),
      pick(`${m}failovers_total`, { result: 'completed' }, 1, '0 0 0 1x12'),
    ]),
  ].map((t) => ({ ...t, series: t.series.map(({ series, values }) => ({ series, values })) }));
}

/**
 * Runs `promtool test rules` over `cases`. The rules go without their annotations: promtool
 * compares them verbatim and they hold $value; `promtool check rules` has parsed them.
 */
async function runPromtoolTests(
  dir: string,
  rules: readonly Rule[],
  cases: readonly AlertCase[],
): Promise<{ code: number | null; output: string }> {
  const bare = rules.map(({ annotations: _, ...rest }) => rest);
  await writeFile(
    join(dir, 'test-rules.json'),
    JSON.stringify({ groups: [{ name: 'leasehold', rules: bare }] }),
  );
  const tests = {
    rule_files: ['test-rules.json'],
    evaluation_interval: '1m',
    tests: cases.map((t) => ({
      interval: '1m',
      input_series: t.series,
      alert_rule_test: [
        {
          eval_time: t.evalTime,
          alertname: t.alert,
          exp_alerts: t.fires ? [{ exp_labels: t.expLabels ?? {} }] : [],
        },
      ],
    })),
  };
  const file = join(dir, 'tests.json');
  await writeFile(file, JSON.stringify(tests));
  return promtool(['test', 'rules', file]);
}
