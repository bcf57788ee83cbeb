/**
 * The duration D the manager judges a lease by (docs/design.md, "Why it is safe"), pure.
 *
 * Why: the safety argument needs the manager's D to be at least the holder agent's D
 * (its renew deadline T < D): then the agent fences before any verdict. The Lease's
 * `spec.leaseDurationSeconds` is only a claim anybody with write access can edit; the
 * agent's real timings come from its ShareManager (and are in its pod's env).
 *
 * Guarantees:
 *  - The duration is never shorter than the floor, the largest of
 *     (a) the ShareManager's lease duration (`spec.lease.duration`, the manager's default
 *         when unset; the default when the ShareManager is unknown; for a spec that fails
 *         validation, the larger of the default and whatever duration it names),
 *     (b) the LEASEHOLD_LEASE_DURATION of the holder pod's agent, when that pod is known
 *         (the D its agent really runs with, e.g. created before a spec change),
 *     (c) the floor already applied to the same holder (`staleness.ts`): a spec shortened
 *         or a ShareManager deleted while that holder runs never lowers it.
 *  - A longer `leaseDurationSeconds` (a positive int32, as the API allows) is honoured,
 *    however long; anything else there (missing, 0, negative, fractional, not a number,
 *    beyond int32) is ignored in favour of the floor.
 *  - No timer is ever set beyond what a JS timer holds (2^31 - 1 ms): longer waits
 *    re-arm in steps (`timerDelayMs`); a bigger delay would fire at once, over and over.
 *
 * Not guaranteed: that the holder's agent runs with the ShareManager's timings when
 * neither the ShareManager nor the pod was ever seen by this manager (then the
 * manager's default is the floor).
 */
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { parseDuration } from '../../lib/env-config.ts';
import type { LeaseTimings } from '../config.ts';
import { resolveSpec, type ShareManager } from '../share-model/share-manager-spec.ts';

/** The longest delay a Node.js timer holds; beyond it setTimeout fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** leaseDurationSeconds is an int32 in the API. */
export const MAX_LEASE_SECONDS = 2 ** 31 - 1;

/** The agent env var carrying its lease duration (set by pod-spec.ts from the ShareManager). */
const AGENT_DURATION_ENV = 'LEASEHOLD_LEASE_DURATION';

/** The value as lease seconds when the API could hold it (a positive int32), else undefined. */
export function validLeaseSeconds(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_LEASE_SECONDS
    ? value
    : undefined;
}

/** (a): the lease duration the ShareManager gives its agents. */
export function shareManagerDurationMs(sm: ShareManager | undefined, defaults: LeaseTimings): number {
  if (!sm?.spec) return defaults.leaseDurationMs;
  let resolved: ReturnType<typeof resolveSpec>;
  try {
    resolved = resolveSpec(sm.spec, defaults);
  } catch {
    // NB: a spec of the wrong shape (the CRD schema forbids it) must not break the watch.
    resolved = { ok: false, message: 'unreadable spec' };
  }
  if (resolved.ok) return resolved.timings.leaseDurationMs;
  const text = sm.spec.lease?.duration;
  const named = typeof text === 'string' ? parseDuration(text) : undefined;
  return Math.max(defaults.leaseDurationMs, named !== undefined && Number.isFinite(named) ? named : 0);
}

/** (b): the lease duration in the env of the pod's agent, when the pod carries a parsable one. */
export function agentDurationMs(pod: V1Pod | undefined): number | undefined {
  const containers: V1Container[] = [...(pod?.spec?.initContainers ?? []), ...(pod?.spec?.containers ?? [])];
  let found: number | undefined;
  for (const c of containers) {
    const value = c.env?.find((e) => e.name === AGENT_DURATION_ENV)?.value;
    const ms = typeof value === 'string' ? parseDuration(value) : undefined;
    if (ms !== undefined && Number.isFinite(ms) && ms > 0) found = Math.max(found ?? 0, ms);
  }
  return found;
}

/** The floor from (a) and (b); (c) is applied by staleness.observe. */
export function durationFloorMs(
  sm: ShareManager | undefined,
  holderPod: V1Pod | undefined,
  defaults: LeaseTimings,
): number {
  return Math.max(shareManagerDurationMs(sm, defaults), agentDurationMs(holderPod) ?? 0);
}

/** The duration a lease is judged by: the floor, or the Lease's own when valid and longer. */
export function effectiveDurationMs(leaseSeconds: unknown, floorMs: number): number {
  const seconds = validLeaseSeconds(leaseSeconds);
  return seconds === undefined ? floorMs : Math.max(floorMs, seconds * 1000);
}

/** A delay safe to hand to setTimeout: at least 0, at most MAX_TIMER_MS (the caller re-arms). */
export function timerDelayMs(ms: number): number {
  if (Number.isNaN(ms)) return MAX_TIMER_MS;
  return Math.min(MAX_TIMER_MS, Math.max(0, ms));
}
