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
 * Guarantees: grant() is idempotent for a live view; revoke() of a node with no live view
 * does nothing; stop() revokes nothing (the sim is going away) and
 * unmounts every view, live or revoked.
 * Not modelled: a node writing to the backing directory around its view (the sim's own
 * processes run on the host and could); attach latency (the attacher's attachDelayMs).
 */
import { mkdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { monotonicMs } from '../../../lib/clock.ts';
import type { AccessLogEntry, AccessOp } from './access-log.ts';
import { fencefsBinary } from './fencefs-binary.ts';
import { VolumeView } from './volume-view.ts';

/** PV csi.volumeAttributes key that selects this storage for a volume of the test driver. */
export const FENCING_ATTRIBUTE = 'storage.leasehold.dev/fencing';

/** The link a node's pods resolve to reach their view of `pv`. */
export function viewLink(simRoot: string, pv: string, node: string): string {
  return join(simRoot, 'storage', pv, node);
}

export class FencingStorage {
  readonly log: AccessLogEntry[] = [];
  private readonly live = new Map<string, VolumeView>(); // `${pv}\0${node}`
  private readonly all: VolumeView[] = [];
  private generation = 0;
  private stopped = false;

  constructor(
    private readonly simRoot: string,
    private readonly onLog: (msg: string, extra?: Record<string, unknown>) => void = () => {},
    private readonly binary: () => string = fencefsBinary,
  ) {}

  /** Mounts `node`'s view of `pv` (if not live already) and returns its mount point. */
  async grant(pv: string, node: string): Promise<string> {
    if (this.stopped) throw new Error(`grant ${pv} to ${node}: the storage is stopped`);
    const key = `${pv}\0${node}`;
    const existing = this.live.get(key);
    if (existing) return existing.mountpoint;
    const backing = join(this.simRoot, 'volumes', pv);
    const dir = join(this.simRoot, 'storage', pv);
    mkdirSync(backing, { recursive: true });
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    this.generation += 1;
    const name = `${node}.${this.generation}`;
    const mountpoint = join(dir, name);
    mkdirSync(mountpoint, { mode: 0o755 });
    const view = await VolumeView.mount(this.binary(), backing, mountpoint);
    this.all.push(view);
    this.live.set(key, view);
    const link = viewLink(this.simRoot, pv, node);
    rmSync(`${link}.tmp`, { force: true });
    symlinkSync(name, `${link}.tmp`);
    renameSync(`${link}.tmp`, link);
    this.note('grant', pv, node, mountpoint);
    return mountpoint;
  }

  /** Cuts `node`'s view of `pv`: resolves once every later operation through it fails. */
  async revoke(pv: string, node: string): Promise<void> {
    const key = `${pv}\0${node}`;
    const view = this.live.get(key);
    if (!view) return;
    await view.revoke();
    this.live.delete(key);
    this.note('revoke', pv, node, view.mountpoint);
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
