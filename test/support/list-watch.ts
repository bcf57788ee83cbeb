/**
 * A list-watch that never dies silently, for a test's own observers (the handoff e2e's
 * VolumeAttachment log): list, hand the full set to `onList`, watch
 * from the list's resourceVersion, and treat *any* end of that watch as its end:
 *   - the connection closing or the stream ending, cleanly or not (an API-server
 *     restart, the server's own timeoutSeconds);
 *   - any error: connection refused/reset, an HTTP error status, a watch ERROR event
 *     (410 Gone and friends), client-node's own 30 s inactivity abort, or a handler
 *     that threw;
 *   - no traffic for `quietTimeoutMs` (a connection that hangs without closing);
 * then list again after a short backoff with jitter: 50-150 ms after a watch that was
 * healthy (lived 5 s), growing to at most 0.5-1.5 s while lists fail or watches end at
 * once (the API server is down or starting), so a restarted API server is seen again
 * within about a second of coming back. Relisting every time is cheap at a test's scale
 * and needs no resourceVersion bookkeeping beyond one watch.
 *
 * Every end of a watch is reported through `onWatchEnd` (why it ended), a failed list
 * through `onError`. Not guaranteed: that every intermediate state is seen (a relist delivers
 * only the current one), which is why handlers are level-based.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { k8s } from '../../lib/kube-client.ts';

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

/** Why one watch ended. */
export type WatchEnd =
  | { kind: 'closed' }
  | { kind: 'error'; error: unknown }
  | { kind: 'quiet'; quietMs: number }
  | { kind: 'stopped' };

export interface ListWatchOptions<T extends KubernetesObject> {
  kubeConfig: k8s.KubeConfig;
  /** For errors: e.g. "VolumeAttachments". */
  what: string;
  /** The collection's watch path, e.g. /api/v1/pods. */
  path: string;
  query?: Record<string, string>;
  list(): Promise<{ items: T[]; resourceVersion: string }>;
  onList(items: T[]): void;
  onEvent(type: WatchEventType, object: T): void;
  /** A list (or onList) that failed; the next list follows after a backoff. */
  onError?(err: unknown): void;
  /** Every end of a watch but stop() (its error included), before the next list. */
  onWatchEnd?(end: Exclude<WatchEnd, { kind: 'stopped' }>): void;
  /**
   * Restart a watch that delivered nothing for this long (default 45 s). NB: client-node
   * aborts a watch after 30 s without data anyway; this bounds a hung connect as well.
   */
  quietTimeoutMs?: number;
}

export interface ListWatch {
  stop(): void;
}

/** A watch that lived this long without error counts as healthy (backoff starts over). */
const HEALTHY_WATCH_MS = 5_000;

/** Milliseconds to wait before the next list after `failures` failures in a row (jittered). */
export function relistBackoffMs(failures: number, random: () => number = Math.random): number {
  const base = failures === 0 ? 100 : Math.min(1_000, 100 * 2 ** Math.min(failures, 4));
  return base * (0.5 + random());
}

export function startListWatch<T extends KubernetesObject>(opts: ListWatchOptions<T>): ListWatch {
  const stopped = new AbortController();
  const quietMs = opts.quietTimeoutMs ?? 45_000;
  let failures = 0;

  /** Watches from `resourceVersion` until the watch ends, for whatever reason. */
  const watchOnce = (resourceVersion: string): Promise<WatchEnd> =>
    new Promise<WatchEnd>((resolve) => {
      let quietTimer: NodeJS.Timeout | undefined;
      let controller: AbortController | undefined;
      let ended = false;
      const end = (why: WatchEnd) => {
        if (ended) return;
        ended = true;
        clearTimeout(quietTimer);
        stopped.signal.removeEventListener('abort', onStop);
        controller?.abort();
        resolve(why);
      };
      const onStop = () => end({ kind: 'stopped' });
      const arm = () => {
        clearTimeout(quietTimer);
        quietTimer = setTimeout(() => end({ kind: 'quiet', quietMs }), quietMs);
      };
      stopped.signal.addEventListener('abort', onStop, { once: true });
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
            if (ended) return;
            arm();
            if (type === 'ERROR') {
              const message = `watch of ${opts.what} sent an ERROR event: ${JSON.stringify(object)}`;
              end({ kind: 'error', error: new LeaseholdError('E_WATCH_ERROR_EVENT', message) });
              return;
            }
            if (type !== 'ADDED' && type !== 'MODIFIED' && type !== 'DELETED') return; // BOOKMARK
            // NB: client-node swallows what this callback throws; a lost event would
            // leave the handler's state behind for good, so end the watch and relist.
            try {
              opts.onEvent(type, object);
            } catch (err) {
              end({ kind: 'error', error: err });
            }
          },
          // Called on every end of the connection: clean close (err null) or failure.
          (err: unknown) => end(err ? { kind: 'error', error: err } : { kind: 'closed' }),
        )
        .then(
          (c) => {
            controller = c;
            if (ended) c.abort();
          },
          (err: unknown) => end({ kind: 'error', error: err }),
        );
    });

  const loop = async () => {
    while (!stopped.signal.aborted) {
      try {
        const { items, resourceVersion } = await opts.list();
        if (stopped.signal.aborted) return;
        opts.onList(items);
        const watchedAt = performance.now();
        const end = await watchOnce(resourceVersion);
        if (end.kind === 'stopped') return;
        // A watch that ends at once (refused, 429 while the API server warms up) is a failure too.
        failures = performance.now() - watchedAt >= HEALTHY_WATCH_MS ? 0 : failures + 1;
        opts.onWatchEnd?.(end);
      } catch (err) {
        failures++;
        opts.onError?.(err);
      }
      await sleep(relistBackoffMs(failures), stopped.signal).catch(() => {});
    }
  };
  void loop();
  return { stop: () => stopped.abort() };
}
