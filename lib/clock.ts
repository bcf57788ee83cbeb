/**
 * Time, injected. Durations and deadlines use `now()` (monotonic milliseconds, never
 * jumps with the wall clock); `wallNow()` is only for what is written to the API or
 * shown to people. Every decision function takes the time as an argument instead of
 * reading it, so a pass reads time once and carries it.
 */
export interface Clock {
  /** Monotonic milliseconds (arbitrary origin). Use for durations and deadlines. */
  now(): number;
  /** Wall-clock time. Informational only: never compare it with a remote timestamp. */
  wallNow(): Date;
}

/**
 * CLOCK_MONOTONIC in milliseconds: one origin for every process of the machine (unlike
 * `performance.now()`, whose origin is this process's start). Use it for times that are
 * compared across processes, such as serving windows and container exits.
 */
export function monotonicMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  wallNow: () => new Date(),
};

/** Test seam: a clock that moves only when told to. */
export class ManualClock implements Clock {
  constructor(
    private monotonicMs = 0,
    private wallMs = Date.UTC(2026, 0, 1),
  ) {}
  now(): number {
    return this.monotonicMs;
  }
  wallNow(): Date {
    return new Date(this.wallMs);
  }
  advance(ms: number): void {
    this.monotonicMs += ms;
    this.wallMs += ms;
  }
}

/** Resolves after `ms`, or rejects with the signal's reason when aborted first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
