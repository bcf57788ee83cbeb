/**
 * The control-plane side of the testbed's CSI driver, as a cluster runs it: the
 * driver's controller part and the real external-attacher, as processes next to the
 * control plane (on the host, like the API server), the attacher with a kubeconfig of
 * its own identity (a token of the ServiceAccount default/csi-attacher) and the RBAC
 * of its upstream rbac.yaml (config.ts), and the CSIDriver object (attachRequired).
 * The node side (driver node part and registrar) is started by each real node
 * (dev/node/node-boot.ts) when given `csi`.
 *
 *   const csi = await startCsiController(cluster);
 *   await csi.makeVolume('vol-1');        // a static volume: backingDir/vol-1
 *   await csi.stop();                      // throws CsiLeftoverError if a process stays
 *
 * Guarantees: resolves once the attacher has connected to the driver and chosen its
 * real ControllerPublish handler, or rejects naming the part and its log, having
 * stopped what it started. stop() is idempotent; it stops both processes, deletes the
 * API objects it created, removes its directory (the backing volumes with it), and
 * fails if a process it started is still alive. On SIGINT/SIGTERM or this process's
 * death the processes die too (dev/cluster/component.ts: pdeathsig); the directory is
 * removed on the way out, and is in the cluster's dir for what SIGKILL leaves. Not guaranteed: that VolumeAttachments are gone at stop
 * (the test deletes its pods first; a VolumeAttachment left then stays in the
 * cluster, which the cluster's own stop removes with etcd).
 */
import { existsSync, rmSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { CoreV1Api, RbacAuthorizationV1Api, StorageV1Api } from '@kubernetes/client-node';
import { LeaseholdError } from '../../lib/errors.ts';
import { Component, onAbruptExit } from '../cluster/component.ts';
import type { Cluster } from '../cluster/types.ts';
import { csiBinaries } from './binaries.ts';
import {
  ATTACHER_ACCOUNT,
  attacherArgs,
  attacherClusterRole,
  attacherLeaseRole,
  csiDriverObject,
  DRIVER_NAME,
  driverControllerArgs,
  socketPathProblem,
} from './config.ts';

export interface CsiController {
  readonly driverName: string;
  /** Where each volume is a directory named after its handle; the nodes' driver parts mount from here. */
  readonly backingDir: string;
  /** Makes the directory of a static volume (owned by `owner`, default root) and returns its path. */
  makeVolume(handle: string, owner?: { uid: number; gid: number }): Promise<string>;
  /**
   * The nodes the controller part records `handle` attached to (ControllerPublish), by
   * name, with the time (host clock, ms) of the record.
   */
  attachments(handle: string): Promise<{ node: string; atMs: number }[]>;
  readonly logDir: string;
  stop(): Promise<void>;
}

export class CsiLeftoverError extends LeaseholdError {
  constructor(pids: readonly number[]) {
    super('E_CSI_LEFTOVERS', `the CSI controller's processes ${pids.join(', ')} are still alive after stop`);
  }
}

export async function startCsiController(
  cluster: Cluster,
  opts: { onProgress?: (line: string) => void } = {},
): Promise<CsiController> {
  const progress = opts.onProgress ?? (() => {});
  const bins = await csiBinaries();
  // In the cluster's dir: what a killed run leaves goes with the cluster's (the
  // processes die by pdeathsig, and nothing here is mounted on the host).
  const dir = await mkdtemp(join(cluster.dir, 'csi-'));
  const forgetAbrupt = onAbruptExit(() => rmSync(dir, { recursive: true, force: true }));
  const backingDir = join(dir, 'backing');
  const stateDir = join(dir, 'state');
  const logDir = join(dir, 'logs');
  const socket = join(dir, 'controller.sock');
  const kubeconfig = join(dir, 'csi-attacher.kubeconfig');
  const problem = socketPathProblem(socket);
  if (problem) {
    await rm(dir, { recursive: true, force: true });
    forgetAbrupt();
    throw new LeaseholdError('E_CSI_START', `the CSI controller: ${problem}`);
  }
  const components: Component[] = [];
  const created: (() => Promise<unknown>)[] = [];
  const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
  const rbac = cluster.kubeConfig.makeApiClient(RbacAuthorizationV1Api);
  const storage = cluster.kubeConfig.makeApiClient(StorageV1Api);

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    for (const c of [...components].reverse()) await c.stop(5_000);
    const alive = components.flatMap((c) => (c.pid !== undefined && isAlive(c.pid) ? [c.pid] : []));
    const deleted = await Promise.allSettled(created.reverse().map((undo) => undo()));
    await rm(dir, { recursive: true, force: true });
    forgetAbrupt();
    if (alive.length > 0) throw new CsiLeftoverError(alive);
    const failed = deleted.filter((d) => d.status === 'rejected');
    if (failed.length > 0)
      throw new LeaseholdError('E_CSI_STOP', "deleting the CSI controller's API objects failed", {
        cause: new AggregateError(failed.map((f) => (f as PromiseRejectedResult).reason)),
      });
  };

  /** Creates an object (an identical one left by an earlier start counts) and records its deletion. */
  const ensure = async (what: string, create: () => Promise<unknown>, remove: () => Promise<unknown>) => {
    try {
      await create();
    } catch (err) {
      if ((err as { code?: number }).code !== 409)
        throw new LeaseholdError('E_CSI_START', `creating ${what} for the CSI controller failed`, {
          cause: err,
        });
    }
    created.push(remove);
  };

  try {
    await Promise.all([backingDir, stateDir, logDir].map((d) => mkdir(d, { recursive: true })));
    const { namespace, name: account } = ATTACHER_ACCOUNT;
    await ensure(
      `CSIDriver ${DRIVER_NAME}`,
      () => storage.createCSIDriver({ body: csiDriverObject() }),
      () => storage.deleteCSIDriver({ name: DRIVER_NAME }),
    );
    await ensure(
      `ServiceAccount ${namespace}/${account}`,
      () => core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: account } } }),
      () => core.deleteNamespacedServiceAccount({ namespace, name: account }),
    );
    const clusterRole = attacherClusterRole();
    const roleName = clusterRole.metadata?.name ?? '';
    await ensure(
      `ClusterRole ${roleName}`,
      () => rbac.createClusterRole({ body: clusterRole }),
      () => rbac.deleteClusterRole({ name: roleName }),
    );
    const subjects = [{ kind: 'ServiceAccount', name: account, namespace }];
    await ensure(
      'ClusterRoleBinding csi-attacher-role',
      () =>
        rbac.createClusterRoleBinding({
          body: {
            metadata: { name: 'csi-attacher-role' },
            subjects,
            roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: roleName },
          },
        }),
      () => rbac.deleteClusterRoleBinding({ name: 'csi-attacher-role' }),
    );
    const leaseRole = attacherLeaseRole();
    const leaseRoleName = leaseRole.metadata?.name ?? '';
    await ensure(
      `Role ${namespace}/${leaseRoleName}`,
      () => rbac.createNamespacedRole({ namespace, body: leaseRole }),
      () => rbac.deleteNamespacedRole({ namespace, name: leaseRoleName }),
    );
    await ensure(
      `RoleBinding ${namespace}/csi-attacher-role-cfg`,
      () =>
        rbac.createNamespacedRoleBinding({
          namespace,
          body: {
            metadata: { name: 'csi-attacher-role-cfg' },
            subjects,
            roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: leaseRoleName },
          },
        }),
      () => rbac.deleteNamespacedRoleBinding({ namespace, name: 'csi-attacher-role-cfg' }),
    );
    // The testbed lives minutes; the token outlives it.
    const token = await core.createNamespacedServiceAccountToken({
      namespace,
      name: account,
      body: { spec: { audiences: [], expirationSeconds: 3600 } },
    });
    await cluster.writeTokenKubeconfig(kubeconfig, token.status?.token ?? '');

    const driver = new Component(
      'csi/controller',
      bins.driver,
      driverControllerArgs(socket, backingDir, stateDir),
      join(logDir, 'driver-controller.log'),
    );
    components.push(driver);
    driver.start();
    await driver.waitReady(async () => existsSync(socket), 10_000);
    const attacher = new Component(
      'csi/external-attacher',
      bins.attacher,
      attacherArgs(socket, kubeconfig),
      join(logDir, 'csi-attacher.log'),
    );
    components.push(attacher);
    attacher.start();
    await attacher.waitReady(
      async () => (await readFile(attacher.logPath, 'utf8')).includes('using real CSI handler'),
      30_000,
    );
    progress(`csi: driver controller and external-attacher up (logs: ${logDir})`);
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }

  return {
    driverName: DRIVER_NAME,
    backingDir,
    logDir,
    async makeVolume(handle, owner) {
      const path = join(backingDir, handle);
      await mkdir(path, { recursive: true });
      if (owner) await chown(path, owner.uid, owner.gid);
      return path;
    },
    async attachments(handle) {
      const dir = join(stateDir, 'attachments', handle);
      const names = existsSync(dir) ? (await readdir(dir)).sort() : [];
      return Promise.all(names.map(async (node) => ({ node, atMs: (await stat(join(dir, node))).mtimeMs })));
    },
    stop,
  };
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
