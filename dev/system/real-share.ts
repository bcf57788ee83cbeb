/**
 * A share on the shipped NFS server on real nodes (dev/system/real-system.ts), and
 * what the e2e scenarios read of it there:
 *  - createRealNfsShare: a static PersistentVolume of the testbed's CSI driver (dev/csi,
 *    `attachRequired: true`: the real attach-detach controller and the real
 *    external-attacher move it, and the manager's handoff through the lost node's
 *    `status.volumesInUse` is the real one) bound to a claim, and a ShareManager with
 *    only spec.volume (+ spec.nfs): the manager builds the pod of the real images;
 *  - createRealVolume: the volume is of the fencing driver's block kind (an ext4 image,
 *    dev/csi/plugin/driver/block.go), so ganesha's file handles survive a move; with
 *    `noAttach` a plain directory of the attach-less driver (CSIDriver attachRequired
 *    false: storage that cannot fence);
 *  - readRealShareFile: a file's bytes on the volume, as the node that has it mounted
 *    (the latest grant) sees it, or from the image when no node has;
 *  - GaneshaTracker: every ganesha.nfsd process of the share's pods on the nodes, from
 *    the host's /proc (the pod's cgroup under the node's cgroup root names its uid),
 *    sampled every `periodMs`, turned into windows by the pure ganeshaWindows():
 *    a window starts at the process's own start time (/proc/<pid>/stat, clock ticks
 *    since boot, mapped to CLOCK_MONOTONIC) and ends at the first sample that no
 *    longer sees it; so a window is never shorter than the process's life, and an
 *    overlap check on them is stricter, never looser. A process its node's freezer
 *    holds (freezer.state FROZEN: it runs no instruction) is not running: its window
 *    ends at the first sample that sees it frozen, and when it runs again a new window
 *    (reason `thawed` while open) starts at the last sample that saw it frozen, so a frozen
 *    stretch never hides a moment it may have run. A process with SIGKILL pending counts
 *    as frozen too (dev/node/pending-signals.ts: it never runs user code again; a frozen
 *    node's power-off kills and then thaws its processes, which show until reaped);
 *  - podLog: a container's log as the node's kubelet wrote it;
 *  - acksSince: a writer's acknowledgements from a moment on (pure): the writes a
 *    server that should no longer serve acknowledged; acksOutsideWindows: those no
 *    window of a running process accounts for.
 *
 * Not guaranteed: that the tracker sees a ganesha that lived shorter than its sampling
 * period (on a 2-core machine a sample can take longer than the period); a process
 * seen once has its full start. The mapping of boot time to CLOCK_MONOTONIC assumes
 * the host was never suspended (CLOCK_BOOTTIME = CLOCK_MONOTONIC + time suspended).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import { imagePath, readImageFile } from '../csi/block-image.ts';
import { BLOCK_FS_ATTRIBUTE } from '../csi/config.ts';
import { freezerCgroupOf, freezerMount } from '../node/freezer.ts';
import type { RealNode } from '../node/node.ts';
import { SIGKILL, signalPending } from '../node/pending-signals.ts';
import type { ServingWindow } from '../share-server/serving-window-log.ts';
import type { RealSystem } from './real-system.ts';
import { SHARES_NAMESPACE } from './real-system.ts';

const SM = { group: 'leasehold.dev', version: 'v1alpha1', plural: 'sharemanagers' };
export const REAL_NFS_EXPORT = '/export';
export const realPvName = (share: string) => `pv-${share}`;
export const realVolumeHandle = (share: string) => `vol-${share}`;

export interface RealNfsShareOptions {
  /** spec.nfs (docs/operations.md "NFS settings of a share"). */
  nfs?: { versions?: string[]; gracePeriod?: string; leaseLifetime?: string };
  /** Pin the share's pods to a node (spec.scheduling.nodeSelector). */
  node?: string;
  /** Or to the nodes with these labels (spec.scheduling.nodeSelector). */
  nodeSelector?: Record<string, string>;
  /** The volume on storage without an attach step (createRealVolume's `noAttach`). */
  noAttach?: boolean;
}

/**
 * A share's volume: a backing directory of the testbed's CSI driver, a static PV of it
 * and its claim `<share>-data` in the shares namespace (bound to each other); returns
 * the claim's name. Also what a share without leasehold mounts (bench's stock mode).
 * `noAttach`: a plain directory of the attach-less driver (the system started with
 * `noAttachDriver`): no attach, nothing that fences; `directoryOwner`: the fencing
 * driver's directory kind, its backing directory owned by that uid/gid (every node's
 * view is the one host directory, revoked at the detach); else the fencing driver's
 * block kind.
 */
export async function createRealVolume(
  sys: RealSystem,
  share: string,
  opts: { noAttach?: boolean; directoryOwner?: { uid: number; gid: number } } = {},
): Promise<string> {
  const claim = `${share}-data`;
  const noAttachDriver = sys.csi.noAttachDriverName;
  if (opts.noAttach && !noAttachDriver)
    throw new LeaseholdError(
      'E_REAL_VOLUME',
      `volume of ${share}: noAttach needs the system started with noAttachDriver: true`,
    );
  await sys.csi.makeVolume(realVolumeHandle(share), opts.directoryOwner);
  await sys.core.createPersistentVolume(
    {
      body: {
        metadata: { name: realPvName(share) },
        spec: {
          capacity: { storage: '1Gi' },
          accessModes: ['ReadWriteOnce'],
          persistentVolumeReclaimPolicy: 'Retain',
          storageClassName: '',
          claimRef: { namespace: SHARES_NAMESPACE, name: claim },
          csi:
            opts.noAttach && noAttachDriver
              ? // A plain directory: every node's bind mount of it has the host file system's handles.
                { driver: noAttachDriver, volumeHandle: realVolumeHandle(share) }
              : opts.directoryOwner
                ? { driver: sys.csi.driverName, volumeHandle: realVolumeHandle(share) }
                : {
                    driver: sys.csi.driverName,
                    volumeHandle: realVolumeHandle(share),
                    // The block kind: ext4's file handles are the same on every node's mount.
                    volumeAttributes: { [BLOCK_FS_ATTRIBUTE]: 'ext4' },
                  },
        },
      },
    },
    withDeadline(10_000),
  );
  await sys.core.createNamespacedPersistentVolumeClaim(
    {
      namespace: SHARES_NAMESPACE,
      body: {
        metadata: { name: claim },
        spec: {
          accessModes: ['ReadWriteOnce'],
          storageClassName: '',
          volumeName: realPvName(share),
          resources: { requests: { storage: '1Gi' } },
        },
      },
    },
    withDeadline(10_000),
  );
  return claim;
}

/**
 * A share of the demo record server (dev/share-server, compiled into the leasehold
 * image's dist/: spec.server runs it from that image, as the image's user 65532) on the
 * fencing driver's directory kind owned by that user; `node` pins it, `fence` and `args`
 * go to its spec. NB: not the block kind the NFS shares use: the record server never
 * fsyncs, and with one ext4 mount per node what the old node had only in its page cache
 * never reaches the image (seen: the old server's whole window log missing on the new
 * node).
 */
export async function createRealRecordShare(
  sys: RealSystem,
  share: string,
  opts: { node?: string; fence?: { action: string; process?: string }; args?: string[] } = {},
): Promise<void> {
  const claim = await createRealVolume(sys, share, { directoryOwner: { uid: 65532, gid: 65532 } });
  await sys.kc.makeApiClient(k8s.CustomObjectsApi).createNamespacedCustomObject(
    {
      ...SM,
      namespace: SHARES_NAMESPACE,
      body: {
        apiVersion: `${SM.group}/${SM.version}`,
        kind: 'ShareManager',
        metadata: { name: share, namespace: SHARES_NAMESPACE },
        spec: {
          volume: { pvc: claim, mountPath: '/export' },
          server: {
            image: sys.images.leasehold.ref,
            command: ['/nodejs/bin/node', 'dist/dev/share-server/main.js'],
            args: ['--dir=/export', ...(opts.args ?? [])],
            ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }],
          },
          ...(opts.fence ? { fence: opts.fence } : {}),
          serviceAccountName: 'leasehold-agent',
          ...schedulingOf(opts.node),
        },
      },
    },
    withDeadline(10_000),
  );
}

/** The volume (a static CSI PV + its claim `<share>-data`) and the ShareManager. */
export async function createRealNfsShare(
  sys: RealSystem,
  share: string,
  opts: RealNfsShareOptions = {},
): Promise<void> {
  const claim = await createRealVolume(sys, share, { noAttach: opts.noAttach });
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  await custom.createNamespacedCustomObject(
    {
      ...SM,
      namespace: SHARES_NAMESPACE,
      body: {
        apiVersion: `${SM.group}/${SM.version}`,
        kind: 'ShareManager',
        metadata: { name: share, namespace: SHARES_NAMESPACE },
        spec: {
          volume: { pvc: claim, mountPath: REAL_NFS_EXPORT },
          serviceAccountName: 'leasehold-agent',
          ...(opts.nfs ? { nfs: opts.nfs } : {}),
          ...schedulingOf(opts.node, opts.nodeSelector),
        },
      },
    },
    withDeadline(10_000),
  );
}

/** spec.scheduling pinning a share to `node`, or to the nodes with `labels`; nothing without either. */
function schedulingOf(node?: string, labels?: Record<string, string>) {
  if (!node && !labels) return {};
  return { scheduling: { nodeSelector: { ...labels, ...(node ? { 'kubernetes.io/hostname': node } : {}) } } };
}

/**
 * The file's bytes on the share's volume (empty when absent): read through the mount of
 * the node with the latest grant that has the volume's ext4 mounted (its page cache is
 * what its server wrote), else from the image (e2fsck'd copy, block-image.ts); a plain
 * directory volume (no image: the attach-less driver's) from the directory itself.
 */
export function readRealShareFile(sys: RealSystem, share: string, file: string): Buffer {
  return readRealVolumeFile(sys, realVolumeHandle(share), file);
}

/** readRealShareFile by the CSI volume handle (a dynamically provisioned volume's). */
export function readRealVolumeFile(sys: RealSystem, handle: string, file: string): Buffer {
  const mounted = sys.nodes
    .flatMap((node) => {
      const pid1 = /^\/proc\/(\d+)\/ns\/net$/.exec(node.netnsPath ?? '')?.[1];
      if (!pid1) return [];
      let mountinfo = '';
      try {
        mountinfo = readFileSync(`/proc/${pid1}/mountinfo`, 'utf8');
      } catch {
        return [];
      }
      return volumeMountsIn(mountinfo, handle, loopBackingFile).map((m) => ({
        ...m,
        root: `/proc/${pid1}/root`,
      }));
    })
    .sort((x, y) => y.grant - x.grant)[0];
  try {
    if (mounted) return readFileSync(join(mounted.root, mounted.mountPoint, file));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return Buffer.alloc(0);
    throw err;
  }
  const image = imagePath(join(sys.csi.backingDir, handle));
  if (!existsSync(image)) {
    // A plain directory (the attach-less driver's): every node's mount is this directory.
    const plain = join(sys.csi.backingDir, handle, file);
    return existsSync(plain) ? readFileSync(plain) : Buffer.alloc(0);
  }
  return readImageFile(image, file).content ?? Buffer.alloc(0);
}

const loopBackingFile = (dev: string): string | undefined => {
  try {
    return readFileSync(`/sys/block/${dev.replace(/^\/dev\//, '')}/loop/backing_file`, 'utf8').trim();
  } catch {
    return undefined;
  }
};

/**
 * Pure but for `backingFile`: the ext4 and XFS mounts in one node's mountinfo of a loop device
 * over an image in a view of `handle` (`.../views/<handle>/<node>.<grant>/disk.img`),
 * with the view's grant number (higher: later).
 */
export function volumeMountsIn(
  mountinfo: string,
  handle: string,
  backingFile: (dev: string) => string | undefined,
): { mountPoint: string; grant: number }[] {
  const out: { mountPoint: string; grant: number }[] = [];
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ');
    const [fstype, source] = (right ?? '').split(' ');
    const mountPoint = left?.split(' ')[4];
    if ((fstype !== 'ext4' && fstype !== 'xfs') || !source?.startsWith('/dev/loop') || !mountPoint) continue;
    const m = new RegExp(`/views/${handle.replace(/[.]/g, '\\.')}/[^/]+\\.(\\d+)/disk\\.img$`).exec(
      backingFile(source) ?? '',
    );
    if (m) out.push({ mountPoint, grant: Number(m[1]) });
  }
  return out;
}

/** A container's log as `node`'s kubelet wrote it (its podLogsDir), '' when there is none yet. */
export function podLog(node: RealNode, pod: k8s.V1Pod, container: string): string {
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

/**
 * The acknowledgements in `events` at or after `sinceMonoMs` (pure; both on
 * CLOCK_MONOTONIC). For a writer that stays with the old server (its pod IP), those
 * after the replacement's ganesha started are writes two servers took at once.
 */
export function acksSince(
  events: readonly { event: string; ms: number; seq?: number }[],
  sinceMonoMs: number,
): { ms: number; seq: number }[] {
  return events
    .filter((e) => e.event === 'ack' && e.ms >= sinceMonoMs)
    .map((e) => ({ ms: e.ms, seq: e.seq ?? -1 }));
}

/**
 * The acks that fall in none of `windows` (pure; an open window reaches on forever):
 * acks no process the tracker saw running accounts for. `slackMs`: how long after a
 * window's end an ack may still be recorded (the client timestamps the reply when it
 * reads it, which on a loaded machine can be late).
 */
export function acksOutsideWindows(
  acks: readonly { ms: number; seq: number }[],
  windows: readonly Pick<ServingWindow, 'startMonoMs' | 'stopMonoMs'>[],
  slackMs = 0,
): { ms: number; seq: number }[] {
  return acks.filter(
    (a) =>
      !windows.some(
        (w) => a.ms >= w.startMonoMs && a.ms <= (w.stopMonoMs ?? Number.POSITIVE_INFINITY) + slackMs,
      ),
  );
}

/** One sample: the ganesha processes seen, each with its own start on CLOCK_MONOTONIC. */
export interface GaneshaSample {
  atMonoMs: number;
  /** `startTicks`: the raw start (clock ticks since boot), which with the pid names one process. */
  seen: {
    podUid: string;
    pid: number;
    startTicks: number;
    startMonoMs: number;
    node: string;
    /** Held by the cgroup freezer (FROZEN), or SIGKILL pending, at the sample: it runs no user code. */
    frozen?: boolean;
  }[];
}

/**
 * Windows of the ganesha processes from samples in time order (pure): one per
 * (pod uid, pid), from its start to the first later sample without it (open when the
 * last sample still saw it). `podName` names a window by its pod (the uid when unknown).
 */
export function ganeshaWindows(
  samples: readonly GaneshaSample[],
  podName: (uid: string) => string | undefined,
  wallOf: (monoMs: number) => string,
): ServingWindow[] {
  const open = new Map<string, ServingWindow>();
  /** Processes seen frozen, by key: the last sample that saw each frozen. */
  const frozenAt = new Map<string, number>();
  const done: ServingWindow[] = [];
  const close = (key: string, w: ServingWindow, atMonoMs: number, reason: string) => {
    open.delete(key);
    done.push({ ...w, stopMonoMs: atMonoMs, stopWall: wallOf(atMonoMs), reason });
  };
  for (const s of samples) {
    const now = new Set<string>();
    for (const p of s.seen) {
      const key = `${p.podUid}/${p.pid}/${p.startTicks}`;
      now.add(key);
      const w = open.get(key);
      if (p.frozen) {
        if (w) close(key, w, s.atMonoMs, 'frozen');
        frozenAt.set(key, s.atMonoMs);
        continue;
      }
      if (w) continue;
      const thawedFrom = frozenAt.get(key);
      frozenAt.delete(key);
      const startMonoMs = thawedFrom ?? p.startMonoMs;
      open.set(key, {
        id: podName(p.podUid) ?? p.podUid,
        pid: p.pid,
        startMonoMs,
        startWall: wallOf(startMonoMs),
        firstSeq: 0,
        stopMonoMs: undefined,
        stopWall: undefined,
        lastSeq: undefined,
        reason: thawedFrom === undefined ? undefined : 'thawed',
      });
    }
    for (const [key, w] of open) if (!now.has(key)) close(key, w, s.atMonoMs, 'gone');
    for (const key of frozenAt.keys()) if (!now.has(key)) frozenAt.delete(key);
  }
  return [...done, ...open.values()].sort((a, b) => a.startMonoMs - b.startMonoMs);
}

const CLK_TCK = 100; // USER_HZ on Linux x86-64

/** A process's start from /proc/<pid>/stat field 22 (ticks since boot), and on CLOCK_MONOTONIC (ms). */
function processStart(
  pid: number,
  nowMono: number,
  uptimeS: number,
): { ticks: number; monoMs: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(fields[19]); // field 22 overall; fields[0] is field 3
    if (!Number.isFinite(ticks)) return undefined;
    return { ticks, monoMs: nowMono - (uptimeS - ticks / CLK_TCK) * 1000 };
  } catch {
    return undefined;
  }
}

/** The process's freezer cgroup reads FROZEN (v1 reports the effective state, a frozen parent's included). */
function isFrozen(freezer: string, pid: number): boolean {
  const cg = freezerCgroupOf(pid);
  if (cg === undefined) return false;
  try {
    return readFileSync(join(freezer, cg, 'freezer.state'), 'utf8').trim() === 'FROZEN';
  } catch {
    return false;
  }
}

/** The ganesha.nfsd processes on the host in a pod cgroup under one of `nodes`' cgroup roots. */
function sampleGanesha(nodes: readonly RealNode[], freezer: string | undefined): GaneshaSample {
  const atMonoMs = monotonicMs();
  const uptimeS = Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
  const seen: GaneshaSample['seen'] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (!cmdline.startsWith('ganesha.nfsd') && !cmdline.includes('/ganesha.nfsd\0')) continue;
      const cgroup = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
      const node = nodes.find((n) => cgroup.includes(`${n.layout.cgroupRoot}/`));
      const uid = /pod([0-9a-f-]{36})/.exec(cgroup)?.[1];
      if (!node || !uid) continue;
      const start = processStart(pid, atMonoMs, uptimeS);
      if (start)
        seen.push({
          podUid: uid,
          pid,
          startTicks: start.ticks,
          startMonoMs: start.monoMs,
          node: node.name,
          // A dying process (SIGKILL pending: a power-off kills, then thaws) runs no user code.
          frozen: (freezer !== undefined && isFrozen(freezer, pid)) || signalPending(pid, SIGKILL) === true,
        });
    } catch {
      // gone meanwhile
    }
  }
  return { atMonoMs, seen };
}

/**
 * The ganesha processes of one share's pods on the real nodes (see the header). Pod
 * names come from the API (its pods' uids), read as they appear.
 */
export class GaneshaTracker {
  private readonly samples: GaneshaSample[] = [];
  private readonly names = new Map<string, string>();
  /** Pod uid -> whether it is one of this share's pods (`owns`). */
  private readonly owned = new Map<string, boolean>();
  private running = true;
  private readonly done: Promise<void>;

  /**
   * `owns` says which pods are the share's: by default those the manager labels for it
   * (`leasehold.dev/share-manager=<share>`); stock's Deployment passes its own label.
   */
  constructor(
    private readonly sys: RealSystem,
    readonly share: string,
    periodMs = 100,
    private readonly owns: (pod: k8s.V1Pod) => boolean = (pod) =>
      pod.metadata?.labels?.[LABEL_SHARE_MANAGER] === share,
  ) {
    let freezer: string | undefined;
    try {
      freezer = freezerMount();
    } catch {
      freezer = undefined; // no v1 freezer: no node can be frozen either
    }
    this.done = (async () => {
      while (this.running) {
        const s = sampleGanesha(this.sys.nodes, freezer);
        this.samples.push(s);
        if (s.seen.some((p) => !this.names.has(p.podUid))) await this.learnNames();
        await sleep(periodMs);
      }
    })();
  }

  private async learnNames(): Promise<void> {
    const pods = await this.sys.core
      .listNamespacedPod({ namespace: SHARES_NAMESPACE }, withDeadline(5_000))
      .catch(() => undefined);
    for (const p of pods?.items ?? [])
      if (p.metadata?.uid && p.metadata.name) {
        this.names.set(p.metadata.uid, p.metadata.name);
        this.owned.set(p.metadata.uid, this.owns(p));
      }
  }

  /**
   * Windows of this share's ganesha processes: of its pods (`owns`), and of any pod the
   * API never showed (kept: it may be this share's); other pods' are left out.
   */
  windows(): ServingWindow[] {
    const offset = Date.now() - monotonicMs();
    const mine = new Set(
      this.samples.flatMap((s) =>
        s.seen.flatMap((p) => (this.owned.get(p.podUid) === false ? [] : [p.podUid])),
      ),
    );
    return ganeshaWindows(
      this.samples.map((s) => ({ ...s, seen: s.seen.filter((p) => mine.has(p.podUid)) })),
      (uid) => this.names.get(uid),
      (ms) => new Date(ms + offset).toISOString(),
    );
  }

  /** How many samples were taken, and the longest gap between two (ms). */
  coverage(): { samples: number; maxGapMs: number } {
    let maxGapMs = 0;
    for (let i = 1; i < this.samples.length; i++)
      maxGapMs = Math.max(maxGapMs, (this.samples[i]?.atMonoMs ?? 0) - (this.samples[i - 1]?.atMonoMs ?? 0));
    return { samples: this.samples.length, maxGapMs };
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}
