/**
 * A list-watch that never dies silently, for the simulator's own controllers (the
 * kubelet's pod watch, the CSI attacher): list, hand the full set to `onList`, watch
 * from the list's resourceVersion, and on any end of the watch (error, server timeout,
 * 410 Gone, or no traffic for `quietTimeoutMs`) list again after a short backoff with
 * jitter. Relisting every time is cheap at the simulator's scale and needs no
 * resourceVersion bookkeeping beyond one watch.
 *
 * Not guaranteed: that every intermediate state is seen (a relist delivers only the
 * current one), which is why handlers are level-based.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { k8s } from '../../lib/kube-client.ts';

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface ListWatchOptions<T extends KubernetesObject> {
  kubeConfig: k8s.KubeConfig;
  /** For errors: e.g. "pods on node sim-1". */
  what: string;
  /** The collection's watch path, e.g. /api/v1/pods. */
  path: string;
  query?: Record<string, string>;
  list(): Promise<{ items: T[]; resourceVersion: string }>;
  onList(items: T[]): void;
  onEvent(type: WatchEventType, object: T): void;
  onError?(err: unknown): void;
  /** Restart a watch that delivered nothing for this long (default 45 s). */
  quietTimeoutMs?: number;
}

export interface ListWatch {
  stop(): void;
}

export function startListWatch<T extends KubernetesObject>(opts: ListWatchOptions<T>): ListWatch {
  const stopped = new AbortController();
  const quietMs = opts.quietTimeoutMs ?? 45_000;
  let failures = 0;

  const watchOnce = async (resourceVersion: string): Promise<void> => {
    await new Promise<void>((resolve) => {
      let quietTimer: NodeJS.Timeout | undefined;
      let controller: AbortController | undefined;
      let ended = false;
      const end = () => {
        if (ended) return;
        ended = true;
        clearTimeout(quietTimer);
        stopped.signal.removeEventListener('abort', end);
        controller?.abort();
        resolve();
      };
      const arm = () => {
        clearTimeout(quietTimer);
        quietTimer = setTimeout(end, quietMs);
      };
      stopped.signal.addEventListener('abort', end, { once: true });
      arm();
      new k8s.Watch(opts.kubeConfig)
        .watch(
          opts.path,
          {
            ...opts.query,
            resourceVersion,
            allowWatchBookmarks: true,
            timeoutSeconds: 30 + Math.floor(Math.random() * 30),
          },
          (type: string, object: T) => {
            arm();
            if (type === 'ADDED' || type === 'MODIFIED' || type === 'DELETED') opts.onEvent(type, object);
            else if (type === 'ERROR') end(); // 410 Gone and friends: list again
          },
          (err: unknown) => {
            if (err && !ended) opts.onError?.(err);
            end();
          },
        )
        .then(
          (c) => {
            controller = c;
            if (ended) c.abort();
          },
          (err: unknown) => {
            opts.onError?.(err);
            end();
          },
        );
    });
  };

  const loop = async () => {
    while (!stopped.signal.aborted) {
      try {
        const { items, resourceVersion } = await opts.list();
        if (stopped.signal.aborted) return;
        opts.onList(items);
        failures = 0;
        await watchOnce(resourceVersion);
      } catch (err) {
        failures++;
        opts.onError?.(err);
      }
      // Capped low: after an API-server outage the simulated nodes must catch up within seconds.
      const backoff = Math.min(1_500, 100 * 2 ** Math.min(failures, 6)) * (0.5 + Math.random());
      await sleep(backoff, stopped.signal).catch(() => {});
    }
  };
  void loop();
  return { stop: () => stopped.abort() };
}
