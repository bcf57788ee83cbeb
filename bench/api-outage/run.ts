/**
 * `npm run bench -- api-outage [--rounds N] [--outage S]`: the API server stopped for S
 * seconds (default 12) on 2 real nodes, N times (default 5), without witnesses, as a
 * Linux 6.12 kernel NFS client on the node that does not serve sees it. Every agent
 * fences at T without the API, as it must; the share's pod ends and the manager (or a
 * failover) starts a replacement once the API is back.
 * Per round, in seconds since the stop began, polled every 0.5 s: the API ready again,
 * the lost pod's address gone from the share's EndpointSlices, the replacement's address
 * in them, the replacement seen Ready, the client's first acknowledged write after the
 * API returned, and whether its lock survived (its locked fd worked again) or was lost.
 * Why: the clients' route to the replacement is the share's EndpointSlice; with
 * kube-controller-manager's controller writing it, it lagged the replacement by up to
 * 42 s after an outage (bench/results/2026-12-07-api-outage-endpoints.json, `before`),
 * and a client back after the grace period loses its lock. The manager writes it now
 * (manager/reconciliation/share-endpoints.ts). Writes bench/results/api-outage-endpoints.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { servingPod, waitServingPod } from '../../dev/demo/real-pods.ts';
import { startKernelClient } from '../../dev/kernel-client/machine.ts';
import { mountShare, stallsOf, startUserWorkloads } from '../../dev/kernel-client/user-workloads.ts';
import { createRealNfsShare } from '../../dev/system/real-share.ts';
import { SHARES_NAMESPACE, startRealSystem } from '../../dev/system/real-system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s } from '../../lib/kube-client.ts';
import { NFS_MOUNT_OPTIONS } from '../../manager/share-model/nfs-server-preset.ts';
import { round, summarize } from '../failover/stats.ts';

const SHARE = 'benchapi';
const say = (line: string) => process.stderr.write(`bench api-outage: ${line}\n`);

interface Round {
  round: number;
  apiReadyAgainS: number;
  oldAddressLeftSliceS?: number;
  newAddressInSliceS?: number;
  replacementSeenReadyS?: number;
  clientFirstWriteS?: number;
  lock: 'kept' | 'lost' | 'unknown';
}

function parse(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    options: { rounds: { type: 'string', default: '5' }, outage: { type: 'string', default: '12' } },
    strict: true,
    allowPositionals: false,
  });
  const rounds = Number(values.rounds);
  const outageS = Number(values.outage);
  if (!Number.isInteger(rounds) || rounds < 1 || rounds > 30)
    throw new Error(`--rounds=${values.rounds}: must be 1 to 30`);
  if (!Number.isInteger(outageS) || outageS < 5 || outageS > 300)
    throw new Error(`--outage=${values.outage}: whole seconds, 5 to 300 (above T, so every agent fences)`);
  return { rounds, outageMs: outageS * 1000 };
}

async function main(): Promise<number> {
  let args: ReturnType<typeof parse>;
  try {
    args = parse(process.argv.slice(2));
  } catch (err) {
    say((err as Error).message);
    return 2;
  }
  const loadStart = loadavg().map((x) => round(x));
  const sys = await startRealSystem({ nodes: 2, progress: say });
  const rounds: Round[] = [];
  try {
    await createRealNfsShare(sys, SHARE);
    await waitServingPod(sys, SHARE, 180_000);
    const svc = await sys.core.readNamespacedService({ namespace: SHARES_NAMESPACE, name: SHARE });
    const first = await waitServingPod(sys, SHARE, 180_000);
    const clientNode = sys.nodes.find((n) => n.name !== first.node);
    if (!clientNode) throw new Error('no node other than the serving one');
    const kc = await startKernelClient(clientNode, { name: 'api-k1', index: 1, kernel: '6.12' });
    const discovery = sys.kc.makeApiClient(k8s.DiscoveryV1Api);
    const addresses = async () =>
      (
        await discovery.listNamespacedEndpointSlice({
          namespace: SHARES_NAMESPACE,
          labelSelector: `kubernetes.io/service-name=${SHARE}`,
        })
      ).items.flatMap((sl) => (sl.endpoints ?? []).flatMap((e) => e.addresses));
    try {
      await mountShare(kc, `${svc.spec?.clusterIP}:/export`, NFS_MOUNT_OPTIONS);
      await startUserWorkloads(kc);
      for (let n = 1; n <= args.rounds; n++) {
        const before = await waitServingPod(sys, SHARE, 180_000);
        const oldIp = before.object.status?.podIP;
        await sleep(5_000);
        const t0 = performance.now();
        const at = () => round((performance.now() - t0) / 1000);
        await sys.cluster.stopApiServer();
        await sleep(Math.max(0, args.outageMs - (performance.now() - t0)));
        await sys.cluster.startApiServer();
        const r: Round = { round: n, apiReadyAgainS: at(), lock: 'unknown' };
        const backMono = monotonicMs();
        const until = performance.now() + 180_000;
        while (performance.now() < until) {
          const listed = await addresses().catch(() => undefined);
          if (listed && r.oldAddressLeftSliceS === undefined && oldIp && !listed.includes(oldIp))
            r.oldAddressLeftSliceS = at();
          if (listed && r.newAddressInSliceS === undefined && listed.some((a) => a !== oldIp))
            r.newAddressInSliceS = at();
          const serving = await servingPod(sys, SHARE, before.pod).catch(() => undefined);
          if (serving && r.replacementSeenReadyS === undefined) r.replacementSeenReadyS = at();
          const write = stallsOf(kc, backMono).write.firstSuccessAfter?.atMs;
          if (write !== undefined && r.clientFirstWriteS === undefined)
            r.clientFirstWriteS = round((write - backMono) / 1000 + r.apiReadyAgainS);
          if (r.clientFirstWriteS !== undefined && r.newAddressInSliceS !== undefined) break;
          await sleep(500);
        }
        // The locked fd works again within 10 s of the writes, or its lock was lost (EIO).
        await sleep(10_000);
        const lock = stallsOf(kc, backMono).lock;
        r.lock = lock.outcome === 'resumed' ? 'kept' : lock.errorsAfter.length > 0 ? 'lost' : 'unknown';
        rounds.push(r);
        say(`round ${n}: ${JSON.stringify(r)}`);
        await sleep(10_000);
      }
    } finally {
      await kc.stop();
    }
  } finally {
    await sys.stop();
  }
  const of = (k: keyof Round) =>
    summarize(rounds.map((r) => r[k]).filter((v): v is number => typeof v === 'number'));
  const summary = {
    clientFirstWriteS: of('clientFirstWriteS'),
    newAddressInSliceS: of('newAddressInSliceS'),
    locksLost: rounds.filter((r) => r.lock === 'lost').length,
  };
  process.stdout.write(
    `API server down ${args.outageMs / 1000} s, ${rounds.length} rounds (seconds since the stop began): client's first write p50 ${summary.clientFirstWriteS.p50} / max ${summary.clientFirstWriteS.max}; replacement's address in the slice p50 ${summary.newAddressInSliceS.p50} / max ${summary.newAddressInSliceS.max}; locks lost ${summary.locksLost} of ${rounds.length}\n`,
  );
  const out = join(import.meta.dirname, '..', 'results', 'api-outage-endpoints.json');
  mkdirSync(join(import.meta.dirname, '..', 'results'), { recursive: true });
  writeFileSync(
    out,
    `${JSON.stringify(
      {
        benchmark: 'api-outage',
        date: new Date().toISOString(),
        settings: `2 real nodes, chart defaults (no witnesses), Kubernetes' default timings; API server stopped ${args.outageMs / 1000} s per round; a Linux 6.12 UML kernel client on the node that did not serve (writer, O_DIRECT reader, lock holder, creator); polled every 0.5 s`,
        machine: { loadAtStart: loadStart, loadAtEnd: loadavg().map((x) => round(x)) },
        summary,
        rounds,
      },
      null,
      1,
    )}\n`,
  );
  say(`wrote ${out}`);
  return 0;
}

process.exitCode = await main();
