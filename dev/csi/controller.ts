/**
 * The control-plane side of the testbed's CSI driver, as a cluster runs it: the
 * driver's controller part and the real external-attacher (with `provisioning`, the
 * real external-provisioner and a StorageClass too), as processes next to the control
 * plane (on the host, like the API server), each sidecar with a kubeconfig of its own
 * identity (a token of its ServiceAccount, default/csi-attacher or
 * default/csi-provisioner) and the RBAC of its upstream rbac.yaml (config.ts), and the
 * CSIDriver object (attachRequired; with `noAttachDriver` also the attach-less second
 * name's, attachRequired false, which nothing here serves). With `fencing` the driver grants each node its own
 * revocable view of a volume (plugin/driver/fencing.go); `accessLog()` reads its
 * record of grants and revokes, `viewStats(pv)` what each view served (writes, the
 * first's and last's CLOCK_MONOTONIC ms, requests refused after its revoke), for
 * access-log.ts writesAcrossRevokes.
 * The node side (driver node part and registrar) is started by each real node
 * (dev/node/node-boot.ts) when given `csi`.
 *
 *   const csi = await startCsiController(cluster);
 *   await csi.makeVolume('vol-1');        // a static volume: backingDir/vol-1
 *   await csi.stop();                      // throws CsiLeftoverError if a process stays
 *
 * Guarantees: resolves once the attacher has connected to the driver and chosen its
 * real ControllerPublish handler (and the provisioner has started its controller), or
 * rejects naming the part and its log, having stopped what it started. stop() is
 * idempotent; it stops its processes (the driver closes its views first), deletes the
 * API objects it created, removes its directory (the backing volumes with it), and
 * fails if a process it started, a view's fencefs process or a view's mount (in any
 * mount namespace: view-leftovers.ts) is still there. On SIGINT/SIGTERM or this process's
 * death the processes die too (dev/cluster/component.ts: pdeathsig); the directory is
 * removed on the way out, and is in the cluster's dir for what SIGKILL leaves. Not guaranteed: that VolumeAttachments are gone at stop
 * (the test deletes its pods first; a VolumeAttachment left then stays in the
 * cluster, which the cluster's own stop removes with etcd).
 */
import { existsSync, rmSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import {
  CoreV1Api,
  RbacAuthorizationV1Api,
  StorageV1Api,
  type V1ClusterRole,
  type V1Role,
} from '@kubernetes/client-node';
import { LeaseholdError } from '../../lib/errors.ts';
import { Component, onAbruptExit } from '../cluster/component.ts';
import type { Cluster } from '../cluster/types.ts';
import type { AccessLogEntry, AccessOp, ViewWrites } from './access-log.ts';
import { csiBinaries } from './binaries.ts';
import {
  ATTACHER_ACCOUNT,
  attacherArgs,
  attacherClusterRole,
  attacherLeaseRole,
  csiDriverObject,
  DRIVER_NAME,
  driverControllerArgs,
  NOATTACH_DRIVER_NAME,
  PROVISIONER_ACCOUNT,
  provisionerArgs,
  provisionerClusterRole,
  provisionerRole,
  RESIZER_ACCOUNT,
  resizerArgs,
  resizerClusterRole,
  resizerRole,
  STORAGE_CLASS,
  STORAGE_CLASS_XFS,
  socketPathProblem,
  storageClassObject,
} from './config.ts';
import { fencefsBinary } from './fencefs-binary.ts';
import { viewLeftovers } from './view-leftovers.ts';

export interface CsiController {
  readonly driverName: string;
  /**
   * The attach-less second name (NOATTACH_DRIVER_NAME, CSIDriver attachRequired false)
   * when started with `noAttachDriver`; its volumes are plain directories of the same
   * backing dir (makeVolume), staged by the nodes' second driver part with no attach.
   */
  readonly noAttachDriverName: string | undefined;
  /** Where each volume is a directory named after its handle; the nodes' driver parts mount from here. */
  readonly backingDir: string;
  /** Makes the directory of a static volume (owned by `owner`, default root) and returns its path. */
  makeVolume(handle: string, owner?: { uid: number; gid: number }): Promise<string>;
  /**
   * The nodes the controller part records `handle` attached to (ControllerPublish), by
   * name, with the time (host clock, ms) of the record.
   */
  attachments(handle: string): Promise<{ node: string; atMs: number }[]>;
  /** The driver's grants and revokes of views, in its order (fencing mode; [] otherwise). */
  accessLog(): Promise<AccessLogEntry[]>;
  /**
   * Every view of `pv` ever granted, in grant order, with what it served as of now
   * (a live view is asked now; one whose fencefs exited, e.g. with its crashed node,
   * has its last stats). Fencing mode only (an error otherwise).
   */
  viewStats(pv: string): Promise<DriverViewStats[]>;
  /** A dynamically provisioned volume (CreateVolume): its directory and recorded capacity, or undefined. */
  volume(handle: string): Promise<{ dir: string; capacityBytes: number } | undefined>;
  readonly logDir: string;
  stop(): Promise<void>;
}

/** One view of a volume as the fencing driver reports it (GET /views, fencing.go report). */
export interface DriverViewStats extends ViewWrites {
  pv: string;
  /** The view's mount point (in its node's mount namespace). */
  view: string;
  /** Requests answered EIO after its revoke. */
  refused: number;
  revoked: boolean;
  /** False once its fencefs exited; `hasStats` false when it never reported (then 0 writes). */
  live: boolean;
  hasStats: boolean;
}

export class CsiLeftoverError extends LeaseholdError {
  constructor(leftovers: readonly string[]) {
    super('E_CSI_LEFTOVERS', `the CSI controller left behind after stop: ${leftovers.join('; ')}`);
  }
}

export interface CsiControllerOptions {
  onProgress?: (line: string) => void;
  /**
   * The driver's fencing mode (plugin/driver/fencing.go): a node reaches a volume only
   * through its own revocable view, granted at ControllerPublish, revoked at
   * ControllerUnpublish. Default false: the node bind-mounts the backing directory.
   * Needs /dev/fuse and leasehold-fencefs (dev/fuse, built on first use).
   */
  fencing?: boolean;
  /**
   * Dynamic provisioning: the external-provisioner and the StorageClass STORAGE_CLASS.
   * Default false (one process and a few API objects less; static PVs work either way).
   */
  provisioning?: boolean;
  /**
   * With `provisioning`: also the real external-resizer, and the StorageClass allows
   * expansion (the driver grows the image and, on the node, the mounted ext4 online).
   */
  expansion?: boolean;
  /**
   * Also the CSIDriver NOATTACH_DRIVER_NAME (attachRequired: false): storage that cannot
   * fence. No process here serves it (there is no attach); the nodes need
   * `csi.noAttachDriver` too. Default false.
   */
  noAttachDriver?: boolean;
}

export async function startCsiController(
  cluster: Cluster,
  opts: CsiControllerOptions = {},
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
  const viewsSocket = join(dir, 'views.sock');
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
    const alive = [
      ...components.flatMap((c) =>
        c.pid !== undefined && isAlive(c.pid) ? [`process ${c.pid} (${c.name})`] : [],
      ),
      ...viewLeftovers(backingDir),
    ];
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
    await ensure(
      `CSIDriver ${DRIVER_NAME}`,
      () => storage.createCSIDriver({ body: csiDriverObject() }),
      () => storage.deleteCSIDriver({ name: DRIVER_NAME }),
    );
    if (opts.noAttachDriver)
      await ensure(
        `CSIDriver ${NOATTACH_DRIVER_NAME}`,
        () => storage.createCSIDriver({ body: csiDriverObject(NOATTACH_DRIVER_NAME) }),
        () => storage.deleteCSIDriver({ name: NOATTACH_DRIVER_NAME }),
      );
    /** A sidecar's ServiceAccount, its upstream ClusterRole and Role bound to it, and a kubeconfig of its token. */
    const identity = async (
      account: { namespace: string; name: string },
      clusterRole: V1ClusterRole,
      role: V1Role,
      kubeconfig: string,
    ) => {
      const { namespace, name } = account;
      await ensure(
        `ServiceAccount ${namespace}/${name}`,
        () => core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } }),
        () => core.deleteNamespacedServiceAccount({ namespace, name }),
      );
      const subjects = [{ kind: 'ServiceAccount', name, namespace }];
      const roleName = clusterRole.metadata?.name ?? '';
      await ensure(
        `ClusterRole ${roleName}`,
        () => rbac.createClusterRole({ body: clusterRole }),
        () => rbac.deleteClusterRole({ name: roleName }),
      );
      await ensure(
        `ClusterRoleBinding ${name}-role`,
        () =>
          rbac.createClusterRoleBinding({
            body: {
              metadata: { name: `${name}-role` },
              subjects,
              roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: roleName },
            },
          }),
        () => rbac.deleteClusterRoleBinding({ name: `${name}-role` }),
      );
      const nsRoleName = role.metadata?.name ?? '';
      await ensure(
        `Role ${namespace}/${nsRoleName}`,
        () => rbac.createNamespacedRole({ namespace, body: role }),
        () => rbac.deleteNamespacedRole({ namespace, name: nsRoleName }),
      );
      await ensure(
        `RoleBinding ${namespace}/${name}-role-cfg`,
        () =>
          rbac.createNamespacedRoleBinding({
            namespace,
            body: {
              metadata: { name: `${name}-role-cfg` },
              subjects,
              roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: nsRoleName },
            },
          }),
        () => rbac.deleteNamespacedRoleBinding({ namespace, name: `${name}-role-cfg` }),
      );
      // The testbed lives minutes; the token outlives it.
      const token = await core.createNamespacedServiceAccountToken({
        namespace,
        name,
        body: { spec: { audiences: [], expirationSeconds: 3600 } },
      });
      await cluster.writeTokenKubeconfig(kubeconfig, token.status?.token ?? '');
    };
    await identity(ATTACHER_ACCOUNT, attacherClusterRole(), attacherLeaseRole(), kubeconfig);

    const driver = new Component(
      'csi/controller',
      bins.driver,
      driverControllerArgs(
        socket,
        backingDir,
        stateDir,
        opts.fencing ? { fencefs: fencefsBinary(), viewsSocket } : undefined,
      ),
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
    if (opts.provisioning) {
      const provisionerKubeconfig = join(dir, 'csi-provisioner.kubeconfig');
      await identity(PROVISIONER_ACCOUNT, provisionerClusterRole(), provisionerRole(), provisionerKubeconfig);
      await ensure(
        `StorageClass ${STORAGE_CLASS}`,
        () => storage.createStorageClass({ body: storageClassObject(opts.expansion === true) }),
        () => storage.deleteStorageClass({ name: STORAGE_CLASS }),
      );
      const provisioner = new Component(
        'csi/external-provisioner',
        bins.provisioner,
        provisionerArgs(socket, provisionerKubeconfig),
        join(logDir, 'csi-provisioner.log'),
      );
      components.push(provisioner);
      provisioner.start();
      await provisioner.waitReady(
        async () => (await readFile(provisioner.logPath, 'utf8')).includes('Started provisioner controller'),
        30_000,
      );
      if (opts.expansion) {
        await ensure(
          `StorageClass ${STORAGE_CLASS_XFS}`,
          () => storage.createStorageClass({ body: storageClassObject(true, 'xfs') }),
          () => storage.deleteStorageClass({ name: STORAGE_CLASS_XFS }),
        );
        const resizerKubeconfig = join(dir, 'csi-resizer.kubeconfig');
        await identity(RESIZER_ACCOUNT, resizerClusterRole(), resizerRole(), resizerKubeconfig);
        const resizer = new Component(
          'csi/external-resizer',
          bins.resizer,
          resizerArgs(socket, resizerKubeconfig),
          join(logDir, 'csi-resizer.log'),
        );
        components.push(resizer);
        resizer.start();
        // NB: the resizer logs its controller's start with klog; any line after the CSI
        // driver's name was read means it connected and probed the plugin's capabilities.
        await resizer.waitReady(
          async () =>
            /Starting external resizer|Started external resizer|Starting resize controller/i.test(
              await readFile(resizer.logPath, 'utf8'),
            ),
          30_000,
        );
      }
    }
    progress(
      `csi: driver controller${opts.fencing ? ' (fencing)' : ''}, external-attacher${opts.provisioning ? ', external-provisioner' : ''}${opts.noAttachDriver ? `, CSIDriver ${NOATTACH_DRIVER_NAME}` : ''} up (logs: ${logDir})`,
    );
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }

  return {
    driverName: DRIVER_NAME,
    noAttachDriverName: opts.noAttachDriver ? NOATTACH_DRIVER_NAME : undefined,
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
    async accessLog() {
      const file = join(stateDir, 'access.jsonl');
      return existsSync(file) ? parseAccessLog(await readFile(file, 'utf8')) : [];
    },
    async viewStats(pv) {
      if (!opts.fencing)
        throw new LeaseholdError(
          'E_CSI_VIEWS',
          `view stats of ${pv}: the CSI controller runs without fencing`,
        );
      return parseViewReports(await getViews(viewsSocket)).filter((v) => v.pv === pv);
    },
    async volume(handle) {
      const file = join(stateDir, 'volumes', `${handle}.json`);
      if (!existsSync(file)) return undefined;
      const meta = JSON.parse(await readFile(file, 'utf8')) as { capacityBytes: number };
      return { dir: join(backingDir, handle), capacityBytes: meta.capacityBytes };
    },
    stop,
  };
}

/**
 * Pure: the driver's access log (plugin/driver/fencing.go, one JSON object a line) as
 * access-log.ts entries; a line that is not one is an error naming its number.
 */
export function parseAccessLog(text: string): AccessLogEntry[] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((line, i) => {
      const r = JSON.parse(line) as Partial<Record<string, unknown>>;
      const ok =
        typeof r.seq === 'number' &&
        (r.op === 'grant' || r.op === 'revoke') &&
        typeof r.pv === 'string' &&
        typeof r.node === 'string' &&
        typeof r.view === 'string' &&
        typeof r.monoMs === 'number' &&
        typeof r.wallMs === 'number';
      if (!ok)
        throw new LeaseholdError(
          'E_CSI_ACCESS_LOG',
          `the CSI driver's access log, line ${i + 1}: not an access record: ${line}`,
        );
      return {
        seq: r.seq as number,
        op: r.op as AccessOp,
        pv: r.pv as string,
        node: r.node as string,
        view: r.view as string,
        monoMs: r.monoMs as number,
        wall: new Date(r.wallMs as number),
      };
    });
}

/** GET /views of the driver's views socket (main.go serveViews), 20 s at most. */
function getViews(socketPath: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const fail = (err: unknown) =>
      reject(
        new LeaseholdError('E_CSI_VIEWS', `reading the fencing views' stats from ${socketPath} failed`, {
          cause: err,
        }),
      );
    const req = request({ socketPath, path: '/views', method: 'GET', timeout: 20_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () =>
        res.statusCode === 200 ? resolve(body) : fail(new Error(`HTTP ${res.statusCode}: ${body}`)),
      );
      res.on('error', fail);
    });
    req.on('timeout', () => req.destroy(new Error('no answer within 20 s')));
    req.on('error', fail);
    req.end();
  });
}

/**
 * Pure: the driver's GET /views answer (fencing.go viewReport, a JSON array; stats in
 * fencefs.Stats form, CLOCK_MONOTONIC ns) as DriverViewStats, times in ms (a zero time:
 * no write). Anything else is an error naming the entry and the field.
 */
export function parseViewReports(text: string): DriverViewStats[] {
  const bad = (what: string) =>
    new LeaseholdError('E_CSI_VIEWS', `the CSI driver's view stats: ${what}: ${text.slice(0, 300)}`);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new LeaseholdError('E_CSI_VIEWS', `the CSI driver's view stats: not JSON: ${text.slice(0, 300)}`, {
      cause: err,
    });
  }
  if (!Array.isArray(raw)) throw bad('not an array');
  return raw.map((r: Record<string, unknown>, i) => {
    for (const k of ['volume', 'node', 'view'] as const)
      if (typeof r[k] !== 'string') throw bad(`entry ${i}: ${k} is not a string`);
    if (typeof r.grantSeq !== 'number') throw bad(`entry ${i}: grantSeq is not a number`);
    if (typeof r.live !== 'boolean' || typeof r.revoked !== 'boolean')
      throw bad(`entry ${i}: live and revoked must be booleans`);
    const st = r.stats as Record<string, unknown> | undefined;
    if (st !== undefined)
      for (const k of ['writes', 'firstWriteMonoNs', 'lastWriteMonoNs', 'refused'] as const)
        if (typeof st[k] !== 'number') throw bad(`entry ${i}: stats.${k} is not a number`);
    const ms = (ns: unknown) => (typeof ns === 'number' && ns > 0 ? ns / 1e6 : undefined);
    return {
      pv: r.volume as string,
      node: r.node as string,
      view: r.view as string,
      grantSeq: r.grantSeq,
      live: r.live,
      revoked: r.revoked,
      hasStats: st !== undefined,
      writes: (st?.writes as number | undefined) ?? 0,
      firstWriteMonoMs: ms(st?.firstWriteMonoNs),
      lastWriteMonoMs: ms(st?.lastWriteMonoNs),
      refused: (st?.refused as number | undefined) ?? 0,
    };
  });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
