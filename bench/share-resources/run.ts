/**
 * Benchmark (not a test): what a share pod's two containers use under a write load, the
 * figures the default requests and limits come from (issue 26 item 2; pod-spec.ts).
 *
 * Two real nodes (dev/system/real-system.ts), one share on the shipped NFS server; on the
 * other node a Linux 6.12 kernel NFS client (dev/kernel-client) mounting it with the
 * published options. Phases, each sampled every 250 ms: idle (20 s); streaming writes
 * (`dd` of 400 MiB in 1 MiB blocks, then fsync); many small files (4,000 files of 4 KiB
 * created, written and closed, then listed and removed); the user workloads of the
 * kernel-client tests (records with fsync, O_DIRECT reads, a lock, creates) for 30 s.
 * Per container (server: the entrypoint, ganesha and any rpcbind; agent): the peak and
 * mean resident memory (sum of the processes' VmRSS, /proc) and CPU (share of one core,
 * utime + stime, per phase), and the container cgroup's peak memory usage, which also
 * counts the page cache of the files the server writes (reclaimable; what a memory limit
 * is checked against, so a limit must leave room for some of it).
 * Not modelled: several clients at once, read-heavy and metadata-heavy loads at scale
 * (ganesha's entry cache grows with the files it has seen), NFSv3.
 *
 *   npm run build && npm run bench -- share-resources
 * Writes bench/results/share-resources.json.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { waitServingPod } from '../../dev/demo/real-pods.ts';
import { startKernelClient } from '../../dev/kernel-client/machine.ts';
import { GUEST_MOUNT, mountShare, startUserWorkloads } from '../../dev/kernel-client/user-workloads.ts';
import { createRealNfsShare } from '../../dev/system/real-share.ts';
import { startRealSystem } from '../../dev/system/real-system.ts';
import { shareStatus } from '../../dev/system/shares.ts';
import { sleep } from '../../lib/clock.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const SHARE = 'resources';
const TICKS_PER_SECOND = 100;

type Container = 'server' | 'agent';
interface Sample {
  rssMiB: Record<Container, number>;
  cpuS: Record<Container, number>;
  cgroupPeakMiB: Record<Container, number | undefined>;
}

/** The pod's processes by container, from /proc (host view). */
function podProcesses(podUid: string): { pid: number; container: Container; memCgroup: string }[] {
  const out: { pid: number; container: Container; memCgroup: string }[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cgroup = readFileSync(`/proc/${entry}/cgroup`, 'utf8');
      if (!cgroup.includes(`pod${podUid}`)) continue;
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      const comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
      if (comm === 'pause') continue;
      const agent = cmdline.includes('agent') && !cmdline.some((a) => a.includes('nfs-ganesha'));
      const memCgroup = /^\d+:memory:(.*)$/m.exec(cgroup)?.[1] ?? '';
      out.push({ pid: Number(entry), container: agent ? 'agent' : 'server', memCgroup });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

function sample(podUid: string): Sample {
  const rssMiB: Record<Container, number> = { server: 0, agent: 0 };
  const cpuS: Record<Container, number> = { server: 0, agent: 0 };
  const cgroups: Record<Container, Set<string>> = { server: new Set(), agent: new Set() };
  for (const p of podProcesses(podUid)) {
    try {
      const status = readFileSync(`/proc/${p.pid}/status`, 'utf8');
      rssMiB[p.container] += Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
      const stat = readFileSync(`/proc/${p.pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      cpuS[p.container] += (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
      if (p.memCgroup) cgroups[p.container].add(p.memCgroup);
    } catch {
      // gone meanwhile
    }
  }
  const peak = (c: Container) => {
    const [path] = [...cgroups[c]];
    try {
      return path
        ? Number(readFileSync(join('/sys/fs/cgroup/memory', path, 'memory.max_usage_in_bytes'), 'utf8')) /
            2 ** 20
        : undefined;
    } catch {
      return undefined;
    }
  };
  return { rssMiB, cpuS, cgroupPeakMiB: { server: peak('server'), agent: peak('agent') } };
}

interface PhaseResult {
  phase: string;
  seconds: number;
  server: { rssMiBPeak: number; rssMiBMean: number; cpuPercentOfCore: number };
  agent: { rssMiBPeak: number; rssMiBMean: number; cpuPercentOfCore: number };
}

const round = (x: number) => Math.round(x * 10) / 10;

async function measure(podUid: string, phase: string, work: () => Promise<void>): Promise<PhaseResult> {
  const samples: Sample[] = [sample(podUid)];
  const t0 = performance.now();
  let done = false;
  const sampler = (async () => {
    while (!done) {
      await sleep(250);
      samples.push(sample(podUid));
    }
  })();
  try {
    await work();
  } finally {
    done = true;
    await sampler;
  }
  const seconds = (performance.now() - t0) / 1000;
  const first = samples[0] as Sample;
  const last = samples[samples.length - 1] as Sample;
  const of = (c: Container) => ({
    rssMiBPeak: round(Math.max(...samples.map((s) => s.rssMiB[c]))),
    rssMiBMean: round(samples.reduce((a, s) => a + s.rssMiB[c], 0) / samples.length),
    cpuPercentOfCore: round(((last.cpuS[c] - first.cpuS[c]) / seconds) * 100),
  });
  const r = { phase, seconds: round(seconds), server: of('server'), agent: of('agent') };
  process.stdout.write(
    `${phase.padEnd(30)} ${String(r.seconds).padStart(6)} s   server RSS peak ${r.server.rssMiBPeak} MiB (mean ${r.server.rssMiBMean}), CPU ${r.server.cpuPercentOfCore} %   agent RSS peak ${r.agent.rssMiBPeak} MiB (mean ${r.agent.rssMiBMean}), CPU ${r.agent.cpuPercentOfCore} %\n`,
  );
  return r;
}

async function main(): Promise<void> {
  const sys = await startRealSystem({ nodes: 2, progress: (l) => process.stdout.write(`[system] ${l}\n`) });
  try {
    await createRealNfsShare(sys, SHARE);
    const serving = await waitServingPod(sys, SHARE, 120_000);
    const podUid = serving.object.metadata?.uid ?? '';
    const clientNode = sys.nodes.find((n) => n.name !== serving.node)?.name ?? '';
    const exported = (await shareStatus(sys, SHARE)).export;
    if (!exported?.source || !exported.mountOptions) throw new Error('the share has no status.export');
    const kc = await startKernelClient(sys.node(clientNode), { name: 'kc1', index: 1, kernel: '6.12' });
    const phases: PhaseResult[] = [];
    try {
      await mountShare(kc, exported.source, exported.mountOptions);
      phases.push(await measure(podUid, 'idle, mounted', () => sleep(20_000)));
      phases.push(
        await measure(podUid, 'streaming write 400 MiB + fsync', async () => {
          await kc.run(`dd if=/dev/zero of=${GUEST_MOUNT}/big bs=1M count=400 conv=fsync 2>&1`, 300_000);
          await kc.run(`rm -f ${GUEST_MOUNT}/big`, 60_000);
        }),
      );
      phases.push(
        await measure(podUid, '4,000 small files', async () => {
          await kc.run(
            `mkdir -p ${GUEST_MOUNT}/many && cd ${GUEST_MOUNT}/many && i=0; while [ $i -lt 4000 ]; do head -c 4096 /dev/zero > f$i; i=$((i+1)); done; ls -l | wc -l; rm -rf ${GUEST_MOUNT}/many`,
            600_000,
          );
        }),
      );
      phases.push(
        await measure(podUid, 'user workloads, 30 s', async () => {
          await startUserWorkloads(kc);
          await sleep(30_000);
        }),
      );
    } finally {
      await kc.stop();
    }
    const peak = (c: Container) => Math.max(...phases.map((p) => p[c].rssMiBPeak));
    const cpu = (c: Container) => Math.max(...phases.map((p) => p[c].cpuPercentOfCore));
    const cgroupPeak = sample(podUid).cgroupPeakMiB;
    const result = {
      date: new Date().toISOString(),
      machine: { cores: availableParallelism() },
      share: 'shipped NFS server (ganesha 4.3), NFSv4.1, one Linux 6.12 kernel client',
      phases,
      peak: {
        serverRssMiB: peak('server'),
        agentRssMiB: peak('agent'),
        serverCpuPercentOfCore: cpu('server'),
        agentCpuPercentOfCore: cpu('agent'),
        cgroupPeakMiB: cgroupPeak,
      },
    };
    const path = join(ROOT, 'bench', 'results', 'share-resources.json');
    await writeFile(path, `${JSON.stringify(result, null, 2)}\n`);
    process.stdout.write(
      `\npeaks: server RSS ${result.peak.serverRssMiB} MiB, CPU ${result.peak.serverCpuPercentOfCore} % of a core; agent RSS ${result.peak.agentRssMiB} MiB, CPU ${result.peak.agentCpuPercentOfCore} %; container cgroup peak (page cache included): server ${round(cgroupPeak.server ?? Number.NaN)} MiB, agent ${round(cgroupPeak.agent ?? Number.NaN)} MiB\nwrote ${path}\n`,
    );
  } finally {
    await sys.stop();
  }
}

await main();
