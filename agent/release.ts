/**
 * Release on a planned stop (SIGTERM/SIGINT): empty the holder by CAS, keeping
 * leaseTransitions, so the next pod acquires at once and no manager sees a failure.
 *
 * Guarantees: finishes within `budgetMs` (each request is cut at the budget's end).
 * A 409 (a renewal still in flight won the race, or another writer) is answered with one
 * re-read: still ours -> release that version; someone else's -> nothing to release.
 * Never releases a lease that names another pod.
 */
import type { Clock } from '../lib/clock.ts';
import type { LeaseRecord } from '../lib/lease-record.ts';
import type { LeaseStore } from '../lib/lease-store.ts';
import { releasedRecord } from './lease-decision.ts';

export type ReleaseOutcome =
  | { kind: 'released'; durationMs: number }
  | { kind: 'not-ours'; holder: string }
  | { kind: 'failed'; error: string; durationMs: number };

export async function releaseLease(
  store: LeaseStore,
  lease: LeaseRecord,
  podName: string,
  budgetMs: number,
  clock: Clock,
): Promise<ReleaseOutcome> {
  const startedAtMs = clock.now();
  const left = () => Math.max(1, Math.floor(startedAtMs + budgetMs - clock.now())); // whole ms for AbortSignal.timeout
  let current = lease;
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      const outcome = await store.update(releasedRecord(current), left());
      if (outcome.kind === 'written') return { kind: 'released', durationMs: clock.now() - startedAtMs };
      const reread = await store.get(lease.namespace, lease.name, left());
      if (reread === undefined || reread.holder !== podName)
        return { kind: 'not-ours', holder: reread?.holder ?? '' };
      current = reread;
    }
    return {
      kind: 'failed',
      error: 'the lease kept changing (409 three times)',
      durationMs: clock.now() - startedAtMs,
    };
  } catch (err) {
    return { kind: 'failed', error: String(err), durationMs: clock.now() - startedAtMs };
  }
}
