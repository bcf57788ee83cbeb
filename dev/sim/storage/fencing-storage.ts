/**
 * The simulated storage that fences (issue 11): each volume's data lives in one backing
 * directory (`<root>/volumes/<pv>`, as for the shared kind), and a node reaches it only
 * through its own revocable view (volume-view.ts), mounted at
 * `<root>/storage/<pv>/<node>.<n>` with the link `<root>/storage/<pv>/<node>` to the
 * current one; the kubelet resolves that link when it starts a pod (../kubelet/pod-volumes.ts), so
 * a pod keeps the view it started with.
 *
 * The attacher (csi-attacher.ts) calls grant() before it reports a VolumeAttachment
 * attached (ControllerPublish) and revoke() before it removes the finalizer of a
 * deleted one (ControllerUnpublish). So, as on network storage that blocklists a
 * detached client, the old node's I/O fails with EIO from then on, also for a process
 * that was frozen and resumes, and `log` proves the order: revoke on the old node
 * before the grant elsewhere (access-log.ts).
 *
 * Two kinds (the PV's csi.volumeAttributes say which, volumeKindOf):
 *  - 'directory': the view is the volume; pods use the view's mount point;
 *  - 'ext4' (block-image.ts): the backing directory holds one ext4 image, made at the
 *    first grant (CreateVolume); each grant mounts it through the new view (a loop device
 *    over the view's file: journal replay on the new node, as after a crash) at
 *    `<root>/storage/<pv>/<node>.<n>`, the view itself at `<node>.<n>.view`. A revoked
 *    node keeps its mount, whose every I/O to the image (page-cache writeback, journal
 *    commits, fsync, reads that miss the cache) fails with EIO; write(2) into its page
 *    cache may still succeed, as on any disk, and lands nowhere; once the journal
 *    aborts, writes fail at once (EROFS, the file system's emergency read-only).
 *
 * Guarantees: grant() is idempotent for a live view; revoke() of a node with no live view
 * does nothing; stop() revokes nothing (the sim is going away) and
 * unmounts every view and file system, live or revoked (the loop devices go with them:
 * autoclear). Construction sweeps what a killed run's storage left (storage-leftovers.ts)
 * and claims `root` for this process.
 * Not modelled: a node writing to the backing directory around its view (the sim's own
 * processes run on the host and could); attach latency (the attacher's attachDelayMs);
 * a frozen node's kernel: its ext4 writeback and journal commits go on during a freeze
 * (one host kernel) and land before the revoke, where a frozen machine's would run on
 * resume and fail; the mount belongs to NodeStage on a real cluster (here the attacher's
 * grant does it, before the attachment is reported).
 */
import { mkdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { monotonicMs } from '../../../lib/clock.ts';
import type { AccessLogEntry, AccessOp } from '../../csi/access-log.ts';
import { BLOCK_FS, BLOCK_FS_ATTRIBUTE, createImage, IMAGE_FILE } from '../../csi/block-image.ts';
import { fencefsBinary } from '../../csi/fencefs-binary.ts';
import { claimStorage, sweepDeadStorage } from './storage-leftovers.ts';
import { type ViewStats, VolumeView } from './volume-view.ts';

/** PV csi.volumeAttributes key that selects this storage for a volume of the test driver. */
export const FENCING_ATTRIBUTE = 'storage.leasehold.dev/fencing';

export type FencingVolumeKind = 'directory' | 'ext4';

/**
 * Pure: the fencing kind a PV's csi.volumeAttributes ask for, undefined when the volume
 * is not on the fencing storage; an error value for a block file system it cannot make.
 */
export function volumeKindOf(
  attributes: Readonly<Record<string, string>> | undefined,
): FencingVolumeKind | undefined | Error {
  if (attributes?.[FENCING_ATTRIBUTE] !== 'true') return undefined;
  const fs = attributes[BLOCK_FS_ATTRIBUTE];
  if (fs === undefined) return 'directory';
  if (fs === BLOCK_FS) return 'ext4';
  return new Error(`${BLOCK_FS_ATTRIBUTE}=${JSON.stringify(fs)}: the fencing storage makes only ${BLOCK_FS}`);
}

/** The link a node's pods resolve to reach their view of `pv`. */
export function viewLink(simRoot: string, pv: string, node: string): string {
  return join(simRoot, 'storage', pv, node);
}

export class FencingStorage {
  readonly log: AccessLogEntry[] = [];
  private readonly live = new Map<string, VolumeView>(); // `${pv}\0${node}`
  private readonly all: VolumeView[] = [];
  private readonly granted: { pv: string; node: string; grantSeq: number; view: VolumeView }[] = [];
  private generation = 0;
  private stopped = false;

  constructor(
    private readonly simRoot: string,
    private readonly onLog: (msg: string, extra?: Record<string, unknown>) => void = () => {},
    private readonly binary: () => string = fencefsBinary,
  ) {
    const { swept, problems } = sweepDeadStorage();
    if (swept.length > 0 || problems.length > 0)
      this.onLog('storage swept what a killed run left', { swept, problems });
    claimStorage(simRoot);
  }

  /**
   * Mounts `node`'s view of `pv` (if not live already) and returns what its pods use:
   * the view's mount point, or for 'ext4' where the image is mounted through it.
   */
  async grant(pv: string, node: string, kind: FencingVolumeKind = 'directory'): Promise<string> {
    if (this.stopped) throw new Error(`grant ${pv} to ${node}: the storage is stopped`);
    const key = `${pv}\0${node}`;
    const existing = this.live.get(key);
    if (existing) return existing.fsMountpoint ?? existing.mountpoint;
    const backing = join(this.simRoot, 'volumes', pv);
    const dir = join(this.simRoot, 'storage', pv);
    mkdirSync(backing, { recursive: true });
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    this.generation += 1;
    const name = `${node}.${this.generation}`;
    const mountpoint = join(dir, name);
    mkdirSync(mountpoint, { mode: 0o755 });
    let view: VolumeView;
    if (kind === 'ext4') {
      if (createImage(backing)) this.onLog('storage made the ext4 image', { pv, image: IMAGE_FILE });
      const viewpoint = `${mountpoint}.view`;
      mkdirSync(viewpoint, { mode: 0o755 });
      view = await VolumeView.mount(this.binary(), backing, viewpoint, {
        ext4: { image: IMAGE_FILE, mountpoint },
      });
    } else {
      view = await VolumeView.mount(this.binary(), backing, mountpoint);
    }
    this.all.push(view);
    this.live.set(key, view);
    const link = viewLink(this.simRoot, pv, node);
    rmSync(`${link}.tmp`, { force: true });
    symlinkSync(name, `${link}.tmp`);
    renameSync(`${link}.tmp`, link);
    this.note('grant', pv, node, mountpoint);
    this.granted.push({ pv, node, grantSeq: this.log.length, view });
    return mountpoint;
  }

  /** Cuts `node`'s view of `pv`: resolves once every later operation through it fails. */
  async revoke(pv: string, node: string): Promise<void> {
    const key = `${pv}\0${node}`;
    const view = this.live.get(key);
    if (!view) return;
    await view.revoke();
    this.live.delete(key);
    this.note('revoke', pv, node, view.fsMountpoint ?? view.mountpoint);
  }

  /**
   * The stats of every view `pv` had (dev/fuse Stats: data writes served with the time of
   * the first and last, requests refused after the revoke), in grant order, each with the
   * node and its `seq` in the log: the storage's own record of who wrote when. Views
   * whose process has exited report their last stats read (`undefined` if none).
   */
  async viewStats(pv: string): Promise<{ node: string; grantSeq: number; stats: ViewStats | undefined }[]> {
    const out: { node: string; grantSeq: number; stats: ViewStats | undefined }[] = [];
    for (const { pv: p, node, grantSeq, view } of this.granted)
      if (p === pv) out.push({ node, grantSeq, stats: await view.stats() });
    return out;
  }

  /** True when `pv` ever had a view here (a fencing volume this storage knows). */
  knows(pv: string): boolean {
    return this.log.some((e) => e.pv === pv);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.all.map((v) => v.close()));
    this.live.clear();
  }

  private note(op: AccessOp, pv: string, node: string, view: string): void {
    const entry: AccessLogEntry = {
      seq: this.log.length + 1,
      op,
      pv,
      node,
      view,
      monoMs: monotonicMs(),
      wall: new Date(),
    };
    this.log.push(entry);
    this.onLog(`storage ${op}`, { pv, node, view, seq: entry.seq, monoMs: entry.monoMs });
  }
}
