/**
 * `npm run render-dashboard [-- OUT.png]`: the chart's Grafana dashboard rendered as a PNG
 * from a real run, without Grafana (it is not in Debian 12, npm or PyPI, the registries
 * this project installs from; built from the Go module proxy it would lack its frontend):
 *   1. the whole system on 2 real nodes (dev/system/real-system.ts) and one share on the
 *      shipped NFS server (the demo's createRealNfsShare and waitServingPod);
 *   2. a real Prometheus (Debian's) in the other node's network namespace, scraping the
 *      managers and the share pod's agent and NFS server every 5 s as the chart's
 *      monitors select them
 *      (prometheus-in-node.ts, prometheus-config.ts; the targets by file discovery from
 *      the pod list: Debian's build has no Kubernetes discovery);
 *   3. a Linux 6.12 kernel NFS client (dev/kernel-client) on that node mounts the share
 *      with its published options and runs a user's workloads (writes with fsync, reads,
 *      a lock, creates); a minute of steady state, then the serving node crashes (RealNode.crash) and the
 *      surviving node's manager fails the share over; 60 s after the replacement serves,
 *      every panel query of charts/leasehold/dashboards/leasehold.json (the file the
 *      chart's ConfigMap ships) is evaluated with query_range over the run (instant at
 *      its end for stat and table panels, as Grafana does), with Grafana's interval rules;
 *   4. the panels drawn into one SVG at their gridPos (dashboard-svg.ts), converted to PNG
 *      with rsvg-convert (Debian's librsvg2-bin), written to docs/images/dashboard.png
 *      unless OUT is given; the run's facts printed for the caption in docs/operations.md.
 * Every process started stops on every path: the client, Prometheus and its relay here, then the
 * system (its nodes' leftover checks); on SIGINT the components' own hooks do it.
 * Exit codes: 0 the PNG was written, 1 it was not.
 */
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from '../../lib/clock.ts';
import { say } from '../demo/progress.ts';
import { waitServingPod } from '../demo/real-pods.ts';
import { type KernelClient, startKernelClient } from '../kernel-client/machine.ts';
import { mountShare, startUserWorkloads } from '../kernel-client/user-workloads.ts';
import { createRealNfsShare } from '../system/real-share.ts';
import { type RealSystem, startRealSystem } from '../system/real-system.ts';
import { shareStatus } from '../system/shares.ts';
import { clockOf } from './dashboard-geometry.ts';
import { gridStep, panelsOf, queryOf, seriesName } from './dashboard-panels.ts';
import { type DashboardPicture, dashboardSvg, type PanelData } from './dashboard-svg.ts';
import { instantRows, seriesOnGrid } from './prometheus-config.ts';
import { type NodePrometheus, startPrometheusInNode } from './prometheus-in-node.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const DASHBOARD = join(ROOT, 'charts/leasehold/dashboards/leasehold.json');
const SHARE = 'share-nfs';
const SCRAPE_S = 5;
const STEADY_S = 60;
const AFTER_SERVED_S = 60;
// 1000 px: a PNG of about 290 KB (the run of 2026-12-07), under the ~300 KB asked for docs/.
const WIDTH_PX = 1000;

async function waitTargets(prom: NodePrometheus, want: number): Promise<void> {
  for (let i = 0; i < 120; i++) {
    const rows = instantRows(await prom.get('/api/v1/query', { query: 'up == 1' }), 'up == 1');
    if (rows.length >= want) return;
    await sleep(1_000);
  }
  throw new Error(`Prometheus scraped fewer than ${want} targets up within 120 s`);
}

async function evaluate(
  prom: NodePrometheus,
  fromS: number,
  toS: number,
): Promise<DashboardPicture['panels']> {
  const panels = panelsOf(JSON.parse(await readFile(DASHBOARD, 'utf8')));
  // The plot of a half-width panel: what Grafana divides the range by.
  const stepS = gridStep(toS - fromS, WIDTH_PX / 2 - 70, SCRAPE_S);
  const iv = { stepS, scrapeS: SCRAPE_S, rangeS: toS - fromS };
  const grid = { fromS, toS, stepS };
  const out: DashboardPicture['panels'] = [];
  for (const panel of panels) {
    let data: PanelData;
    if (panel.type === 'row') data = { kind: 'row' };
    else if (panel.type === 'timeseries') {
      const series = [];
      for (const t of panel.targets) {
        const q = queryOf(t.expr, iv);
        const body = await prom.get('/api/v1/query_range', {
          query: q,
          start: String(fromS),
          end: String(toS),
          step: String(stepS),
        });
        series.push(...seriesOnGrid(body, q, grid, (l) => seriesName(l, t.legendFormat, t.expr)));
      }
      data = { kind: 'timeseries', series };
    } else {
      const q = queryOf(panel.targets[0]?.expr ?? '', iv);
      const rows = instantRows(await prom.get('/api/v1/query', { query: q, time: String(toS) }), q);
      data =
        panel.type === 'stat'
          ? { kind: 'stat', value: rows[0]?.value }
          : { kind: 'table', rows: rows.map((r) => r.labels) };
    }
    out.push({ panel, data });
  }
  return out;
}

/** The picture as SVG, converted to PNG by rsvg-convert (Debian's librsvg2-bin). */
async function writePng(picture: DashboardPicture, outPath: string): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-dashboard-'));
  try {
    const svgPath = join(dir, 'dashboard.svg');
    await writeFile(svgPath, dashboardSvg(picture));
    const conv = spawnSync('rsvg-convert', ['--format=png', `--output=${outPath}`, svgPath], {
      encoding: 'utf8',
    });
    if (conv.error || conv.status !== 0)
      throw new Error(
        `rsvg-convert failed (${conv.error?.message ?? conv.stderr}); install it with: bash dev/debian-packages.sh render-dashboard`,
      );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A saved picture (JSON writes NaN as null: a gap again). */
function pictureOf(text: string): DashboardPicture {
  return JSON.parse(text, (_, v) => (v === null ? Number.NaN : v)) as DashboardPicture;
}

async function run(outPath: string): Promise<void> {
  let sys: RealSystem | undefined;
  let prom: NodePrometheus | undefined;
  let client: KernelClient | undefined;
  try {
    say('starting the control plane and 2 real nodes with the chart installed');
    sys = await startRealSystem({
      nodes: 2,
      progress: say,
      keepDirs: process.env.LEASEHOLD_KEEP_CLUSTER === '1',
    });
    say(`creating ${SHARE} (shipped NFS server on a CSI volume)`);
    await createRealNfsShare(sys, SHARE);
    const before = await waitServingPod(sys, SHARE, 180_000);
    const observer = sys.nodes.find((n) => n.name !== before.node);
    if (!observer) throw new Error('no node other than the serving one for Prometheus');
    say(
      `${SHARE} served by ${before.pod} on ${before.node}; starting Prometheus in ${observer.name}'s network`,
    );
    prom = await startPrometheusInNode(sys.core, observer, {
      dir: await mkdtemp(join(sys.cluster.dir, 'prometheus-')),
      intervalS: SCRAPE_S,
    });
    await waitTargets(prom, 3);
    // A user's NFS client on the other node (Linux 6.12, the published options), so the
    // NFS panels show a share in use: writes with fsync, reads, a lock, creates.
    const exported = (await shareStatus(sys, SHARE)).export;
    if (!exported?.source || !exported.mountOptions) throw new Error(`${SHARE} has no status.export`);
    client = await startKernelClient(observer, { name: 'kc1', index: 1, kernel: '6.12' });
    await mountShare(client, exported.source, exported.mountOptions);
    await startUserWorkloads(client);
    say(`a Linux 6.12 NFS client on ${observer.name} mounted ${exported.source} and writes`);
    const fromS = Math.ceil(Date.now() / 1000 / SCRAPE_S) * SCRAPE_S;
    say(`2 managers and 1 agent scraped every ${SCRAPE_S} s; ${STEADY_S} s of steady state`);
    await sleep(STEADY_S * 1000);
    say(`crashing ${before.node}`);
    const crashAt = Date.now();
    await sys.node(before.node).crash();
    const after = await waitServingPod(sys, SHARE, 180_000, before.pod);
    const servedS = (after.servingWall - crashAt) / 1000;
    say(
      `${SHARE} served again by ${after.pod} on ${after.node}, ${servedS.toFixed(1)} s after the crash; ${AFTER_SERVED_S} s more`,
    );
    await sleep(AFTER_SERVED_S * 1000);
    const toS = Math.floor(Date.now() / 1000 / SCRAPE_S) * SCRAPE_S;
    const panels = await evaluate(prom, fromS, toS);
    const day = new Date(crashAt).toISOString().slice(0, 10);
    const picture: DashboardPicture = {
      title: 'leasehold (the chart’s Grafana dashboard, drawn without Grafana)',
      notes: [
        `A real run on ${day}: 2 real nodes, one share, a Linux 6.12 NFS client writing on ${observer.name}; ${before.node} crashed at ${clockOf(crashAt)} UTC, the share was served from ${after.node} ${servedS.toFixed(1)} s later.`,
        `Queries of charts/leasehold/dashboards/leasehold.json against a real Prometheus (scrape ${SCRAPE_S} s); drawn by dev/monitoring/render-dashboard.ts, not by Grafana.`,
      ],
      fromMs: fromS * 1000,
      toMs: toS * 1000,
      widthPx: WIDTH_PX,
      marker: { atMs: crashAt, label: `${before.node} crashed` },
      panels,
    };
    await prom.stop();
    // Kept for `--picture`: the drawing can be changed and redrawn from the same run.
    const saved = join(
      tmpdir(),
      `leasehold-dashboard-${new Date(crashAt).toISOString().replace(/[:.]/g, '-')}.json`,
    );
    await writeFile(saved, JSON.stringify(picture));
    say(`the run's query results: ${saved} (redraw with --picture ${saved})`);
    await writePng(picture, outPath);
    const facts = panels
      .filter((p) => p.data.kind === 'timeseries')
      .map(({ panel, data }) => {
        const peaks =
          data.kind === 'timeseries'
            ? data.series.map(
                (s) => `${s.name} max ${Math.max(...s.points.map(([, v]) => v).filter(Number.isFinite))}`,
              )
            : [];
        return `  ${panel.title}: ${peaks.join('; ') || 'no series'}`;
      });
    process.stdout.write(
      `\nrun ${day}, ${clockOf(fromS * 1000)}–${clockOf(toS * 1000)} UTC (step ${gridStep(toS - fromS, WIDTH_PX / 2 - 70, SCRAPE_S)} s); ${before.node} crashed at ${clockOf(crashAt)} UTC; ${after.pod} on ${after.node} served ${servedS.toFixed(1)} s later\n${facts.join('\n')}\n`,
    );
  } finally {
    say(
      'stopping Prometheus and the system (nodes with their leftover checks, CSI controller, control plane)',
    );
    await client?.stop();
    await prom?.stop();
    await sys?.stop();
  }
}

const argv = process.argv.slice(2);
const fromSaved = argv[0] === '--picture' ? argv[1] : undefined;
const out = resolve((fromSaved ? argv[2] : argv[0]) ?? join(ROOT, 'docs/images/dashboard.png'));
try {
  if (fromSaved) await writePng(pictureOf(await readFile(fromSaved, 'utf8')), out);
  else await run(out);
  process.stdout.write(`${out}: ${(await stat(out)).size} bytes\n`);
  say(`done: ${out}`);
} catch (err) {
  process.stderr.write(`render-dashboard failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
}
