/**
 * Test support for the simulator's integration tests: a real control plane plus a
 * simulator on it, started together and stopped together (also after a failure).
 * LEASEHOLD_KEEP_CLUSTER=1 keeps the cluster dir and the sim root (logs) for reading.
 */
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { startCluster } from '../../dev/cluster/cluster.ts';
import type { Cluster, ClusterOptions } from '../../dev/cluster/types.ts';
import { type Sim, type SimOptions, startSim } from '../../dev/sim/sim.ts';
import { k8s } from '../../lib/kube-client.ts';

export async function startClusterAndSim(
  simOpts: Omit<SimOptions, 'cluster'>,
  clusterOpts: ClusterOptions = {},
): Promise<{ cluster: Cluster; sim: Sim }> {
  const cluster = await startCluster(clusterOpts);
  try {
    return { cluster, sim: await startSim({ ...simOpts, cluster }) };
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

/**
 * The ServiceAccount `share-agent` in `default`, allowed what the chart's agent Role
 * allows (get, create, update Leases): the identity of the share pods the sim tests run.
 */
export async function createShareAgentAccount(kc: k8s.KubeConfig): Promise<void> {
  const namespace = 'default';
  const name = 'share-agent';
  await kc
    .makeApiClient(k8s.CoreV1Api)
    .createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  const rbac = kc.makeApiClient(k8s.RbacAuthorizationV1Api);
  await rbac.createNamespacedRole({
    namespace,
    body: {
      metadata: { name },
      rules: [
        { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] },
      ],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name },
      subjects: [{ kind: 'ServiceAccount', name, namespace }],
    },
  });
}

/** Host PIDs of sandbox and container launchers (setpriv/unshare/nsenter) this process started. */
export function leftoverPodProcesses(): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .filter((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        const argv0 = (cmd.split('\0')[0] ?? '').replace(/^.*\//, '');
        return ppid === process.pid && ['setpriv', 'unshare', 'nsenter'].includes(argv0);
      } catch {
        return false;
      }
    })
    .map(Number);
}

export async function stopClusterAndSim(running: { cluster: Cluster; sim: Sim } | undefined): Promise<void> {
  if (!running) return;
  const keep = process.env.LEASEHOLD_KEEP_CLUSTER === '1';
  // Both at once, as startSystem's stop does: the simulator's stop needs no API server.
  const [simStopped, clusterStopped] = await Promise.allSettled([
    running.sim.stop(),
    running.cluster.stop({ keepDir: keep }),
  ]);
  if (simStopped.status === 'rejected') throw simStopped.reason;
  if (clusterStopped.status === 'rejected') throw clusterStopped.reason;
  const left = leftoverPodProcesses();
  if (left.length > 0) throw new Error(`the simulator left pod processes behind: ${left.join(', ')}`);
  if (keep) process.stderr.write(`kept: cluster ${running.cluster.dir}, sim ${running.sim.root}\n`);
  else rmSync(running.sim.root, { recursive: true, force: true });
}
