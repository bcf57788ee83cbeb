/**
 * A list-watch cache that never dies silently.
 *
 * Guarantees:
 *  - After any watch error, non-200 answer, stream end or ERROR event, it watches again
 *    after a backoff with jitter (lib/watch-backoff.ts: exponential from
 *    `backoff.initialMs` to `backoff.maxMs`; back to the initial delay once a watch has
 *    delivered something, and at the server's first answer after it was unreachable, so
 *    an API server's early 503s and 403s after a restart do not each cost the delay
 *    grown while it was down). It stops only when `stop()` is called.
 *  - 410 Gone (as an HTTP status or an ERROR event) drops the resourceVersion and
 *    re-lists after the initial backoff (not the grown one: the server answered); the
 *    re-list is diffed against the cache so handlers see added, modified and deleted
 *    exactly as if they had watched throughout. So does a "too large resource version"
 *    answer (our version is ahead of the server's: etcd was restored from a backup),
 *    which would otherwise be asked again forever. Each event says whether it came from
 *    a list (the server's current state, whatever its resourceVersion) or a watch.
 *  - Each watch asks the server to end it after `watchTimeout` (5-10 min by default); a
 *    clean end is resumed from the last resourceVersion seen (event or bookmark), so the
 *    server replays every change since: `onDisconnected('ended')` then
 *    `onConnected('resumed')`, with no re-list.
 *  - A watch that delivers nothing (no event, no bookmark) for `quietTimeoutMs` is
 *    aborted and restarted: a half-open connection cannot pass for a quiet resource.
 *    Bookmarks are requested, so a healthy idle watch still speaks about once a minute.
 *  - `healthy` is true only while a watch stream is open (HTTP 200 received and not yet
 *    ended); `synced` once the first list has landed; `restarts` counts every re-watch.
 *    `onConnected`/`onDisconnected` report each edge, so a consumer can apply its own
 *    blindness rule (the manager does for Leases).
 *
 * Why not client-node's ListWatch: in 2.0.1 it stops for good on any error other than
 * 410 or its own timeout (it only calls the error handlers), has no jitter, does not
 * ask for bookmarks, and its Watch aborts any stream quiet for a fixed 30 s. We keep
 * client-node for authentication (applySecurityAuthentication + its TLS dispatcher)
 * and use plain HTTP for list and watch.
 *
 * Not guaranteed: handlers see the state of the API server as delivered, possibly late;
 * objects are plain JSON (dates stay strings).
 */
import { HttpMethod, type KubeConfig, type KubernetesObject, RequestContext } from '@kubernetes/client-node';
import { fetch } from 'undici';
import { sleep } from './clock.ts';
import { KubeApiError, LeaseholdError } from './errors.ts';
import {
  DEFAULT_WATCH_BACKOFF,
  initialWatchBackoff,
  jitteredPauseMs,
  nextWatchBackoff,
  type WatchBackoffPolicy,
  watchBackoffProblems,
  watchOutcome,
} from './watch-backoff.ts';

export type InformerEventType = 'added' | 'modified' | 'deleted';
export type ConnectKind = 'relisted' | 'resumed';
export type EventOrigin = 'list' | 'watch';
export type RestartReason = 'ended' | 'gone' | 'quiet' | 'error';

export interface InformerOptions<T extends KubernetesObject> {
  /** Short name for logs and metrics, e.g. "leases". */
  resource: string;
  kubeConfig: KubeConfig;
  /** Collection path, e.g. /apis/coordination.k8s.io/v1/leases or /api/v1/namespaces/x/pods. */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Restart a watch silent for this long (default 90 s; bookmarks arrive about every 60 s). */
  quietTimeoutMs?: number;
  /** Deadline of one list request (default 30 s). */
  listDeadlineMs?: number;
  /**
   * How long the server keeps one watch open before it ends it (`timeoutSeconds`), drawn
   * per watch in [minSeconds, maxSeconds) (default 300 .. 600 s, which spreads re-watches).
   * Whole seconds, minSeconds >= 1. Hazard: a short watch means a re-watch (and a replay)
   * every few seconds; tests use it to make re-watches frequent.
   */
  watchTimeout?: WatchTimeout;
  /** Re-watch backoff (default 200 ms .. 10 s; lib/watch-backoff.ts has the rules). */
  backoff?: WatchBackoffPolicy;
  /** Test seam for jitter; defaults to Math.random. */
  random?: () => number;
  /** `origin` 'list': from a (re-)list, the server's current state; 'watch': a watch event, in order. */
  onEvent: (type: InformerEventType, object: T, previous: T | undefined, origin: EventOrigin) => void;
  onConnected?: (kind: ConnectKind) => void;
  onDisconnected?: (reason: RestartReason, error?: unknown) => void;
}

export interface WatchTimeout {
  minSeconds: number;
  maxSeconds: number;
}

export const DEFAULT_WATCH_TIMEOUT: WatchTimeout = { minSeconds: 300, maxSeconds: 600 };

/** Validates a watch timeout; returns problems naming the field, the value and the rule. */
export function watchTimeoutProblems(timeout: WatchTimeout): string[] {
  const problems: string[] = [];
  if (!(Number.isInteger(timeout.minSeconds) && timeout.minSeconds >= 1))
    problems.push(`watchTimeout.minSeconds: ${timeout.minSeconds} must be a whole number of seconds >= 1`);
  if (!(Number.isInteger(timeout.maxSeconds) && timeout.maxSeconds > timeout.minSeconds))
    problems.push(
      `watchTimeout.maxSeconds: ${timeout.maxSeconds} must be a whole number of seconds > watchTimeout.minSeconds (${timeout.minSeconds})`,
    );
  return problems;
}

type WatchEnd = { reason: RestartReason; error?: unknown; delivered: boolean };

export class Informer<T extends KubernetesObject> {
  private readonly cache = new Map<string, T>();
  private resourceVersion = '';
  private stopped = false;
  private running: Promise<void> | undefined;
  private readonly abort = new AbortController();
  private current: AbortController | undefined;
  private isHealthy = false;
  private isSynced = false;
  private restartCount = 0;

  constructor(private readonly opts: InformerOptions<T>) {
    const problems = [
      ...watchBackoffProblems(opts.backoff ?? DEFAULT_WATCH_BACKOFF),
      ...watchTimeoutProblems(opts.watchTimeout ?? DEFAULT_WATCH_TIMEOUT),
    ];
    if (problems.length > 0)
      throw new LeaseholdError('E_INFORMER_OPTIONS', `informer of ${opts.resource}: ${problems.join('; ')}`);
  }

  get healthy(): boolean {
    return this.isHealthy;
  }
  get synced(): boolean {
    return this.isSynced;
  }
  get restarts(): number {
    return this.restartCount;
  }
  get resource(): string {
    return this.opts.resource;
  }

  get(namespace: string, name: string): T | undefined {
    return this.cache.get(`${namespace}/${name}`);
  }

  list(): T[] {
    return [...this.cache.values()];
  }

  start(): void {
    this.running ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort(new Error('informer stopped'));
    this.current?.abort(new Error('informer stopped'));
    await this.running;
  }

  private async run(): Promise<void> {
    const policy = this.opts.backoff ?? DEFAULT_WATCH_BACKOFF;
    const random = this.opts.random ?? Math.random;
    let backoff = initialWatchBackoff(policy);
    while (!this.stopped) {
      let end: WatchEnd;
      try {
        const relisted = this.resourceVersion === '';
        if (relisted) await this.relist();
        end = await this.watchOnce(relisted ? 'relisted' : 'resumed');
      } catch (error) {
        end = { reason: 'error', error, delivered: false };
      }
      if (end.reason === 'gone') this.resourceVersion = '';
      const wasHealthy = this.isHealthy;
      this.isHealthy = false;
      if (this.stopped) break;
      if (wasHealthy || end.reason === 'error') this.opts.onDisconnected?.(end.reason, end.error);
      this.restartCount += 1;
      const status = end.error instanceof KubeApiError ? end.error.status : undefined;
      backoff = nextWatchBackoff(backoff, watchOutcome({ ...end, status }), policy);
      await sleep(jitteredPauseMs(backoff.delayMs, random()), this.abort.signal).catch(() => undefined);
    }
  }

  private url(params: Record<string, string>): string {
    const cluster = this.opts.kubeConfig.getCurrentCluster();
    if (!cluster)
      throw new KubeApiError(`${this.opts.resource}: no current cluster in kubeconfig`, undefined);
    const url = new URL(cluster.server + this.opts.path);
    if (this.opts.labelSelector) url.searchParams.set('labelSelector', this.opts.labelSelector);
    if (this.opts.fieldSelector) url.searchParams.set('fieldSelector', this.opts.fieldSelector);
    for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
    return url.toString();
  }

  private async request(url: string, signal: AbortSignal) {
    const ctx = new RequestContext(url, HttpMethod.GET);
    await this.opts.kubeConfig.applySecurityAuthentication(ctx);
    return fetch(url, {
      method: 'GET',
      headers: { ...ctx.getHeaders(), accept: 'application/json' },
      dispatcher: ctx.getDispatcher(),
      signal,
    });
  }

  private async relist(): Promise<void> {
    const operation = `listing ${this.opts.resource}`;
    const signal = AbortSignal.any([
      this.abort.signal,
      AbortSignal.timeout(this.opts.listDeadlineMs ?? 30_000),
    ]);
    let body: { items?: T[]; metadata?: { resourceVersion?: string } };
    try {
      const res = await this.request(this.url({}), signal);
      if (res.status !== 200) {
        const text = await res.text().catch(() => '');
        throw new KubeApiError(operation, res.status, {
          cause: Object.assign(new Error(text), { body: text }),
        });
      }
      body = (await res.json()) as typeof body;
    } catch (err) {
      if (err instanceof KubeApiError) throw err;
      throw new KubeApiError(operation, undefined, { cause: err });
    }
    const seen = new Set<string>();
    for (const item of body.items ?? []) {
      const key = keyOf(item);
      seen.add(key);
      const previous = this.cache.get(key);
      this.cache.set(key, item);
      if (!previous) this.opts.onEvent('added', item, undefined, 'list');
      else if (previous.metadata?.resourceVersion !== item.metadata?.resourceVersion) {
        this.opts.onEvent('modified', item, previous, 'list');
      }
    }
    for (const [key, previous] of [...this.cache]) {
      if (seen.has(key)) continue;
      this.cache.delete(key);
      this.opts.onEvent('deleted', previous, previous, 'list');
    }
    this.resourceVersion = body.metadata?.resourceVersion ?? '';
    this.isSynced = true;
  }

  private async watchOnce(kind: ConnectKind): Promise<WatchEnd> {
    const controller = new AbortController();
    this.current = controller;
    const quietMs = this.opts.quietTimeoutMs ?? 90_000;
    let quiet = false;
    let timer: NodeJS.Timeout | undefined;
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        quiet = true;
        controller.abort(new Error(`no watch traffic for ${quietMs} ms`));
      }, quietMs);
    };
    let delivered = false;
    try {
      arm();
      const signal = AbortSignal.any([this.abort.signal, controller.signal]);
      // NB: the server ends each watch after timeoutSeconds (its --min-request-timeout only
      // applies when a client sends none); a random 5-10 min spreads re-watches.
      const { minSeconds, maxSeconds } = this.opts.watchTimeout ?? DEFAULT_WATCH_TIMEOUT;
      const timeoutSeconds = String(minSeconds + Math.floor(Math.random() * (maxSeconds - minSeconds)));
      const url = this.url({
        watch: 'true',
        resourceVersion: this.resourceVersion,
        allowWatchBookmarks: 'true',
        timeoutSeconds,
      });
      const res = await this.request(url, signal);
      if (res.status === 410) return { reason: 'gone', delivered };
      if (res.status !== 200 || !res.body) {
        const text = await res.text().catch(() => '');
        // Our resourceVersion is ahead of the server's: its store went back (etcd restored
        // from a backup). Watching from it would wait forever; re-list, as client-go does.
        if (TOO_LARGE_RESOURCE_VERSION.test(text)) return { reason: 'gone', delivered };
        const error = new KubeApiError(`watching ${this.opts.resource}`, res.status, {
          cause: Object.assign(new Error(text), { body: text }),
        });
        return { reason: 'error', error, delivered };
      }
      this.isHealthy = true;
      this.opts.onConnected?.(kind);
      const decoder = new TextDecoder();
      let buffered = '';
      for await (const chunk of res.body) {
        arm();
        buffered += decoder.decode(chunk as Uint8Array, { stream: true });
        let start = 0;
        let newline = buffered.indexOf('\n', start);
        while (newline >= 0) {
          const line = buffered.slice(start, newline).trim();
          start = newline + 1;
          newline = buffered.indexOf('\n', start);
          if (line === '') continue;
          const outcome = this.apply(JSON.parse(line) as { type: string; object: T & { code?: number } });
          delivered = true;
          if (outcome) return { ...outcome, delivered };
        }
        buffered = buffered.slice(start);
      }
      return { reason: 'ended', delivered };
    } catch (error) {
      if (quiet) return { reason: 'quiet', error, delivered };
      return { reason: 'error', error, delivered };
    } finally {
      clearTimeout(timer);
      controller.abort();
      this.current = undefined;
    }
  }

  /** Applies one watch event; returns how the watch ends when the event ends it. */
  private apply(event: { type: string; object: T & { code?: number } }): WatchEnd | undefined {
    const { type, object } = event;
    if (type === 'ERROR') {
      if (object.code === 410) return { reason: 'gone', delivered: true };
      if (TOO_LARGE_RESOURCE_VERSION.test(JSON.stringify(object))) return { reason: 'gone', delivered: true };
      return {
        reason: 'error',
        error: new KubeApiError(`watching ${this.opts.resource}`, object.code),
        delivered: true,
      };
    }
    const rv = object.metadata?.resourceVersion;
    if (rv) this.resourceVersion = rv;
    if (type === 'BOOKMARK') return undefined;
    const key = keyOf(object);
    const previous = this.cache.get(key);
    if (type === 'DELETED') {
      this.cache.delete(key);
      this.opts.onEvent('deleted', object, previous, 'watch');
    } else {
      this.cache.set(key, object);
      this.opts.onEvent(previous ? 'modified' : 'added', object, previous, 'watch');
    }
    return undefined;
  }
}

/** The API server's answer to a watch from a resourceVersion it has not reached (a Status of reason Timeout, cause ResourceVersionTooLarge). */
const TOO_LARGE_RESOURCE_VERSION = /ResourceVersionTooLarge|too large resource version/i;

function keyOf(object: KubernetesObject): string {
  return `${object.metadata?.namespace ?? ''}/${object.metadata?.name ?? ''}`;
}
