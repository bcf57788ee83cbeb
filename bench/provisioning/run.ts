/**
 * Benchmark (not a test): N claims of the chart's StorageClass at once (issue 26 item 6).
 *
 * A real local API server, etcd and controller manager (the PV controller binds), no
 * scheduler (share pods stay Pending: status.export needs only the Service's ClusterIP);
 * the chart's manager RBAC and StorageClass rendered by helm; one manager
 * (dist/manager/main.js) with exactly that RBAC and provisioning on. Side by side in the
 * same run, the floor: N claims bound by the PV controller alone to N PVs made
 * beforehand (what binding costs with no provisioner at all).
 * Per phase: time from a claim's create to Bound (p50, p95, max); the manager's CPU (share
 * of one core over the phase, /proc) and peak RSS; the manager's API requests, counted
 * exactly from the API server's audit log (user = its ServiceAccount), per claim and by
 * verb and resource. Then every claim deleted: the time until no ShareManager, backing
 * claim or PV of theirs is left, and its requests; "left" must be 0.
 * Not modelled: backing volumes (the backing claims stay unbound here: no CSI driver),
 * share pods running (no nodes), several managers (one leader does the work; followers
 * only keep their watches).
 *
 * With `--memory-limit <MiB>` (default 256, the chart's manager.resources limit; 0 = none)
 * the manager runs in a cgroup v1 memory cgroup of that limit, as its container would, and
 * the result says whether it hit the limit (failcnt) or was OOM-killed.
 *
 *   npm run build && npm run bench -- provisioning [N] [--memory-limit MiB]   (default N = 100)
 * Writes bench/results/provisioning.json.
 */
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { startCluster } from '../../dev/cluster/cluster.ts';
import { CHART_DIR, runTool } from '../../dev/helm/helm.ts';
import { applyChartManagerIdentity } from '../../dev/system/chart-manager-identity.ts';
import { sleep } from '../../lib/clock.ts';
import { PROVISIONER_LEASE } from '../../manager/provisioning/provisioner-leadership.ts';
import { cpuSeconds, rssMiB } from '../manager-scale/proc-stats.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const args = process.argv.slice(2);
const limitAt = args.indexOf('--memory-limit');
const MEMORY_LIMIT_MIB = limitAt >= 0 ? Number(args.splice(limitAt, 2)[1]) : 256;
const N = Number(args[0] ?? 100);
if (!Number.isInteger(MEMORY_LIMIT_MIB) || MEMORY_LIMIT_MIB < 0) {
  process.stderr.write('provisioning: --memory-limit: a whole number of MiB (0 = none)\n');
  process.exit(2);
}
const CGROUP = `/sys/fs/cgroup/memory/leasehold-bench-provisioning-${process.pid}`;
if (!Number.isInteger(N) || N < 1 || N > 5000) {
  process.stderr.write(`provisioning: N=${process.argv[2]}: a whole number from 1 to 5000\n`);
  process.exit(2);
}
const SYSTEM = 'leasehold-system';
const MANAGER_USER = `system:serviceaccount:${SYSTEM}:leasehold-manager`;
const PHASE_TIMEOUT_MS = 10 * 60_000;

interface Phase {
  claims: number;
  boundMsP50: number;
  boundMsP95: number;
  boundMsMax: number;
  managerCpuPercentOfCore: number | null;
  managerRssMiBPeak: number | null;
  managerRequests: number | null;
  managerRequestsPerClaim: number | null;
  managerRequestsBy: Record<string, number>;
}

function percentile(sorted: number[], p: number): number {
  return sorted.length === 0
    ? Number.NaN
    : (sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number);
}
const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

/** The manager's requests in the audit log between two wall times, by `verb resource[/sub]`. */
async function managerRequests(
  auditPath: string,
  fromMs: number,
  toMs: number,
): Promise<Record<string, number>> {
  const by: Record<string, number> = {};
  for (const line of (await readFile(auditPath, 'utf8')).split('\n')) {
    if (!line.includes(MANAGER_USER)) continue;
    const e = JSON.parse(line) as {
      user?: { username?: string };
      verb?: string;
      objectRef?: { resource?: string; subresource?: string };
      requestReceivedTimestamp?: string;
      requestURI?: string;
      stage?: string;
    };
    if (e.user?.username !== MANAGER_USER) continue;
    // One event per request: ResponseComplete, or ResponseStarted for a watch.
    if (e.stage !== 'ResponseComplete' && !(e.stage === 'ResponseStarted' && e.verb === 'watch')) continue;
    const at = Date.parse(e.requestReceivedTimestamp ?? '');
    if (!(at >= fromMs && at <= toMs)) continue;
    const dryRun = e.requestURI?.includes('dryRun=') ? ' (dry run)' : '';
    const key = `${e.verb} ${e.objectRef?.resource ?? '?'}${e.objectRef?.subresource ? `/${e.objectRef.subresource}` : ''}${dryRun}`;
    by[key] = (by[key] ?? 0) + 1;
  }
  return by;
}

/** Creates the claims at once; resolves with each claim's time to Bound (ms). */
async function claimsToBound(
  core: k8s.CoreV1Api,
  namespace: string,
  storageClassName: string,
  volumeName?: (i: number) => string,
): Promise<number[]> {
  const createdAt = new Map<string, number>();
  await Promise.all(
    Array.from({ length: N }, async (_, i) => {
      const name = `claim-${i}`;
      createdAt.set(name, performance.now());
      await core.createNamespacedPersistentVolumeClaim({
        namespace,
        body: {
          metadata: { name },
          spec: {
            accessModes: ['ReadWriteMany'],
            storageClassName,
            resources: { requests: { storage: '1Gi' } },
            ...(volumeName ? { volumeName: volumeName(i) } : {}),
          },
        },
      });
    }),
  );
  const boundAt = new Map<string, number>();
  const deadline = performance.now() + PHASE_TIMEOUT_MS;
  while (boundAt.size < N) {
    if (performance.now() > deadline)
      throw new Error(`${N - boundAt.size} claims not Bound after ${PHASE_TIMEOUT_MS} ms`);
    for (const c of (await core.listNamespacedPersistentVolumeClaim({ namespace })).items)
      if (c.status?.phase === 'Bound' && !boundAt.has(c.metadata?.name ?? ''))
        boundAt.set(c.metadata?.name ?? '', performance.now());
    await sleep(100);
  }
  return [...boundAt].map(([name, at]) => at - (createdAt.get(name) ?? at)).sort((a, b) => a - b);
}

async function main(): Promise<void> {
  const cluster = await startCluster({ scheduler: false, audit: true });
  const auditPath = join(cluster.dir, 'logs', 'audit.log');
  const kc = cluster.kubeConfig;
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const objects = kc.makeApiClient(k8s.CustomObjectsApi);
  let manager: ReturnType<typeof spawn> | undefined;
  try {
    const kubectl = async (args: string[], input?: string) => {
      const r = await runTool(cluster.kubectl, ['--kubeconfig', cluster.kubeconfigPath, ...args], { input });
      if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.stderr}`);
    };
    await kubectl(['apply', '-f', join(CHART_DIR, 'crds/sharemanagers.leasehold.dev.yaml')]);
    await kubectl([
      'wait',
      '--for=condition=Established',
      '--timeout=60s',
      'crd/sharemanagers.leasehold.dev',
    ]);
    for (const ns of ['floor', 'apps']) await core.createNamespace({ body: { metadata: { name: ns } } });
    const managerKubeconfig = join(cluster.dir, 'manager.kubeconfig');
    await applyChartManagerIdentity(cluster, {
      namespace: SYSTEM,
      kubeconfigPath: managerKubeconfig,
      templates: ['templates/storage-class.yaml'],
    });
    await core
      .createNamespacedServiceAccount({ namespace: SYSTEM, body: { metadata: { name: 'default' } } })
      .catch(() => {});

    // The floor: static PVs, bound by the PV controller alone.
    for (let i = 0; i < N; i++)
      await core.createPersistentVolume({
        body: {
          metadata: { name: `floor-${i}` },
          spec: {
            capacity: { storage: '1Gi' },
            accessModes: ['ReadWriteMany'],
            storageClassName: 'floor',
            persistentVolumeReclaimPolicy: 'Retain',
            nfs: { server: '10.96.0.1', path: '/export' },
          },
        },
      });
    process.stdout.write(`floor: ${N} claims bound by the PV controller alone to PVs made beforehand\n`);
    const floorMs = await claimsToBound(core, 'floor', 'floor', (i) => `floor-${i}`);

    const logDir = join(ROOT, 'bench', 'results', 'logs');
    await mkdir(logDir, { recursive: true });
    const out = createWriteStream(join(logDir, 'provisioning-manager.log'));
    manager = spawn(process.execPath, [join(ROOT, 'dist/manager/main.js')], {
      env: {
        PATH: process.env.PATH,
        KUBECONFIG: managerKubeconfig,
        LEASEHOLD_POD_NAME: 'bench-manager',
        LEASEHOLD_NODE_NAME: 'bench-node',
        LEASEHOLD_HTTP_PORT: '0',
        LEASEHOLD_HTTP_HOST: '127.0.0.1',
        LEASEHOLD_PROVISIONING: 'true',
        LEASEHOLD_PROVISIONER_NAMESPACE: SYSTEM,
        LEASEHOLD_LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    manager.stdout?.pipe(out);
    manager.stderr?.pipe(out);
    const pid = manager.pid as number;
    if (MEMORY_LIMIT_MIB > 0) {
      // Like its container: a memory cgroup with the limit (cgroup v1 here), the manager in it.
      await mkdir(CGROUP, { recursive: true });
      await writeFile(join(CGROUP, 'memory.limit_in_bytes'), String(MEMORY_LIMIT_MIB * 2 ** 20));
      await writeFile(join(CGROUP, 'cgroup.procs'), String(pid));
    }
    const coordination = kc.makeApiClient(k8s.CoordinationV1Api);
    for (let i = 0; ; i++) {
      const holder = await coordination
        .readNamespacedLease({ namespace: SYSTEM, name: PROVISIONER_LEASE })
        .then((l) => l.spec?.holderIdentity)
        .catch(() => undefined);
      if (holder === 'bench-manager') break;
      if (i > 300) throw new Error('the manager did not take the provisioning lease within 30 s');
      await sleep(100);
    }
    await sleep(2000); // caches synced, idle

    let peak = 0;
    const sampler = setInterval(() => {
      void rssMiB(pid).then((r) => {
        peak = Math.max(peak, r);
      });
    }, 200);
    const phase = async (run: () => Promise<number[]>): Promise<Phase> => {
      peak = 0;
      const cpu0 = await cpuSeconds(pid);
      const wall0 = Date.now();
      const t0 = performance.now();
      const times = await run();
      const elapsedS = (performance.now() - t0) / 1000;
      const cpu1 = await cpuSeconds(pid);
      await sleep(1500); // the audit log's last lines
      const by = await managerRequests(auditPath, wall0, Date.now() - 1500);
      const total = Object.values(by).reduce((a, b) => a + b, 0);
      return {
        claims: N,
        boundMsP50: round(percentile(times, 0.5), 0),
        boundMsP95: round(percentile(times, 0.95), 0),
        boundMsMax: round(times[times.length - 1] ?? Number.NaN, 0),
        managerCpuPercentOfCore: round(((cpu1 - cpu0) / elapsedS) * 100),
        managerRssMiBPeak: round(peak),
        managerRequests: total,
        managerRequestsPerClaim: round(total / N, 2),
        managerRequestsBy: Object.fromEntries(Object.entries(by).sort((a, b) => b[1] - a[1])),
      };
    };

    process.stdout.write(`provisioning: ${N} claims of leasehold-rwx at once\n`);
    const provisioning = await phase(() => claimsToBound(core, 'apps', 'leasehold-rwx'));

    process.stdout.write(`deletion: the ${N} claims deleted at once\n`);
    const left = async () => {
      const shares = (await objects.listNamespacedCustomObject({
        group: 'leasehold.dev',
        version: 'v1alpha1',
        namespace: SYSTEM,
        plural: 'sharemanagers',
      })) as { items: unknown[] };
      const backing = (await core.listNamespacedPersistentVolumeClaim({ namespace: SYSTEM })).items.length;
      const volumes = (await core.listPersistentVolume()).items.filter((v) =>
        v.metadata?.name?.startsWith('pvc-'),
      ).length;
      return shares.items.length + backing + volumes;
    };
    const deletion = await phase(async () => {
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: N }, (_, i) =>
          core.deleteNamespacedPersistentVolumeClaim({ namespace: 'apps', name: `claim-${i}` }),
        ),
      );
      const deadline = performance.now() + PHASE_TIMEOUT_MS;
      while ((await left()) > 0) {
        if (performance.now() > deadline) break;
        await sleep(200);
      }
      return [performance.now() - t0];
    });
    clearInterval(sampler);
    const leftOver = await left();
    const cgroupFile = async (f: string) => (MEMORY_LIMIT_MIB > 0 ? readFile(join(CGROUP, f), 'utf8') : '');
    const memoryLimit = {
      limitMiB: MEMORY_LIMIT_MIB || null,
      peakMiB:
        MEMORY_LIMIT_MIB > 0 ? round(Number(await cgroupFile('memory.max_usage_in_bytes')) / 2 ** 20) : null,
      failcnt: MEMORY_LIMIT_MIB > 0 ? Number(await cgroupFile('memory.failcnt')) : null,
      oomKills:
        MEMORY_LIMIT_MIB > 0
          ? Number(/oom_kill (\d+)/.exec(await cgroupFile('memory.oom_control'))?.[1] ?? 0)
          : null,
      managerAlive: manager.exitCode === null && manager.signalCode === null,
    };

    const result = {
      date: new Date().toISOString(),
      claims: N,
      machine: { cores: availableParallelism(), loadAverage: loadavg().map((x) => round(x, 2)) },
      floor: {
        what: 'claims bound by the PV controller alone to PVs made beforehand (no provisioner)',
        boundMsP50: round(percentile(floorMs, 0.5), 0),
        boundMsP95: round(percentile(floorMs, 0.95), 0),
        boundMsMax: round(floorMs[floorMs.length - 1] ?? Number.NaN, 0),
      },
      provisioning,
      deletion: {
        allGoneMs: deletion.boundMsMax,
        managerCpuPercentOfCore: deletion.managerCpuPercentOfCore,
        managerRssMiBPeak: deletion.managerRssMiBPeak,
        managerRequests: deletion.managerRequests,
        managerRequestsPerClaim: deletion.managerRequestsPerClaim,
        managerRequestsBy: deletion.managerRequestsBy,
        leftOver,
      },
      memoryLimit,
      notModelled:
        'backing volumes (backing claims stay unbound: no CSI driver), running share pods (no nodes), more than one manager',
    };
    const resultPath = join(ROOT, 'bench', 'results', 'provisioning.json');
    await writeFile(resultPath, `${JSON.stringify(result, null, 2)}\n`);
    const p = provisioning;
    process.stdout.write(
      [
        '',
        `${N} claims at once, 1 manager, ${availableParallelism()} cores`,
        `                         to Bound p50 / p95 / max (ms)   manager CPU   peak RSS   manager requests per claim`,
        `floor (no provisioner)    ${result.floor.boundMsP50} / ${result.floor.boundMsP95} / ${result.floor.boundMsMax}`,
        `leasehold provisioning    ${p.boundMsP50} / ${p.boundMsP95} / ${p.boundMsMax}      ${p.managerCpuPercentOfCore} %    ${p.managerRssMiBPeak} MiB   ${p.managerRequestsPerClaim}`,
        `  by request: ${Object.entries(p.managerRequestsBy)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}`,
        `deletion: all gone after ${round(deletion.boundMsMax / 1000, 1)} s, ${deletion.managerRequestsPerClaim} requests per claim, left over: ${leftOver}`,
        `  by request: ${Object.entries(deletion.managerRequestsBy)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}`,
        `memory cgroup: limit ${memoryLimit.limitMiB ?? 'none'} MiB, peak ${memoryLimit.peakMiB ?? '-'} MiB (page cache included), hit the limit ${memoryLimit.failcnt ?? '-'} times, OOM kills ${memoryLimit.oomKills ?? '-'}, manager alive at the end: ${memoryLimit.managerAlive}`,
        `wrote ${resultPath}`,
        '',
      ].join('\n'),
    );
    if (leftOver > 0 || !memoryLimit.managerAlive) process.exitCode = 1;
  } finally {
    manager?.kill('SIGTERM');
    await cluster.stop();
    if (MEMORY_LIMIT_MIB > 0) {
      await sleep(500);
      await rmdir(CGROUP).catch(() => {});
    }
  }
}

await main();
