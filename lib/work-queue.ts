import { retryAfterMsOf, retryPauseMs } from './retry-backoff.ts';

/**
 * A keyed work queue: a key is queued at most once, is never processed by two workers at
 * once (a key added while in flight runs again after), and may be added with a delay.
 * Failures are requeued with per-key exponential backoff with jitter (retryMs ..
 * maxRetryMs, never sooner than the server's Retry-After: lib/retry-backoff.ts); `onError`
 * learns how many times in a row the key failed, so that the caller can say so once a
 * failure persists. A success resets the count.
 */
export class WorkQueue {
  private readonly queued = new Set<string>();
  private readonly order: string[] = [];
  private readonly inFlight = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly delayed = new Map<string, NodeJS.Timeout>();
  private readonly failures = new Map<string, number>();
  private active = 0;
  private stopped = false;

  constructor(
    private readonly work: (key: string) => Promise<number | undefined>,
    private readonly onError: (key: string, err: unknown, failures: number) => void,
    private readonly opts = { workers: 4, retryMs: 200, maxRetryMs: 30_000 },
    private readonly random: () => number = Math.random,
  ) {}

  add(key: string, delayMs = 0): void {
    if (this.stopped) return;
    if (delayMs > 0) {
      if (this.delayed.has(key)) return;
      this.delayed.set(
        key,
        setTimeout(() => {
          this.delayed.delete(key);
          this.add(key);
        }, delayMs),
      );
      return;
    }
    if (this.inFlight.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    this.order.push(key);
    this.pump();
  }

  stop(): void {
    this.stopped = true;
    for (const timer of this.delayed.values()) clearTimeout(timer);
    this.delayed.clear();
  }

  private pump(): void {
    while (!this.stopped && this.active < this.opts.workers && this.order.length > 0) {
      const key = this.order.shift() as string;
      this.queued.delete(key);
      this.inFlight.add(key);
      this.active += 1;
      this.work(key).then(
        (requeueMs) => {
          this.failures.delete(key);
          this.finish(key, requeueMs);
        },
        (err: unknown) => {
          const n = (this.failures.get(key) ?? 0) + 1;
          this.failures.set(key, n);
          this.onError(key, err, n);
          const policy = { initialMs: this.opts.retryMs, maxMs: this.opts.maxRetryMs };
          this.finish(key, retryPauseMs(n, policy, this.random(), retryAfterMsOf(err)));
        },
      );
    }
  }

  private finish(key: string, requeueMs: number | undefined): void {
    this.inFlight.delete(key);
    this.active -= 1;
    if (this.dirty.delete(key)) this.add(key);
    else if (requeueMs !== undefined) this.add(key, requeueMs);
    this.pump();
  }
}
