/**
 * `npm run bench -- kernel-client [--runs N] [--lanes L,...] [--nfs-lease S] [--nfs-grace S]
 * [--reconnector on|off|alternate] [--adc-sync D] [--node-monitor-grace D] [--budget S]`: node crashes
 * on real nodes as the Linux kernel's NFS client sees them (issue 25 items 5 and 6),
 * several clients side by side in every crash, with Kubernetes' default timings (ADC
 * sync 1m, node-monitor grace 40s) unless told otherwise.
 *
 * One share on the shipped NFS server (versions 3, 4.1 and 4.2, so the libnfs writer and
 * the NFSv3 lanes can run; lease and grace from --nfs-lease/--nfs-grace, default the
 * server's 10 s / 15 s), on two real nodes (dev/system/real-system.ts). Per crash: on the
 * node that does not serve, one kernel client per lane (dev/kernel-client: the lane's
 * kernel, mounted with the lane's options, running the writer, the O_DIRECT reader, the
 * lock holder and the creator, whose every new file is also write-locked) and
 * dev/nfs-client's libnfs NFSv3 writer; a random pause of up to 2 s; the serving node
 * crashed; the wait until the replacement served and every lane resumed (or the
 * budget); each lane's records read back from the volume; the clients stopped; the node
 * healed (a reboot) and its manager running again before the next.
 * Per lane and crash, in seconds since the crash: the first acknowledged write, the
 * first O_DIRECT read, the first created-and-locked file and the first I/O through the
 * locked fd after the replacement served (before it, a call in flight at the crash may
 * still complete); over the run: acknowledged writes lost, ESTALE seen. Prints one table
 * and writes bench/results/failover-real-nodes-kernel-clients-adc-<adc>-nmg-<grace>
 * [-lease-<s>s-grace-<s>s]-reconnector-<on|off|alternate>.json.
 * Lanes (--lanes, by key): 6.1 and 6.12 with the published options (nfsvers=4.1, ...),
 * 6.1-4.2 and 6.12-4.2 with Linux's defaults but the version (`nfsvers=4.2`), 6.1-v3 and
 * 6.12-v3 with what the manager publishes for an NFSv3-only share (`nolock`: their locks
 * are the client's own, not the server's). Default: the four v4 lanes.
 * --reconnector: the chart's reconnector (server/reconnector/) on for every crash, off for
 * every crash, or `alternate` (default): on for odd crashes, off for even ones, switched
 * by `helm upgrade` before the crash, so both are measured side by side in one run; the
 * table has one row per lane and setting.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startNodeNfsClient } from '../../dev/demo/real-nfs-client.ts';
import { waitServingPod } from '../../dev/demo/real-pods.ts';
import type { KernelName } from '../../dev/kernel-client/kernels.ts';
import { type KernelClient, startKernelClient } from '../../dev/kernel-client/machine.ts';
import {
  allResumed,
  eventsOf,
  filesOf,
  mountShare,
  RECORD_SIZE,
  stallsOf,
  startUserWorkloads,
  tagOf,
} from '../../dev/kernel-client/user-workloads.ts';
import { checkReadBack } from '../../dev/kernel-client/workload-analysis.ts';
import { helmUpgrade, helmUserValues } from '../../dev/system/helm-install.ts';
import { createRealNfsShare, readRealShareFile } from '../../dev/system/real-share.ts';
import {
  componentPodsByNode,
  managerPodsByNode,
  RECONNECTOR_LABEL,
  RELEASE,
  type RealSystem,
  SHARES_NAMESPACE,
  SYSTEM_NAMESPACE,
  startRealSystem,
  waitForComponent,
  waitForManagers,
} from '../../dev/system/real-system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { mountOptionsFor, NFS_MOUNT_OPTIONS } from '../../manager/share-model/nfs-server-preset.ts';
import { managerRestarts, waitManagerRestarted } from '../failover/real-node-runs.ts';
import { round, type Summary, summarize } from '../failover/stats.ts';

const SHARE = 'benchkc';
const PUBLISHED = NFS_MOUNT_OPTIONS;
const V3 = mountOptionsFor({ versions: ['3'] });
/** Every lane this bench knows; --lanes picks some (default: all but the NFSv3 ones). */
const ALL_LANES: ReadonlyArray<{ key: string; name: string; kernel: KernelName; options: string }> = [
  { key: '6.1', name: '6.1 published', kernel: '6.1', options: PUBLISHED },
  { key: '6.12', name: '6.12 published', kernel: '6.12', options: PUBLISHED },
  { key: '6.1-4.2', name: '6.1 defaults 4.2', kernel: '6.1', options: 'nfsvers=4.2' },
  { key: '6.12-4.2', name: '6.12 defaults 4.2', kernel: '6.12', options: 'nfsvers=4.2' },
  { key: '6.1-v3', name: '6.1 NFSv3', kernel: '6.1', options: V3 },
  { key: '6.12-v3', name: '6.12 NFSv3', kernel: '6.12', options: V3 },
];
const DEFAULT_LANES = '6.1,6.12,6.1-4.2,6.12-4.2';

const say = (line: string) => process.stderr.write(`bench kernel-client: ${line}\n`);

interface LaneCrash {
  writeS?: number;
  readS?: number;
  createS?: number;
  lockS?: number;
  acked: number;
  lost: number;
  stale: boolean;
  errors: string;
}

function parse(argv: string[]) {
  const { values } = parseArgs({
    args: argv,
    options: {
      runs: { type: 'string', default: '10' },
      'adc-sync': { type: 'string', default: '1m' },
      'node-monitor-grace': { type: 'string', default: '40s' },
      budget: { type: 'string', default: '90' },
      lanes: { type: 'string', default: DEFAULT_LANES },
      'nfs-lease': { type: 'string', default: '10' },
      'nfs-grace': { type: 'string', default: '15' },
      reconnector: { type: 'string', default: 'alternate' },
    },
    strict: true,
    allowPositionals: false,
  });
  const runs = Number(values.runs);
  const budgetS = Number(values.budget);
  if (!Number.isInteger(runs) || runs < 1 || runs > 50)
    throw new Error(`--runs=${values.runs}: must be 1 to 50`);
  if (!Number.isInteger(budgetS) || budgetS < 30)
    throw new Error(`--budget=${values.budget}: whole seconds, at least 30`);
  for (const k of ['adc-sync', 'node-monitor-grace'] as const)
    if (!/^[1-9]\d*(s|m)$/.test(values[k] ?? ''))
      throw new Error(`--${k}=${values[k]}: a whole number of seconds or minutes, like 40s or 1m`);
  const lanes = (values.lanes ?? '').split(',').map((key) => {
    const lane = ALL_LANES.find((l) => l.key === key);
    if (!lane)
      throw new Error(
        `--lanes=${values.lanes}: "${key}" is none of ${ALL_LANES.map((l) => l.key).join(', ')}`,
      );
    return lane;
  });
  const reconnector = values.reconnector as string;
  if (!['on', 'off', 'alternate'].includes(reconnector))
    throw new Error(`--reconnector=${reconnector}: must be on, off or alternate`);
  const leaseS = Number(values['nfs-lease']);
  const graceS = Number(values['nfs-grace']);
  // The server's own rule (server/nfs-ganesha/config.ts), said here before a cluster starts.
  if (!Number.isInteger(leaseS) || leaseS < 1 || leaseS > 180)
    throw new Error(`--nfs-lease=${values['nfs-lease']}: whole seconds, 1 to 180`);
  if (!Number.isInteger(graceS) || graceS < leaseS || graceS > 270)
    throw new Error(
      `--nfs-grace=${values['nfs-grace']}: whole seconds, at least --nfs-lease and at most 270`,
    );
  return {
    runs,
    lanes,
    reconnector: reconnector as 'on' | 'off' | 'alternate',
    leaseS,
    graceS,
    budgetMs: budgetS * 1000,
    adcSync: values['adc-sync'] as string,
    grace: values['node-monitor-grace'] as string,
  };
}

/** Turns the chart's reconnector on or off (helm upgrade) and waits until it is so on every node. */
async function setReconnector(sys: RealSystem, on: boolean): Promise<void> {
  const release = {
    kubeconfigPath: sys.cluster.kubeconfigPath,
    release: RELEASE,
    namespace: SYSTEM_NAMESPACE,
  };
  await helmUpgrade({
    ...release,
    base: await helmUserValues(release),
    values: { 'reconnector.enabled': String(on) },
  });
  const names = sys.nodes.map((n) => n.name);
  if (on) return waitForComponent(sys.core, names, RECONNECTOR_LABEL, 'reconnector', 180_000);
  const until = performance.now() + 120_000;
  while ((await componentPodsByNode(sys.core, RECONNECTOR_LABEL)).size > 0) {
    if (performance.now() > until) throw new Error('reconnector pods still there 120 s after turning it off');
    await sleep(500);
  }
}

async function main(): Promise<number> {
  let args: ReturnType<typeof parse>;
  try {
    args = parse(process.argv.slice(2));
  } catch (err) {
    say(String((err as Error).message));
    return 2;
  }
  const loadStart = loadavg().map((x) => round(x));
  const sys = await startRealSystem({
    nodes: 2,
    cluster: { attachDetachReconcileSyncPeriod: args.adcSync, nodeMonitorGracePeriod: args.grace },
    progress: say,
  });
  const crashes: Array<{
    run: number;
    node: string;
    reconnector: boolean;
    servedS: number;
    libnfsS?: number;
    lanes: LaneCrash[];
  }> = [];
  let reconnectorOn = true; // the chart's default
  let aborted: string | undefined;
  try {
    await createRealNfsShare(sys, SHARE, {
      nfs: {
        versions: ['3', '4.1', '4.2'],
        leaseLifetime: `${args.leaseS}s`,
        gracePeriod: `${args.graceS}s`,
      },
    });
    await waitServingPod(sys, SHARE, 180_000);
    const svc = await sys.core.readNamespacedService({ namespace: SHARES_NAMESPACE, name: SHARE });
    const source = `${svc.spec?.clusterIP}:/export`;
    for (let run = 1; run <= args.runs; run++) {
      const wanted = args.reconnector === 'alternate' ? run % 2 === 1 : args.reconnector === 'on';
      if (wanted !== reconnectorOn) {
        await setReconnector(sys, wanted);
        reconnectorOn = wanted;
        say(`run ${run}: reconnector ${wanted ? 'on' : 'off'}`);
      }
      const before = await waitServingPod(sys, SHARE, 180_000);
      const clientNode = sys.nodes.find((n) => n.name !== before.node);
      if (!clientNode) throw new Error('no node other than the serving one');
      const clients: KernelClient[] = [];
      const libnfs = await startNodeNfsClient(sys, SHARE, clientNode.name, { file: `libnfs-${run}.bin` });
      try {
        for (const [i, lane] of args.lanes.entries()) {
          const kc = await startKernelClient(clientNode, {
            name: `r${run}-k${i + 1}`,
            index: i + 1,
            kernel: lane.kernel,
          });
          clients.push(kc);
          await mountShare(kc, source, lane.options);
          await startUserWorkloads(kc);
        }
        await libnfs.writer.waitForAck(20, 60_000);
        await sleep(Math.random() * 2_000);
        const crashMs = monotonicMs();
        const crashWall = Date.now();
        await sys.node(before.node).crash();
        const after = await waitServingPod(sys, SHARE, args.budgetMs, before.pod);
        const servedMs = crashMs + (after.servingWall - crashWall);
        const until = performance.now() + args.budgetMs;
        const libnfsAck = () => libnfs.writer.events.find((e) => e.event === 'ack' && e.ms > servedMs);
        while (performance.now() < until && !(clients.every((kc) => allResumed(kc, servedMs)) && libnfsAck()))
          await sleep(250);
        const sinceCrash = (ms: number | undefined) =>
          ms === undefined ? undefined : round((ms - crashMs) / 1000);
        const lanes = clients.map((kc): LaneCrash => {
          const fromServing = stallsOf(kc, servedMs);
          const atCrash = stallsOf(kc, crashMs);
          const acks = eventsOf(kc, tagOf(kc.name, 'write')).filter((e) => e.kind === 'ack');
          const readBack = checkReadBack(
            acks,
            readRealShareFile(sys, SHARE, filesOf(kc.name).write),
            RECORD_SIZE,
          );
          return {
            writeS: sinceCrash(fromServing.write.firstSuccessAfter?.atMs),
            readS: sinceCrash(fromServing.read.firstSuccessAfter?.atMs),
            createS: sinceCrash(fromServing.create.firstSuccessAfter?.atMs),
            lockS: sinceCrash(fromServing.lock.firstSuccessAfter?.atMs),
            acked: readBack.acked,
            lost: readBack.lost.length,
            stale: Object.values(atCrash).some((s) => s.staleSeen),
            errors: Object.entries(atCrash)
              .flatMap(([w, s]) => s.errorsAfter.map((g) => `${w} ${g.errno} x${g.count}`))
              .join(', '),
          };
        });
        const crash = {
          run,
          node: before.node,
          reconnector: reconnectorOn,
          servedS: round((after.servingWall - crashWall) / 1000),
          libnfsS: sinceCrash(libnfsAck()?.ms),
          lanes,
        };
        crashes.push(crash);
        say(
          `run ${run} (reconnector ${reconnectorOn ? 'on' : 'off'}): served +${crash.servedS} s; libnfs +${crash.libnfsS ?? 'never'} s; ${args.lanes.map((l, i) => `${l.name}: write +${lanes[i]?.writeS ?? 'never'} read +${lanes[i]?.readS ?? 'never'} create +${lanes[i]?.createS ?? 'never'} lock +${lanes[i]?.lockS ?? 'never'} lost ${lanes[i]?.lost ?? '?'} of ${lanes[i]?.acked ?? '?'}${lanes[i]?.errors ? ` (${lanes[i]?.errors})` : ''}`).join('; ')}`,
        );
      } finally {
        for (const kc of clients) await kc.stop().catch((err) => say(`stopping ${kc.name}: ${String(err)}`));
        await libnfs.stop();
      }
      const restarts = managerRestarts(await managerPodsByNode(sys.core), before.node);
      await sys.node(before.node).heal();
      await waitForManagers(
        sys.core,
        sys.nodes.map((n) => n.name),
        180_000,
      );
      await waitManagerRestarted(sys, before.node, restarts, 120_000);
    }
  } catch (err) {
    // The crashes measured so far are kept: the file says the run stopped and why.
    aborted = `stopped after ${crashes.length} of ${args.runs} crashes: ${String((err as Error)?.message ?? err)}`;
    say(aborted);
  } finally {
    await sys.stop();
  }
  if (crashes.length === 0) return 1;
  const modes = [true, false].filter((on) => crashes.some((c) => c.reconnector === on));
  const rows = modes.flatMap((on) => {
    const ofMode = crashes.filter((c) => c.reconnector === on);
    return args.lanes.map((lane, i) => {
      const of = (pick: (c: LaneCrash) => number | undefined) =>
        summarize(
          ofMode
            .map((c) => c.lanes[i])
            .flatMap((c) => (c && pick(c) !== undefined ? [pick(c) as number] : [])),
        );
      const never = (pick: (c: LaneCrash) => number | undefined) =>
        ofMode.filter((c) => c.lanes[i] && pick(c.lanes[i] as LaneCrash) === undefined).length;
      return {
        lane: lane.name,
        reconnector: on,
        kernel: lane.kernel,
        options: lane.options,
        crashes: ofMode.length,
        servedS: summarize(ofMode.map((c) => c.servedS)),
        firstWriteS: of((c) => c.writeS),
        firstReadS: of((c) => c.readS),
        firstCreateS: of((c) => c.createS),
        firstLockedIoS: of((c) => c.lockS),
        writesNeverResumed: never((c) => c.writeS),
        readsNeverResumed: never((c) => c.readS),
        acked: ofMode.reduce((n, c) => n + (c.lanes[i]?.acked ?? 0), 0),
        lost: ofMode.reduce((n, c) => n + (c.lanes[i]?.lost ?? 0), 0),
        staleSeen: ofMode.filter((c) => c.lanes[i]?.stale).length,
      };
    });
  });
  const libnfs = summarize(crashes.flatMap((c) => (c.libnfsS === undefined ? [] : [c.libnfsS])));
  const f = (s: Summary) => (s.n === 0 ? 'none' : `p50 ${s.p50} / p95 ${s.p95} s (n ${s.n})`);
  const table = [
    `crash to the first success after the replacement served (${crashes.length} crashes, ADC sync ${args.adcSync}, node-monitor grace ${args.grace}); served: ${f(summarize(crashes.map((c) => c.servedS)))}`,
    ...rows.map(
      (r) =>
        `  ${r.lane.padEnd(18)} reconnector ${r.reconnector ? 'on ' : 'off'} (${r.crashes} crashes, served ${f(r.servedS)}): writes ${f(r.firstWriteS)}; O_DIRECT reads ${f(r.firstReadS)}; creates ${f(r.firstCreateS)}; locked fd ${f(r.firstLockedIoS)}; never resumed: writes ${r.writesNeverResumed}, reads ${r.readsNeverResumed}; ${r.lost} of ${r.acked} acked lost; ESTALE in ${r.staleSeen}`,
    ),
    `  libnfs NFSv3       writes ${f(libnfs)}`,
  ].join('\n');
  process.stdout.write(`${table}\n`);
  const dir = join(import.meta.dirname, '..', 'results');
  mkdirSync(dir, { recursive: true });
  const timings =
    args.leaseS === 10 && args.graceS === 15 ? '' : `-lease-${args.leaseS}s-grace-${args.graceS}s`;
  const mode = `-reconnector-${args.reconnector}`;
  const file = join(
    dir,
    `failover-real-nodes-kernel-clients-adc-${args.adcSync}-nmg-${args.grace}${timings}${mode}.json`,
  );
  writeFileSync(
    file,
    `${JSON.stringify(
      {
        benchmark: 'kernel-client',
        date: new Date().toISOString(),
        settings: `2 real nodes; share versions 3, 4.1, 4.2 (grace ${args.graceS} s, lease ${args.leaseS} s); per lane a UML kernel client on the surviving node through its kube-proxy: writer (4 KiB pwrite+fsync every 50 ms), O_DIRECT reader, fcntl lock holder, creator; libnfs NFSv3 writer beside; each crash healed by a reboot; the chart's reconnector ${args.reconnector === 'alternate' ? 'on for odd crashes, off for even ones (helm upgrade before the crash)' : args.reconnector}`,
        machine: {
          cores: availableParallelism(),
          loadAtStart: loadStart,
          loadAtEnd: loadavg().map((x) => round(x)),
        },
        ...(aborted ? { aborted } : {}),
        rows,
        libnfsV3FirstWriteS: libnfs,
        crashes,
      },
      null,
      2,
    )}\n`,
  );
  say(`wrote ${file}`);
  // A lost acknowledged write fails the run; a lane that never resumed is a figure.
  return rows.some((r) => r.lost > 0) || aborted ? 1 : 0;
}

process.exitCode = await main();
