/**
 * The times of Events and objects as `kubectl leasehold` shows them (pure). An Event's
 * time is its last occurrence, else its eventTime, first occurrence or creation; the
 * manager writes core/v1 Events, whose times the API server keeps to the second, so they
 * are shown to the second and never mixed into the status.lastFailover timeline, whose
 * times have milliseconds.
 */
import type { CoreV1Event } from '@kubernetes/client-node';

export function eventTime(e: CoreV1Event): Date | string | undefined {
  return e.lastTimestamp ?? e.eventTime ?? e.firstTimestamp ?? e.metadata?.creationTimestamp;
}

/** Epoch ms of a time as client-node gives it (a Date) or as a custom object keeps it (a string); 0 when none. */
export function timeOf(t: Date | string | undefined): number {
  const ms = t === undefined ? Number.NaN : new Date(t).getTime();
  return Number.isNaN(ms) ? 0 : ms;
}

/** RFC 3339 to the second. */
export function isoSeconds(t: Date | string | undefined): string {
  const ms = timeOf(t);
  return ms === 0 ? '(no time)' : `${new Date(ms).toISOString().slice(0, 19)}Z`;
}

/** The events in the order they happened (last occurrence). */
export function byTime(events: readonly CoreV1Event[]): CoreV1Event[] {
  return [...events].sort((a, b) => timeOf(eventTime(a)) - timeOf(eventTime(b)));
}
