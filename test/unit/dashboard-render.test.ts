/**
 * The pure parts of dev/monitoring's dashboard render (npm run render-dashboard): the
 * chart's dashboard JSON read into panels, Grafana's interval and legend rules, the grid
 * layout, the axes, stacking, the SVG text, the Prometheus scrape config against the
 * chart's PodMonitor, and Prometheus' answers on the step grid. No cluster, no process.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  clockOf,
  formatValue,
  gridHeight,
  panelRect,
  stack,
  timeTicks,
  valueAxis,
} from '../../dev/monitoring/dashboard-geometry.ts';
import {
  gridStep,
  type Panel,
  panelsOf,
  queryOf,
  seriesName,
} from '../../dev/monitoring/dashboard-panels.ts';
import {
  dashboardSvg,
  escapeXml,
  legendLayout,
  runsOf,
  thresholdColor,
} from '../../dev/monitoring/dashboard-svg.ts';
import {
  AGENTS_JOB,
  instantRows,
  MANAGERS_JOB,
  prometheusConfig,
  scrapeTargets,
  seriesOnGrid,
} from '../../dev/monitoring/prometheus-config.ts';
import type { k8s } from '../../lib/kube-client.ts';
import { repoRoot } from '../support/tools.ts';

const chartDashboard = JSON.parse(
  readFileSync(join(repoRoot, 'charts/leasehold/dashboards/leasehold.json'), 'utf8'),
) as unknown;

describe('the dashboard JSON read into panels', () => {
  it("reads every panel of the chart's dashboard, each with what it is drawn with", () => {
    const panels = panelsOf(chartDashboard);
    const raw = (chartDashboard as { panels: unknown[] }).panels;
    assert.ok(panels.length >= raw.length);
    for (const p of panels) {
      if (p.type === 'row') continue;
      assert.ok(p.targets.length > 0, p.title);
      for (const t of p.targets)
        assert.doesNotThrow(() => queryOf(t.expr, { stepS: 5, scrapeS: 5, rangeS: 300 }));
    }
    const table = panels.find((p) => p.type === 'table');
    assert.deepEqual(table?.type === 'table' && table.columns, ['namespace', 'share', 'node', 'pod']);
    const phases = panels.find((p) => p.title.startsWith('Failover phases'));
    assert.ok(phases?.type === 'timeseries' && phases.bars && phases.stacked && phases.unit === 's');
  });

  it("flattens a collapsed row's panels after the row", () => {
    const gp = { x: 0, y: 0, w: 24, h: 1 };
    const panels = panelsOf({
      panels: [
        {
          id: 1,
          type: 'row',
          title: 'R',
          gridPos: gp,
          panels: [{ id: 2, type: 'stat', title: 'S', gridPos: gp, targets: [{ refId: 'A', expr: 'up' }] }],
        },
      ],
    });
    assert.deepEqual(
      panels.map((p) => p.title),
      ['R', 'S'],
    );
  });

  it('refuses what it cannot draw, naming the panel', () => {
    const gp = { x: 0, y: 0, w: 6, h: 4 };
    assert.throws(
      () => panelsOf({ panels: [{ id: 7, type: 'heatmap', title: 'H', gridPos: gp }] }),
      /"H" \(id 7\).*heatmap/,
    );
    assert.throws(
      () =>
        panelsOf({
          panels: [
            {
              id: 8,
              type: 'stat',
              title: 'U',
              gridPos: gp,
              targets: [{ expr: 'up' }],
              fieldConfig: { defaults: { unit: 'bytes' } },
            },
          ],
        }),
      /"U".*unit "bytes"/,
    );
    assert.throws(
      () => panelsOf({ panels: [{ id: 9, type: 'stat', title: 'N', gridPos: gp }] }),
      /"N".*no targets/,
    );
    assert.throws(
      () => panelsOf({ panels: [{ id: 9, type: 'row', title: 'G', gridPos: { x: 0, y: 0, w: -1, h: 1 } }] }),
      /gridPos/,
    );
  });
});

describe("Grafana's query and legend rules", () => {
  it('$__rate_interval is max(step + scrape, 4 × scrape); $__interval the step; $__range the range', () => {
    assert.equal(queryOf('rate(x[$__rate_interval])', { stepS: 5, scrapeS: 5, rangeS: 60 }), 'rate(x[20s])');
    assert.equal(queryOf('rate(x[$__rate_interval])', { stepS: 30, scrapeS: 5, rangeS: 60 }), 'rate(x[35s])');
    assert.equal(
      queryOf('x[$__interval] + y[$__range]', { stepS: 7, scrapeS: 5, rangeS: 60 }),
      'x[7s] + y[60s]',
    );
    assert.throws(
      () => queryOf('x{a="$node"}', { stepS: 5, scrapeS: 5, rangeS: 60 }),
      /unknown Grafana variable \$node/,
    );
  });

  it('the step: range over width, never below the scrape interval', () => {
    assert.equal(gridStep(300, 500, 5), 5);
    assert.equal(gridStep(6000, 500, 5), 12);
    assert.throws(() => gridStep(0, 500, 5), /all > 0/);
  });

  it('a legend from legendFormat, or the series name and labels, or the expression', () => {
    const labels = { __name__: 'up', node: 'real-1', pod: 'p' };
    assert.equal(seriesName(labels, '{{node}} {{ pod }}', 'e'), 'real-1 p');
    assert.equal(seriesName(labels, '{{missing}}x', 'e'), 'x');
    assert.equal(seriesName(labels, undefined, 'e'), 'up{node="real-1", pod="p"}');
    assert.equal(seriesName({}, '', 'max(x)'), 'max(x)');
  });
});

describe('the layout and the axes', () => {
  it("a gridPos at Grafana's 24 columns, 30 px rows and 8 px gaps", () => {
    // 1200 px: columns of (1200 - 23 × 8) / 24 = 42.33 px.
    const r = panelRect({ x: 12, y: 1, w: 12, h: 8 }, 1200, 10);
    assert.ok(Math.abs(r.x - 12 * (1016 / 24 + 8)) < 1e-9);
    assert.equal(r.y, 10 + 38);
    assert.ok(Math.abs(r.x + r.w - 1200) < 1e-9, 'the right half ends at the right edge');
    assert.equal(r.h, 8 * 30 + 7 * 8);
    assert.throws(() => panelRect({ x: 20, y: 0, w: 6, h: 1 }, 1200), /within 24 columns/);
    assert.equal(
      gridHeight([
        { x: 0, y: 0, w: 1, h: 1 },
        { x: 0, y: 1, w: 1, h: 4 },
      ]),
      5 * 38 - 8,
    );
  });

  it('the value axis spans the data on 1-2-5 ticks, 0..1 without data, from the panel min', () => {
    const a = valueAxis([0.3, 7.2], 0, 4);
    assert.equal(a.min, 0);
    assert.ok(a.max >= 7.2);
    assert.deepEqual(a.ticks, [0, 2, 4, 6, 8]);
    assert.deepEqual(valueAxis([], 0).ticks.at(-1), 1);
    assert.deepEqual(valueAxis([Number.NaN], undefined), { min: 0, max: 1, ticks: [0, 0.5, 1] });
    const neg = valueAxis([-3, 1], undefined, 4);
    assert.ok(neg.min <= -3 && neg.max >= 1);
  });

  it('time ticks on whole steps inside the range; clock times in UTC', () => {
    const from = Date.UTC(2026, 0, 1, 10, 0, 7);
    const ticks = timeTicks(from, from + 240_000, 5);
    assert.ok(ticks.length <= 5 && ticks.length >= 2);
    assert.ok(ticks.every((t) => t >= from && t <= from + 240_000 && t % 60_000 === 0));
    assert.equal(clockOf(Date.UTC(2026, 0, 1, 9, 5, 3)), '09:05:03');
    assert.throws(() => timeTicks(5, 5, 3), /from < to/);
  });

  it('values with their unit', () => {
    assert.equal(formatValue(0.25, 's'), '250 ms');
    assert.equal(formatValue(4.0812, 's'), '4.08 s');
    assert.equal(formatValue(0, 's'), '0 s');
    assert.equal(formatValue(12.345, 'ops'), '12.3 ops/s');
    assert.equal(formatValue(123.4, 'none'), '123');
    assert.equal(formatValue(Number.NaN, 'none'), '–');
  });

  it('stacking adds each series to the ones before it at the same time; a gap stays a gap', () => {
    const s = stack([
      {
        name: 'a',
        points: [
          [0, 1],
          [5, 2],
        ],
      },
      {
        name: 'b',
        points: [
          [0, 3],
          [5, Number.NaN],
        ],
      },
    ]);
    assert.deepEqual(s[1]?.points[0], [0, 1, 4]);
    assert.ok(Number.isNaN(s[1]?.points[1]?.[2]));
  });
});

describe('the SVG', () => {
  const gp = (x: number, y: number, w: number, h: number) => ({ x, y, w, h });
  const panels: Panel[] = [
    { id: 1, type: 'row', title: 'Shares & <more>', gridPos: gp(0, 0, 24, 1) },
    {
      id: 2,
      type: 'stat',
      title: 'Not served',
      gridPos: gp(0, 1, 6, 4),
      unit: 'none',
      targets: [],
      thresholds: [
        { color: 'green', value: null },
        { color: 'red', value: 1 },
      ],
    },
    {
      id: 3,
      type: 'timeseries',
      title: 'Lag',
      gridPos: gp(0, 5, 12, 8),
      unit: 's',
      targets: [],
      bars: false,
      stacked: false,
      min: 0,
    },
    {
      id: 4,
      type: 'table',
      title: 'Where',
      gridPos: gp(12, 5, 12, 8),
      targets: [],
      columns: ['share', 'node'],
    },
  ];
  const svg = dashboardSvg({
    title: 'leasehold',
    notes: ['a "real" run'],
    fromMs: 0,
    toMs: 60_000,
    widthPx: 1200,
    marker: { atMs: 30_000, label: 'real-2 crashed' },
    panels: [
      { panel: panels[0] as Panel, data: { kind: 'row' } },
      { panel: panels[1] as Panel, data: { kind: 'stat', value: 1 } },
      {
        panel: panels[2] as Panel,
        data: {
          kind: 'timeseries',
          series: [
            {
              name: 'p99',
              points: [
                [0, 1],
                [5_000, 2],
                [10_000, Number.NaN],
                [15_000, 0.5],
                [20_000, 0.4],
              ],
            },
          ],
        },
      },
      { panel: panels[3] as Panel, data: { kind: 'table', rows: [{ share: 'share-nfs', node: 'real-1' }] } },
    ],
  });

  it('draws every panel title, text escaped, the stat in its threshold colour, the table rows', () => {
    assert.ok(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"'));
    assert.ok(svg.includes('Shares &amp; &lt;more&gt;') && !svg.includes('<more>'));
    assert.ok(svg.includes('a &quot;real&quot; run'));
    assert.match(svg, /fill="#f2495c">1<\/text>/);
    assert.ok(svg.includes('>share-nfs<') && svg.includes('>real-1<'));
    assert.ok(svg.includes('>real-2 crashed<'));
    assert.equal(svg.split('<text').length - 1, svg.split('</text>').length - 1);
  });

  it('a gap in a series breaks its line; the legend names it; the axis is in the unit', () => {
    assert.equal(svg.split('<polyline').length - 1, 2);
    assert.ok(svg.includes('>p99<'));
    assert.ok(svg.includes('>2 s<') && svg.includes('>0 s<'));
  });

  it('legends wrap to the next row when the panel is full', () => {
    const rows = legendLayout(['aaaaaaaaaa', 'bbbbbbbbbb', 'cccccccccc'], 200);
    assert.deepEqual(
      rows.map((l) => l.row),
      [0, 0, 1],
    );
    assert.equal(rows[2]?.x, 0);
    assert.deepEqual(
      runsOf([
        [0, 0, 1],
        [1, 0, Number.NaN],
        [2, 0, 3],
      ] as Array<[number, number, number]>).map((r) => r.length),
      [1, 1],
    );
  });

  it('helpers: XML escaping and threshold colours', () => {
    assert.equal(escapeXml(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;');
    const steps = [
      { color: 'green', value: null },
      { color: 'red', value: 1 },
    ];
    assert.equal(thresholdColor(steps, 0), '#73bf69');
    assert.equal(thresholdColor(steps, 3), '#f2495c');
    assert.equal(thresholdColor(steps, undefined), '#73bf69');
  });
});

describe('Prometheus: the scrape config and the answers', () => {
  const monitor = readFileSync(join(repoRoot, 'charts/leasehold/templates/podmonitor.yaml'), 'utf8');
  const selector = monitor.slice(monitor.indexOf('matchLabels:'), monitor.indexOf('podMetricsEndpoints:'));
  const selectedBy = Object.fromEntries(
    [...selector.matchAll(/^\s+(app\.kubernetes\.io\/[\w-]+): (\S+)$/gm)].map(([, k, v]) => [k, v]),
  );
  // The template ranges over its ports: `list "agent-http" "nfs-metrics"`.
  const ports = [...(/list((?: "[\w-]+")+)/.exec(monitor)?.[1] ?? '').matchAll(/"([\w-]+)"/g)].map(
    (m) => m[1] ?? '',
  );
  const port = ports[0] ?? '';
  const sharePod = (labels: Record<string, string>, portName = port, phase = 'Running'): k8s.V1Pod => ({
    metadata: {
      namespace: 'shares',
      name: 'share-nfs-x',
      labels: { ...labels, 'leasehold.dev/share-manager': 'share-nfs' },
    },
    spec: {
      nodeName: 'real-1',
      initContainers: [{ name: 'agent', ports: [{ name: portName, containerPort: 8081 }] }],
      containers: [{ name: 'nfs', ports: [{ name: 'nfs', containerPort: 2049 }] }],
    },
    status: { podIP: '10.244.1.5', phase },
  });

  it("scrapes the agents the chart's PodMonitor selects, at its port, with its labels", () => {
    assert.deepEqual(ports, ['agent-http', 'nfs-metrics'], "the PodMonitor's ports");
    const both = sharePod(selectedBy);
    both.spec?.containers[0]?.ports?.push({ name: ports[1] ?? '', containerPort: 9587 });
    assert.deepEqual(
      (scrapeTargets([both])[AGENTS_JOB] ?? []).map((g) => `${g.labels.container}@${g.targets}`),
      ['agent@10.244.1.5:8081', 'nfs@10.244.1.5:9587'],
      'the agent and the NFS server of the pod',
    );
    assert.equal(Object.keys(selectedBy).length, 2, 'the PodMonitor selects by two labels');
    const [group, ...more] = scrapeTargets([sharePod(selectedBy)])[AGENTS_JOB] ?? [];
    assert.equal(more.length, 0);
    assert.deepEqual(group?.targets, ['10.244.1.5:8081']);
    for (const [, target = ''] of monitor.matchAll(/targetLabel: (\w+)/g))
      assert.ok(group?.labels[target], `the PodMonitor's label ${target}`);
    assert.deepEqual(group?.labels, {
      namespace: 'shares',
      pod: 'share-nfs-x',
      container: 'agent',
      share: 'share-nfs',
      node: 'real-1',
    });
    for (const label of Object.keys(selectedBy)) {
      const { [label]: _, ...without } = selectedBy;
      assert.deepEqual(scrapeTargets([sharePod(without)])[AGENTS_JOB], [], `a pod without ${label}`);
    }
    assert.deepEqual(scrapeTargets([sharePod(selectedBy, 'other')])[AGENTS_JOB], [], 'another port');
    assert.deepEqual(
      scrapeTargets([sharePod(selectedBy, port, 'Failed')])[AGENTS_JOB],
      [],
      'a pod that ended',
    );
  });

  it('scrapes the managers at their port http with the pod label the dashboard groups by', () => {
    const manager: k8s.V1Pod = {
      metadata: {
        namespace: 'leasehold-system',
        name: 'leasehold-manager-a',
        labels: { 'app.kubernetes.io/component': 'manager', 'app.kubernetes.io/name': 'leasehold' },
      },
      spec: {
        nodeName: 'real-2',
        containers: [{ name: 'manager', ports: [{ name: 'http', containerPort: 8090 }] }],
      },
      status: { podIP: '10.244.2.3', phase: 'Running' },
    };
    assert.deepEqual(scrapeTargets([manager])[MANAGERS_JOB], [
      {
        targets: ['10.244.2.3:8090'],
        labels: { namespace: 'leasehold-system', pod: 'leasehold-manager-a', container: 'manager' },
      },
    ]);
    const config = JSON.parse(prometheusConfig({ targetsDir: '/t', intervalS: 5 })) as {
      global: { scrape_interval: string };
      scrape_configs: Array<{ job_name: string; file_sd_configs: Array<{ files: string[] }> }>;
    };
    assert.equal(config.global.scrape_interval, '5s');
    assert.deepEqual(
      config.scrape_configs.map((j) => [j.job_name, j.file_sd_configs[0]?.files]),
      [AGENTS_JOB, MANAGERS_JOB].map((j) => [j, [`/t/${j}.json`]]),
    );
  });

  it('a range answer on the step grid, a missing step a gap; a failed answer quoted', () => {
    const body = {
      status: 'success',
      data: {
        resultType: 'matrix',
        result: [
          {
            metric: { node: 'real-1' },
            values: [
              [100, '1'],
              [110, '0'],
            ],
          },
        ],
      },
    };
    const [s] = seriesOnGrid(body, 'q', { fromS: 100, toS: 110, stepS: 5 }, (l) => l.node ?? '');
    assert.equal(s?.name, 'real-1');
    assert.deepEqual(
      s?.points.map(([t]) => t),
      [100_000, 105_000, 110_000],
    );
    assert.ok(Number.isNaN(s?.points[1]?.[1]));
    assert.throws(
      () =>
        seriesOnGrid(
          { status: 'error', error: 'parse error' },
          'bad(',
          { fromS: 0, toS: 5, stepS: 5 },
          () => '',
        ),
      /parse error.*bad\(/,
    );
    assert.deepEqual(
      instantRows(
        { status: 'success', data: { resultType: 'vector', result: [{ metric: {}, value: [1, '2'] }] } },
        'q',
      ),
      [{ labels: {}, value: 2 }],
    );
  });
});
