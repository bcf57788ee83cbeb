/**
 * Pure statistics and the emulation of Longhorn's detection for the failover benchmark.
 *
 * Longhorn (v1.7 rwx-volume-fast-failover) checks every 1 s whether
 * `now - lease.renewTime > 7 s` on its own wall clock. Our manager instead arms a timer
 * at `observedAt + D` (no periodic scan). With D = 7 s and renew 3 s (the Longhorn
 * timings given to the agent), the only difference is the 1 s tick: Longhorn's verdict
 * comes at the first tick after `renewTime + 7 s`. `longhornVerdictMs` computes that
 * tick from the last renewTime before the crash and a tick phase (random per run, as a
 * real manager's ticker phase is).
 */

/** Nearest-rank percentile (p in 0..100) of the defined values; undefined when none. */
export function percentile(values: readonly number[], p: number): number | undefined {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return undefined;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

/**
 * Wall-clock ms of Longhorn's verdict: the first tick `phaseMs + k * 1000` strictly
 * after `renewMs + leaseMs` (the check is `elapsed > leaseDuration`).
 */
export function longhornVerdictMs(renewMs: number, leaseMs: number, phaseMs: number, tickMs = 1000): number {
  const due = renewMs + leaseMs;
  const k = Math.floor((due - phaseMs) / tickMs) + 1;
  return phaseMs + k * tickMs;
}

export interface Summary {
  n: number;
  p50?: number;
  p95?: number;
  max?: number;
}

export function summarize(values: readonly number[]): Summary {
  const defined = values.filter((v) => Number.isFinite(v));
  const out: Summary = { n: defined.length };
  const p50 = percentile(defined, 50);
  const p95 = percentile(defined, 95);
  if (p50 !== undefined) out.p50 = round(p50);
  if (p95 !== undefined) out.p95 = round(p95);
  if (defined.length > 0) out.max = round(Math.max(...defined));
  return out;
}

export function round(x: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

export function ratio(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined || b === undefined || b === 0 ? undefined : round(a / b, 1);
}
