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

/**
 * The events in the order they happened (last occurrence). Within one second, in the
 * order they were written: their resourceVersion, which is etcd's revision on every
 * API server we know. NB: the API calls resourceVersion opaque; it only orders lines
 * here (a version that is not a decimal integer leaves them in their second's order).
 */
export function byTime(events: readonly CoreV1Event[]): CoreV1Event[] {
  const version = (e: CoreV1Event) => {
    const v = e.metadata?.resourceVersion ?? '';
    return /^\d{1,15}$/.test(v) ? Number(v) : 0;
  };
  return [...events].sort((a, b) => timeOf(eventTime(a)) - timeOf(eventTime(b)) || version(a) - version(b));
}
