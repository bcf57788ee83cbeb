/**
 * The simulated kubelet of one node: watches the pods bound to the node
 * (fieldSelector spec.nodeName) and keeps one PodWorker per pod UID.
 *  - a new pod starts; a pod with a deletionTimestamp is terminated within its grace
 *    period and then removed from the API (delete with grace 0, UID precondition), as
 *    a kubelet does; a pod that vanished or has grace 0 (force delete) is SIGKILLed at once;
 *  - pod status goes through one queue, latest state per pod, written in order;
 *  - after a reboot (heal after crash) a pod this kubelet did not start but which
 *    shows started containers lost its processes: with restartPolicy Never it is
 *    marked Failed (reason NodeRestarted), else it starts again.
 * pause() (partition, freeze) stops the watch and holds status writes; resume()
 * re-lists and flushes. crash() kills every pod silently and forgets them.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { sleep } from '../../../lib/clock.ts';
import { k8s, statusOf, withDeadline } from '../../../lib/kube-client.ts';
import { type ListWatch, startListWatch } from '../../../test/support/list-watch.ts';
import { PodWorker, type PodWorkerContext } from './pod-worker.ts';

export type KubeletOptions = Omit<PodWorkerContext, 'reportStatus' | 'volumesChanged'> & {
  onVolumesChanged(): void;
};

const STRATEGIC = k8s.setHeaderOptions(
  'Content-Type',
  k8s.PatchStrategy.StrategicMergePatch,
  withDeadline(5_000),
);

export class Kubelet {
  private readonly workers = new Map<string, PodWorker>();
  private readonly deleting = new Set<string>();
  private readonly pendingStatus = new Map<string, { pod: V1Pod; patch: unknown }>();
  private watch: ListWatch | undefined;
  private paused = true;
  private flushing = false;
  private readonly core: k8s.CoreV1Api;

  constructor(private readonly opts: KubeletOptions) {
    this.core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.watch = startListWatch<V1Pod>({
      kubeConfig: this.opts.kubeConfig,
      what: `pods on node ${this.opts.nodeName}`,
      path: '/api/v1/pods',
      query: { fieldSelector: `spec.nodeName=${this.opts.nodeName}` },
      list: async () => {
        const list = await this.core.listPodForAllNamespaces(
          { fieldSelector: `spec.nodeName=${this.opts.nodeName}` },
          withDeadline(10_000),
        );
        return { items: list.items, resourceVersion: list.metadata?.resourceVersion ?? '' };
      },
      onList: (pods) => {
        const live = new Set(pods.map((p) => p.metadata?.uid));
        for (const [uid, worker] of this.workers) if (!live.has(uid)) this.forget(uid, worker);
        for (const pod of pods) this.handle(pod);
      },
      onEvent: (type, pod) => {
        const uid = pod.metadata?.uid ?? '';
        const worker = this.workers.get(uid);
        if (type === 'DELETED') {
          if (worker) this.forget(uid, worker);
        } else {
          this.handle(pod);
        }
      },
      onError: (err) => this.opts.log('pod list failed; listing again', { error: String(err) }),
      onWatchEnd: (end) =>
        this.opts.log('pod watch ended; listing again', {
          why: end.kind,
          ...(end.kind === 'error' ? { error: String(end.error) } : {}),
        }),
    });
    void this.flush();
  }

  pause(): void {
    this.paused = true;
    this.watch?.stop();
    this.watch = undefined;
  }

  private handle(pod: V1Pod): void {
    if (this.paused) return;
    const uid = pod.metadata?.uid ?? '';
    const worker = this.workers.get(uid);
    if (pod.metadata?.deletionTimestamp) {
      if (this.deleting.has(uid)) return;
      this.deleting.add(uid);
      const grace = pod.metadata.deletionGracePeriodSeconds;
      // NB: a force delete (grace 0) may show as an update with a deletionTimestamp
      // just before the object vanishes: kill at once, as for the vanished pod.
      const stopped = !worker
        ? Promise.resolve()
        : grace === 0
          ? worker.kill()
          : worker.terminate(grace ?? undefined);
      void stopped.then(() => this.removeFromApi(pod));
      return;
    }
    if (worker) {
      worker.update(pod);
      return;
    }
    const phase = pod.status?.phase;
    if (phase === 'Succeeded' || phase === 'Failed') return;
    const ranBefore = [
      ...(pod.status?.containerStatuses ?? []),
      ...(pod.status?.initContainerStatuses ?? []),
    ].some((s) => s.state?.running || s.state?.terminated || (s.restartCount ?? 0) > 0);
    if (ranBefore && pod.spec?.restartPolicy === 'Never') {
      this.reportStatus(pod, {
        status: {
          phase: 'Failed',
          reason: 'NodeRestarted',
          message: `node ${this.opts.nodeName} restarted; the pod's processes were lost`,
        },
      });
      return;
    }
    const fresh = new PodWorker(pod, {
      ...this.opts,
      reportStatus: (p, patch) => this.reportStatus(p, patch),
      volumesChanged: () => this.opts.onVolumesChanged(),
    });
    this.workers.set(uid, fresh);
    this.opts.log('starting pod', { pod: fresh.key });
    fresh.start();
  }

  private forget(uid: string, worker: PodWorker): void {
    this.workers.delete(uid);
    this.pendingStatus.delete(uid);
    const terminating = this.deleting.delete(uid);
    if (!terminating) this.opts.log('pod gone from the API (force delete); killing it', { pod: worker.key });
    void worker.kill();
  }

  private async removeFromApi(pod: V1Pod): Promise<void> {
    const name = pod.metadata?.name ?? '';
    const namespace = pod.metadata?.namespace ?? '';
    for (let attempt = 0; attempt < 20 && !this.paused; attempt++) {
      try {
        await this.core.deleteNamespacedPod(
          {
            name,
            namespace,
            gracePeriodSeconds: 0,
            body: { gracePeriodSeconds: 0, preconditions: { uid: pod.metadata?.uid } },
          },
          withDeadline(5_000),
        );
        return;
      } catch (err) {
        const status = statusOf(err);
        if (status === 404 || status === 409) return;
        await sleep(500);
      }
    }
  }

  private reportStatus(pod: V1Pod, patch: unknown): void {
    this.pendingStatus.set(pod.metadata?.uid ?? '', { pod, patch });
    void this.flush();
  }

  private async flush(): Promise<void> {
    if (this.flushing) return;
    this.flushing = true;
    try {
      while (!this.paused && this.pendingStatus.size > 0) {
        const [uid, entry] = this.pendingStatus.entries().next().value as [
          string,
          { pod: V1Pod; patch: unknown },
        ];
        this.pendingStatus.delete(uid);
        try {
          await this.core.patchNamespacedPodStatus(
            {
              name: entry.pod.metadata?.name ?? '',
              namespace: entry.pod.metadata?.namespace ?? '',
              body: entry.patch,
            },
            STRATEGIC,
          );
        } catch (err) {
          const status = statusOf(err);
          if (status === 404) continue;
          this.opts.log('pod status update failed; retrying', {
            pod: entry.pod.metadata?.name,
            status,
            error: String(err),
          });
          if (!this.pendingStatus.has(uid)) this.pendingStatus.set(uid, entry);
          await sleep(500);
        }
      }
    } finally {
      this.flushing = false;
    }
  }

  volumesInUse(): string[] {
    return [
      ...new Set([...this.workers.values()].flatMap((w) => w.csiVolumes.map((v) => v.uniqueName))),
    ].sort();
  }

  pods(): PodWorker[] {
    return [...this.workers.values()];
  }

  freeze(): void {
    for (const w of this.workers.values()) w.freeze();
  }

  thaw(): void {
    for (const w of this.workers.values()) w.thaw();
  }

  /** The machine vanished: every process dies, nothing more is reported. */
  async crash(): Promise<void> {
    this.pause();
    this.pendingStatus.clear();
    const workers = [...this.workers.values()];
    this.workers.clear();
    this.deleting.clear();
    await Promise.all(workers.map((w) => w.kill()));
  }

  async stop(): Promise<void> {
    await this.crash();
  }
}
