/**
 * The project's locally built images (dev/image: no registry, no Docker daemon) on a
 * real node (dev/node), for real-node.test.ts: both are imported into the node's
 * containerd (startRealNode's `images`) and run under the real kubelet with the
 * securityContexts the project gives them.
 *  - leasehold (agent + manager): the manager container with the chart's pod
 *    securityContext (runAsNonRoot, no runAsUser: the kubelet must find the image's
 *    numeric USER) runs as 65532:65532 with no capability, in /app; the agent container
 *    with the manager's AGENT_SECURITY_CONTEXT runs as root with CAP_KILL alone and
 *    no_new_privs. Both ran the image's entrypoint (node dist/bin/leasehold.js), logged
 *    their start and reached the API server the in-cluster way (kube-proxy's
 *    `kubernetes` Service, the projected token of `default/default`, which has no role):
 *    the agent is refused its Lease (HTTP 403) and retries every retry period, the
 *    manager is refused its first list of ShareManagers (HTTP 403) and re-watches with
 *    backoff, and both run on.
 *  - nfs-ganesha: the shipped server's entrypoint with NFS_SERVER_SECURITY_CONTEXT, an
 *    emptyDir as its export and on /run (and /tmp, as the manager's pods), starts ganesha.nfsd (root, exactly the preset's
 *    capabilities) and logs `serving`: ganesha answered its NFS NULL probe; with those
 *    capabilities it acts as a client's user and enforces that user's permissions
 *    (actsAsTheClientsUser).
 * The pods are deleted at the end (no grace) so that the faults that follow meet only
 * their own pods.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { CoreV1Api, type V1Container, type V1Pod } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import type { LocalImage } from '../../dev/image/images.ts';
import { hostProcesses } from '../../dev/node/leftovers.ts';
import type { RealNode } from '../../dev/node/node.ts';
import {
  NFS_SERVER_SECURITY_CONTEXT,
  NFS_TMP_MOUNT,
  NFS_TMP_SUBPATH,
} from '../../manager/share-model/nfs-server-preset.ts';
import { AGENT_RUNTIME_ENV, AGENT_SECURITY_CONTEXT } from '../../manager/share-model/pod-spec.ts';
import { eventually } from '../support/cluster.ts';

const CAP = {
  CHOWN: 0,
  DAC_OVERRIDE: 1,
  DAC_READ_SEARCH: 2,
  FOWNER: 3,
  FSETID: 4,
  KILL: 5,
  SETGID: 6,
  SETUID: 7,
};
export const capMask = (caps: readonly string[]) =>
  caps.reduce((m, c) => m | (1n << BigInt(CAP[c as keyof typeof CAP])), 0n);

/** /proc facts of the pod's process whose command line starts with `cmd`, once it runs. */
export function podProcess(node: RealNode, podUid: string, cmd: string) {
  const p = hostProcesses().find(
    (p) =>
      p.cmdline.startsWith(cmd) &&
      p.cgroup.includes(`${node.layout.cgroupRoot}/`) &&
      p.cgroup.includes(`pod${podUid}`),
  );
  if (!p) return undefined;
  const status = readFileSync(`/proc/${p.pid}/status`, 'utf8');
  const field = (k: string) => new RegExp(`^${k}:\\s*(.*)$`, 'm').exec(status)?.[1]?.trim() ?? '';
  return {
    pid: p.pid,
    uid: field('Uid').split(/\s+/),
    gid: field('Gid').split(/\s+/),
    capEff: BigInt(`0x${field('CapEff')}`),
    capBnd: BigInt(`0x${field('CapBnd')}`),
    noNewPrivs: field('NoNewPrivs'),
    cwd: readlinkSync(`/proc/${p.pid}/cwd`),
  };
}

/** A container's log, as the kubelet writes it under the node's /var/log/pods. */
export function containerLog(node: RealNode, pod: V1Pod, container: string): string {
  const dir = join(
    node.layout.kubeletRoot,
    'pod-logs', // the kubelet's podLogsDir (dev/node/config.ts)
    `${pod.metadata?.namespace}_${pod.metadata?.name}_${pod.metadata?.uid}`,
    container,
  );
  try {
    return readdirSync(dir)
      .sort()
      .map((f) => readFileSync(join(dir, f), 'utf8'))
      .join('');
  } catch {
    return '';
  }
}

const downward: V1Container['env'] = [
  { name: 'LEASEHOLD_POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
  { name: 'LEASEHOLD_NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
];

/** The images (already imported into `n`'s containerd) run there under the project's securityContexts. */
export async function projectImagesRun(
  cluster: Cluster,
  n: RealNode,
  images: Record<string, LocalImage>,
): Promise<void> {
  const leasehold = images.leasehold as LocalImage;
  const nfs = images['nfs-ganesha'] as LocalImage;
  const listed = await n.ctr(['images', 'ls', '-q']);
  for (const ref of [leasehold.ref, nfs.ref]) assert.ok(listed.includes(ref), `${ref} imported: ${listed}`);

  const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
  const t0 = performance.now();
  await core.createNamespacedPod({
    namespace: 'default',
    body: {
      metadata: { name: 'leasehold' },
      spec: {
        nodeSelector: { 'kubernetes.io/hostname': n.name },
        securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
        // As the share pods have it: the agent's default fence (pod) needs it.
        shareProcessNamespace: true,
        restartPolicy: 'Never',
        terminationGracePeriodSeconds: 5,
        containers: [
          {
            name: 'manager',
            image: leasehold.ref,
            imagePullPolicy: 'Never',
            args: ['manager'],
            env: downward,
          },
          {
            name: 'agent',
            image: leasehold.ref,
            imagePullPolicy: 'Never',
            args: ['agent'],
            env: [
              ...(downward ?? []),
              { name: 'LEASEHOLD_LEASE_NAMESPACE', value: 'default' },
              { name: 'LEASEHOLD_LEASE_NAME', value: 'img-share' },
              ...AGENT_RUNTIME_ENV,
            ],
            securityContext: AGENT_SECURITY_CONTEXT,
          },
        ],
      },
    },
  });
  await core.createNamespacedPod({
    namespace: 'default',
    body: {
      metadata: { name: 'nfs' },
      spec: {
        nodeSelector: { 'kubernetes.io/hostname': n.name },
        restartPolicy: 'Never',
        terminationGracePeriodSeconds: 10,
        volumes: [
          { name: 'share', emptyDir: {} },
          { name: 'run', emptyDir: {} },
        ],
        containers: [
          {
            name: 'server',
            image: nfs.ref,
            imagePullPolicy: 'Never',
            securityContext: NFS_SERVER_SECURITY_CONTEXT,
            // NFSv4.0 for the libnfs client below (libnfs speaks no other v4).
            env: [{ name: 'LEASEHOLD_NFS_VERSIONS', value: '4.0,4.1' }],
            volumeMounts: [
              { name: 'share', mountPath: '/export' },
              { name: 'run', mountPath: '/run' },
              // As the manager's share pods (pod-spec.ts): ganesha's OFD-lock test file.
              { name: 'run', mountPath: NFS_TMP_MOUNT, subPath: NFS_TMP_SUBPATH },
            ],
          },
        ],
      },
    },
  });

  const started = await eventually(
    `both pods Running on ${n.name}`,
    async () => {
      const pods = await Promise.all(
        ['leasehold', 'nfs'].map((name) => core.readNamespacedPod({ namespace: 'default', name })),
      );
      return pods.every((p) => p.status?.containerStatuses?.every((c) => c.state?.running))
        ? pods
        : undefined;
    },
    120_000,
    200,
  );
  console.log(`real node: image pods create to Running ${Math.round(performance.now() - t0)} ms`);
  const [lpod, npod] = started as [V1Pod, V1Pod];
  assert.equal(lpod.spec?.nodeName, n.name);

  const entry = '/nodejs/bin/node dist/bin/leasehold.js';
  const manager = await eventually('the manager process', async () =>
    podProcess(n, lpod.metadata?.uid ?? '', `${entry} manager`),
  );
  assert.deepEqual(
    manager.uid,
    ['65532', '65532', '65532', '65532'],
    'the image USER, as runAsNonRoot required',
  );
  assert.deepEqual(manager.gid, ['65532', '65532', '65532', '65532']);
  assert.equal(manager.capEff, 0n, 'a non-root process holds no capability');
  assert.equal(manager.cwd, '/app', 'the image WORKDIR');
  const agent = await eventually('the agent process', async () =>
    podProcess(n, lpod.metadata?.uid ?? '', `${entry} agent`),
  );
  assert.deepEqual(agent.uid, ['0', '0', '0', '0'], 'AGENT_SECURITY_CONTEXT runs it as root');
  assert.equal(agent.capEff, capMask(['KILL']), 'CAP_KILL alone');
  assert.equal(agent.noNewPrivs, '1', 'allowPrivilegeEscalation: false');

  const ganesha = await eventually('ganesha.nfsd in the nfs pod', async () =>
    podProcess(n, npod.metadata?.uid ?? '', 'ganesha.nfsd'),
  );
  assert.deepEqual(ganesha.uid, ['0', '0', '0', '0']);
  assert.equal(
    ganesha.capEff,
    capMask(NFS_SERVER_SECURITY_CONTEXT.capabilities?.add ?? []),
    "exactly the preset's capabilities",
  );
  const serving = await eventually(
    "the server's `serving` line",
    async () => {
      const log = containerLog(n, npod, 'server');
      return /"msg":"serving"/.test(log) ? log : undefined;
    },
    60_000,
    200,
  ).catch((err: Error) => {
    throw new Error(`${err.message}; the server's log:\n${containerLog(n, npod, 'server')}`);
  });
  assert.match(serving, /"msg":"ganesha started"/);
  // With /tmp writable ganesha ran its OFD-lock test: lock support on.
  assert.doesNotMatch(serving, /Could not create file \/tmp\/ganesha\.nfsd\.locktest/);
  await actsAsTheClientsUser(n, npod, ganesha.pid);
  // After the start line: what each does once it has called the API in-cluster.
  const startLine = (c: string, line: RegExp) =>
    eventually(`the ${c}'s start line`, async () => {
      const log = containerLog(n, lpod, c);
      return line.test(log) ? log : undefined;
    });
  const managerLog = await startLine('manager', /"msg":"manager started"/);
  const agentLog = await startLine('agent', /"api":"in-cluster service account".*"msg":"agent started"/);
  // Both reach the API server the in-cluster way (kube-proxy's `kubernetes` Service,
  // the projected token) and are authenticated as default/default, which has no role:
  // the API server's authorization refuses them, and they retry (neither exits).
  const refused = (c: string, line: RegExp) =>
    eventually(
      `the ${c} refused by the API server's authorization (not failing to reach it)`,
      async () =>
        containerLog(n, lpod, c)
          .split('\n')
          .find((l) => line.test(l)),
      30_000,
      200,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; its log:\n${containerLog(n, lpod, c)}`);
    });
  const agentRefused = await refused(
    'agent',
    /reading lease default\/img-share failed: HTTP 403 .*User \\"system:serviceaccount:default:default\\" cannot get resource \\"leases\\".*retrying every retry period/,
  );
  const managerRefused = await refused(
    'manager',
    /listing sharemanagers failed: HTTP 403 .*User \\"system:serviceaccount:default:default\\" cannot list resource \\"sharemanagers\\".*"msg":"watch broken; re-watching with backoff"/,
  );
  console.log(
    `real node: after the start line, agent: ${agentRefused.slice(0, 600)}\nmanager: ${managerRefused.slice(0, 900)}`,
  );
  assert.ok(managerLog.length > 0 && agentLog.length > 0);
  const later = await core.readNamespacedPod({ namespace: 'default', name: 'leasehold' });
  for (const c of later.status?.containerStatuses ?? [])
    assert.ok(
      c.state?.running && c.restartCount === 0,
      `${c.name} runs on after the refusal: ${JSON.stringify(c.state)}`,
    );
  await Promise.all(
    ['leasehold', 'nfs'].map((name) =>
      core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 0 }),
    ),
  );
}

/**
 * ganesha with exactly the preset's capabilities acts as the NFS client's user and
 * enforces that user's permissions: a libnfs client (NFSv4.0, in the node's network, to
 * the pod's IP) as uid 1000 creates a file owned by 1000:1001 in a world-writable
 * directory, and may not create one in the export's root, root's and 0755 as a fresh
 * volume comes (an emptyDir is 0777, so it is made so first, through ganesha's own
 * mount namespace). Without SETUID/SETGID the file would be root's; acting as root
 * (DAC_OVERRIDE) the second create would pass.
 */
async function actsAsTheClientsUser(n: RealNode, pod: V1Pod, ganeshaPid: number): Promise<void> {
  const exportDir = `/proc/${ganeshaPid}/root/export`;
  chmodSync(exportDir, 0o755);
  mkdirSync(join(exportDir, 'shared'));
  chmodSync(join(exportDir, 'shared'), 0o777);
  const local = join(mkdtempSync(join(tmpdir(), 'leasehold-nfs-user-')), 'record.bin');
  writeFileSync(local, randomBytes(2048));
  const asUser = (name: string) =>
    `nfs://${pod.status?.podIP}/export/${name}?version=4&nfsport=2049&uid=1000&gid=1001`;
  try {
    const written = await inNetwork(n, ['nfs-cp', local, asUser('shared/u.bin')]);
    assert.equal(written.code, 0, `uid 1000 writes into the 0777 directory: ${written.stderr}`);
    const owner = statSync(join(exportDir, 'shared', 'u.bin'));
    assert.deepEqual([owner.uid, owner.gid], [1000, 1001], 'created as the client user');
    const denied = await inNetwork(n, ['nfs-cp', local, asUser('u.bin')]);
    assert.notEqual(denied.code, 0, "uid 1000 may not write into the export's root-owned 0755 root");
    assert.match(denied.stderr, /NFS4ERR_ACCESS/);
  } finally {
    rmSync(dirname(local), { recursive: true, force: true });
  }
}

/** Runs `argv` in the node's network namespace to its end: its exit code and stderr. */
async function inNetwork(n: RealNode, argv: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = n.spawnInNetwork(['timeout', '30', ...argv], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (c) => {
    stderr += c;
  });
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stderr };
}
