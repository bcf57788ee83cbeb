/**
 * A simulated CSI external-attacher for the test driver (csi.leasehold.dev): for each
 * VolumeAttachment whose attacher is the driver it adds the finalizer
 * `external-attacher/csi-leasehold-dev`, then sets status.attached = true (after
 * `attachDelayMs`, the storage backend's latency); when the VolumeAttachment is being
 * deleted it "detaches" and removes the finalizer, which lets the deletion finish.
 * Level-based: a relist re-handles everything; one VolumeAttachment is handled by one
 * task at a time.
 *
 * It records how long each attach and detach took (from the object's creation or
 * deletion timestamp, wall clock of this machine, and from when it was first seen) and
 * every moment one PV was attached to two nodes at once (which storage would refuse
 * for an RWO volume; the simulator only reports it).
 *
 * `events` is the storage's own log of each VolumeAttachment's life, in the order this
 * attacher's single VolumeAttachment watch delivered it (the API server's
 * resourceVersion order): created (first seen), attached, detaching (first seen with a
 * deletionTimestamp), detached (ControllerUnpublish done: finalizer removed), deleted
 * (the object is gone). `handoffOrderViolations(events)` says whether any PV got a
 * VolumeAttachment on a node while one on another node still existed (the handoff order
 * of an RWO volume: old access fully revoked before any new one).
 * With a FencingStorage (fencing-storage.ts), PVs that opt in
 * (csi.volumeAttributes `storage.leasehold.dev/fencing: "true"`) are fenced by the
 * storage: attach grants the node's revocable view BEFORE status.attached is set
 * (ControllerPublish), detach revokes it BEFORE the finalizer is removed
 * (ControllerUnpublish), so the old node's I/O fails with EIO before the volume can be
 * attached anywhere else; `storage.log` records each grant and revoke. With also
 * `storage.leasehold.dev/block-filesystem: "ext4"` the volume is an ext4 image each node
 * mounts through its view (block-image.ts), mounted by the grant.
 * Not simulated: the finalizer a real attacher also puts on the PV; for PVs without that
 * attribute, storage that refuses I/O from a detached node (every node writes the same
 * host dir).
 */
import type { V1VolumeAttachment } from '@kubernetes/client-node';
import { TEST_CSI_DRIVER } from '../../dev/sim/kubelet/pod-volumes.ts';
import {
  type FencingStorage,
  type FencingVolumeKind,
  volumeKindOf,
} from '../../dev/sim/storage/fencing-storage.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import { type ListWatch, startListWatch } from './list-watch.ts';

export const ATTACHER_FINALIZER = `external-attacher/${TEST_CSI_DRIVER.replaceAll('.', '-')}`;

export interface AttachTiming {
  op: 'attach' | 'detach';
  volumeAttachment: string;
  pv: string;
  node: string;
  /** From metadata.creationTimestamp (attach) or deletionTimestamp (detach). */
  sinceTimestampMs: number;
  /** From when the attacher first saw the object in that state. */
  sinceSeenMs: number;
  doneWall: Date;
}

export interface MultiAttach {
  pv: string;
  nodes: string[];
  wall: Date;
}

export type AttachEventKind = 'created' | 'attached' | 'detaching' | 'detached' | 'deleted';

export interface AttachEvent {
  /** Position in this attacher's log (watch order). */
  seq: number;
  event: AttachEventKind;
  volumeAttachment: string;
  pv: string;
  node: string;
  /** CLOCK_MONOTONIC ms, comparable with serving windows. */
  monoMs: number;
  wall: Date;
}

/**
 * Pure: every moment (in log order) a PV's VolumeAttachment on one node was created
 * while another of the same PV on a different node still existed, as messages. `[]`
 * means each attach elsewhere came only after the old attachment was gone, finalizer
 * and all. NB: for RWO/RWOP volumes; RWX may legitimately overlap.
 */
export function handoffOrderViolations(events: readonly AttachEvent[]): string[] {
  const live = new Map<string, Map<string, string>>(); // pv -> volumeAttachment -> node
  const out: string[] = [];
  for (const e of [...events].sort((a, b) => a.seq - b.seq)) {
    const ofPv = live.get(e.pv) ?? new Map<string, string>();
    live.set(e.pv, ofPv);
    if (e.event === 'created') {
      for (const [va, node] of ofPv)
        if (node !== e.node)
          out.push(
            `PV ${e.pv}: ${e.volumeAttachment} on ${e.node} created (#${e.seq}) while ${va} on ${node} still existed`,
          );
      ofPv.set(e.volumeAttachment, e.node);
    } else if (e.event === 'deleted') {
      ofPv.delete(e.volumeAttachment);
    }
  }
  return out;
}

const MERGE = () => k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch, withDeadline(5_000));

export class SimCsiAttacher {
  readonly timings: AttachTiming[] = [];
  readonly multiAttach: MultiAttach[] = [];
  readonly events: AttachEvent[] = [];
  /** Objects whose life is logged and not yet 'deleted'. */
  private readonly known = new Map<string, V1VolumeAttachment>();
  private readonly detachingSeen = new Set<string>();
  private readonly latest = new Map<string, V1VolumeAttachment>();
  private readonly busy = new Set<string>();
  private readonly firstSeen = new Map<string, number>();
  private readonly attachedTo = new Map<string, Set<string>>();
  private watch: ListWatch | undefined;
  private readonly storage: k8s.StorageV1Api;
  private readonly fencingPvs = new Map<string, FencingVolumeKind | undefined>();

  constructor(
    private readonly kc: k8s.KubeConfig,
    private readonly log: (msg: string, extra?: Record<string, unknown>) => void,
    private readonly attachDelayMs = 0,
    /** The storage that fences opted-in PVs; without it every PV is the shared dir. */
    readonly fencing?: FencingStorage,
  ) {
    this.storage = kc.makeApiClient(k8s.StorageV1Api);
  }

  /** The fencing kind the PV opted in to, undefined for the shared dir (read once per PV). */
  private async fencingKind(pv: string): Promise<FencingVolumeKind | undefined> {
    if (!this.fencing) return undefined;
    if (this.fencingPvs.has(pv)) return this.fencingPvs.get(pv);
    const core = this.kc.makeApiClient(k8s.CoreV1Api);
    const obj = await core.readPersistentVolume({ name: pv }, withDeadline(5_000));
    const kind = volumeKindOf(obj.spec?.csi?.volumeAttributes);
    // Not attached, retried: as a CSI driver's ControllerPublish failing on bad parameters.
    if (kind instanceof Error) throw new Error(`attach PV ${pv}: ${kind.message}`);
    this.fencingPvs.set(pv, kind);
    return kind;
  }

  start(): void {
    this.watch = startListWatch<V1VolumeAttachment>({
      kubeConfig: this.kc,
      what: 'VolumeAttachments',
      path: '/apis/storage.k8s.io/v1/volumeattachments',
      list: async () => {
        const list = await this.storage.listVolumeAttachment({}, withDeadline(10_000));
        return { items: list.items, resourceVersion: list.metadata?.resourceVersion ?? '' };
      },
      onList: (items) => {
        // A deletion that fell into a watch gap shows only as absence from the relist.
        const listed = new Set(items.map((va) => va.metadata?.name ?? ''));
        for (const [name, va] of this.known)
          if (!listed.has(name)) {
            this.note('deleted', va);
            this.known.delete(name);
            this.detachingSeen.delete(name);
          }
        for (const va of items) this.enqueue(va);
      },
      onEvent: (type, va) => {
        if (type === 'DELETED') {
          this.note('deleted', va);
          this.known.delete(va.metadata?.name ?? '');
          this.detachingSeen.delete(va.metadata?.name ?? '');
          this.latest.delete(va.metadata?.name ?? '');
          this.attachedTo.get(va.spec.source.persistentVolumeName ?? '')?.delete(va.spec.nodeName);
        } else {
          this.enqueue(va);
        }
      },
      onError: (err) => this.log('VolumeAttachment list failed; listing again', { error: String(err) }),
      onWatchEnd: (end) =>
        this.log('VolumeAttachment watch ended; listing again', {
          why: end.kind,
          ...(end.kind === 'error' ? { error: String(end.error) } : {}),
        }),
    });
  }

  stop(): void {
    this.watch?.stop();
  }

  private note(event: AttachEventKind, va: V1VolumeAttachment): void {
    if (va.spec.attacher !== TEST_CSI_DRIVER) return;
    this.events.push({
      seq: this.events.length + 1,
      event,
      volumeAttachment: va.metadata?.name ?? '',
      pv: va.spec.source.persistentVolumeName ?? '',
      node: va.spec.nodeName,
      monoMs: monotonicMs(),
      wall: new Date(),
    });
  }

  private enqueue(va: V1VolumeAttachment): void {
    if (va.spec.attacher !== TEST_CSI_DRIVER) return;
    const name = va.metadata?.name ?? '';
    // NB: a relist shows objects again; each life event is logged once per object.
    if (!this.known.has(name)) this.note('created', va);
    this.known.set(name, va);
    if (va.metadata?.deletionTimestamp && !this.detachingSeen.has(name)) {
      this.detachingSeen.add(name);
      this.note('detaching', va);
    }
    this.latest.set(name, va);
    if (this.busy.has(name)) return;
    this.busy.add(name);
    void this.drain(name);
  }

  private async drain(name: string): Promise<void> {
    try {
      for (;;) {
        const seen = this.latest.get(name);
        if (seen === undefined) return;
        try {
          await this.handle(seen);
          // Done for this version; a write we made comes back as an event.
          if (this.latest.get(name) === seen) this.latest.delete(name);
        } catch (err) {
          this.log('VolumeAttachment handling failed; retrying', {
            va: name,
            status: statusOf(err),
            error: String(err),
          });
          await sleep(500);
          if (this.latest.get(name) !== seen) continue;
          const fresh = await this.storage
            .readVolumeAttachment({ name }, withDeadline(5_000))
            .catch((e: unknown) => {
              if (statusOf(e) === 404) return undefined;
              return seen;
            });
          if (fresh) this.latest.set(name, fresh);
          else this.latest.delete(name);
        }
      }
    } finally {
      this.busy.delete(name);
    }
  }

  /** One level-based pass over one version of the object. */
  private async handle(va: V1VolumeAttachment): Promise<void> {
    const name = va.metadata?.name ?? '';
    const pv = va.spec.source.persistentVolumeName ?? '';
    const node = va.spec.nodeName;
    const finalizers = va.metadata?.finalizers ?? [];
    const deleting = va.metadata?.deletionTimestamp;
    const stateKey = `${name}/${deleting ? 'detach' : 'attach'}`;
    if (!this.firstSeen.has(stateKey)) this.firstSeen.set(stateKey, performance.now());
    const record = (op: AttachTiming['op'], since: Date | undefined) => {
      const now = new Date();
      const timing: AttachTiming = {
        op,
        volumeAttachment: name,
        pv,
        node,
        sinceTimestampMs: since ? now.getTime() - new Date(since).getTime() : Number.NaN,
        sinceSeenMs: Math.round(performance.now() - (this.firstSeen.get(stateKey) ?? performance.now())),
        doneWall: now,
      };
      this.timings.push(timing);
      this.log(`volume ${op}ed`, { ...timing });
    };
    if (deleting) {
      if (!finalizers.includes(ATTACHER_FINALIZER)) return;
      // ControllerUnpublish: the storage cuts the node's access before the finalizer goes.
      await this.fencing?.revoke(pv, node);
      this.attachedTo.get(pv)?.delete(node);
      await this.storage.patchVolumeAttachment(
        {
          name,
          body: {
            metadata: {
              finalizers: finalizers.filter((f) => f !== ATTACHER_FINALIZER),
              resourceVersion: va.metadata?.resourceVersion,
            },
          },
        },
        MERGE(),
      );
      this.note('detached', va);
      record('detach', deleting);
      return;
    }
    if (!finalizers.includes(ATTACHER_FINALIZER)) {
      await this.storage.patchVolumeAttachment(
        {
          name,
          body: {
            metadata: {
              finalizers: [...finalizers, ATTACHER_FINALIZER],
              resourceVersion: va.metadata?.resourceVersion,
            },
          },
        },
        MERGE(),
      );
      return; // the MODIFIED event brings the next step
    }
    if (va.status?.attached) return;
    if (this.attachDelayMs > 0) await sleep(this.attachDelayMs);
    // ControllerPublish: the node's view exists before the attachment is reported.
    const kind = await this.fencingKind(pv);
    if (kind) await this.fencing?.grant(pv, node, kind);
    await this.storage.patchVolumeAttachmentStatus({ name, body: { status: { attached: true } } }, MERGE());
    const nodes = this.attachedTo.get(pv) ?? new Set<string>();
    nodes.add(node);
    this.attachedTo.set(pv, nodes);
    if (nodes.size > 1) {
      this.multiAttach.push({ pv, nodes: [...nodes], wall: new Date() });
      this.log('PV attached to more than one node at once', { pv, nodes: [...nodes] });
    }
    this.note('attached', va);
    record('attach', va.metadata?.creationTimestamp);
  }
}
