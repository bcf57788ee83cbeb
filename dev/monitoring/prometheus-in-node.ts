/**
 * A real Prometheus (Debian's /usr/bin/prometheus) scraping a real-node system from
 * inside one node's network namespace (RealNode.spawnInNetwork): from there it reaches
 * the pods by pod IP over the fabric and the API server at the control plane's address,
 * as an in-cluster Prometheus would. The node's own relay binary (leasehold-netns-relay,
 * dev/node/relay) makes its HTTP API reachable on host loopback for the queries.
 *
 * Its targets: file-based discovery (Debian's build has no Kubernetes discovery), fed by
 * a loop here that lists every pod each second and rewrites the files when the chart's
 * selection of them (prometheus-config.ts scrapeTargets) changed, so a replacement pod
 * is scraped once its IP is known.
 * Guarantees: startPrometheusInNode resolves when Prometheus answers /-/ready through the
 * relay, or rejects having stopped what it started. Both processes are the node's
 * (spawnInNetwork: SIGKILLed with the node, at its stop, on SIGINT/SIGTERM, and by
 * pdeathsig when this process dies); stop() ends the discovery loop and them (SIGTERM,
 * then SIGKILL after 5 s) and is idempotent. Its data directory lies under `dir`, which the caller removes
 * (here: the cluster's directory, removed at the cluster's stop).
 * NB: the node must not be the one that crashes; its crash kills Prometheus.
 * Not guaranteed: samples of a target while the API server's discovery lags.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { type k8s, withDeadline } from '../../lib/kube-client.ts';
import { freePort } from '../net/free-port.ts';
import { nodeBinaries } from '../node/binaries.ts';
import type { RealNode } from '../node/node.ts';
import { prometheusConfig, scrapeTargets } from './prometheus-config.ts';

export interface NodePrometheus {
  /** http://127.0.0.1:<port> on host loopback. */
  url: string;
  /** GET of the HTTP API: the JSON answer. */
  get(path: string, params: Record<string, string>): Promise<unknown>;
  stop(): Promise<void>;
}

const PROMETHEUS = '/usr/bin/prometheus';
const PORT_IN_NODE = 9090;

async function ended(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exit = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const killed = await Promise.race([exit.then(() => true), sleep(5_000).then(() => false)]);
  if (!killed) {
    child.kill('SIGKILL');
    await exit;
  }
}

/** Writes each job's targets file when it changed (rename: Prometheus never reads half a file). */
async function writeTargets(core: k8s.CoreV1Api, dir: string, last: Map<string, string>): Promise<void> {
  const pods = await core.listPodForAllNamespaces({}, withDeadline(5_000));
  for (const [job, groups] of Object.entries(scrapeTargets(pods.items))) {
    const text = `${JSON.stringify(groups, null, 2)}\n`;
    if (last.get(job) === text) continue;
    await writeFile(join(dir, `${job}.json.tmp`), text);
    await rename(join(dir, `${job}.json.tmp`), join(dir, `${job}.json`));
    last.set(job, text);
  }
}

export async function startPrometheusInNode(
  core: k8s.CoreV1Api,
  node: RealNode,
  opts: { dir: string; intervalS: number },
): Promise<NodePrometheus> {
  const targetsDir = join(opts.dir, 'targets');
  await mkdir(targetsDir);
  const written = new Map<string, string>();
  await writeTargets(core, targetsDir, written);
  const configPath = join(opts.dir, 'prometheus.yml');
  await writeFile(configPath, prometheusConfig({ targetsDir, intervalS: opts.intervalS }));
  const logPath = join(opts.dir, 'prometheus.log');
  const children: ChildProcess[] = [];
  let stopped = false;
  const discovery = (async () => {
    while (!stopped) {
      await sleep(1_000);
      // A failed listing (the API server busy) keeps the last targets; the next one retries.
      if (!stopped) await writeTargets(core, targetsDir, written).catch(() => {});
    }
  })();
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await discovery;
    await Promise.all(children.map(ended));
  };
  try {
    const prom = node.spawnInNetwork(
      [
        PROMETHEUS,
        `--config.file=${configPath}`,
        `--storage.tsdb.path=${join(opts.dir, 'tsdb')}`,
        `--web.listen-address=127.0.0.1:${PORT_IN_NODE}`,
        '--log.level=warn',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    children.push(prom);
    let log = '';
    prom.stderr?.on('data', (d: Buffer) => {
      log += d.toString();
    });
    prom.once('exit', () => void writeFile(logPath, log).catch(() => {}));
    const hostPort = await freePort();
    const relay = node.spawnInNetwork(
      [
        join((await nodeBinaries()).dir, 'leasehold-netns-relay'),
        '-listen',
        `127.0.0.1:${hostPort}`,
        '-listen-netns',
        `/proc/${process.pid}/ns/net`,
        '-dial',
        `127.0.0.1:${PORT_IN_NODE}`,
      ],
      { stdio: 'ignore' },
    );
    children.push(relay);
    const url = `http://127.0.0.1:${hostPort}`;
    const deadline = performance.now() + 60_000;
    for (;;) {
      if (prom.exitCode !== null || prom.signalCode !== null)
        throw new LeaseholdError(
          'E_PROMETHEUS_START',
          `prometheus in ${node.name} exited: ${log.slice(-1500)}`,
        );
      const ready = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(2_000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (ready) break;
      if (performance.now() > deadline)
        throw new LeaseholdError(
          'E_PROMETHEUS_START',
          `prometheus in ${node.name} not ready within 60 s: ${log.slice(-1500)}`,
        );
      await sleep(500);
    }
    const get = async (path: string, params: Record<string, string>) => {
      const res = await fetch(`${url}${path}?${new URLSearchParams(params)}`, {
        signal: AbortSignal.timeout(30_000),
      });
      return res.json() as Promise<unknown>;
    };
    return { url, get, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
