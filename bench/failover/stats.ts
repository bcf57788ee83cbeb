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

/**
 * One crash's crash-to-serving, judged from the crash moment and the moment the share
 * was served again (the same clock for both). A serving that began at or before the
 * crash is not this crash's failover: the share had moved before it (e.g. an agent that
 * fenced itself on a starved machine while the benchmark waited for its random phase),
 * so the crashed node was not serving it. Such a sample is rejected with the reason,
 * never counted (a bench once reported -38.22 s that way: the victim was chosen before
 * the pause, the share moved during it). NB: only the order of the two moments is
 * checked; that the crashed node served the share right before the crash is the
 * caller's part (choose the victim after the pause, see `victimStillServing`).
 */
export type CrashToServing =
  | { kind: 'measured'; s: number }
  | { kind: 'rejected'; reason: string }
  | { kind: 'not-served'; reason: string };

export function crashToServing(
  crashMs: number,
  servedAgainMs: number | undefined,
  budgetMs: number,
): CrashToServing {
  if (servedAgainMs === undefined || !Number.isFinite(servedAgainMs))
    return { kind: 'not-served', reason: `not served again within ${budgetMs / 1000} s` };
  const ms = servedAgainMs - crashMs;
  if (ms <= 0)
    return {
      kind: 'rejected',
      reason: `served since ${round(-ms / 1000)} s before the crash: not a failover of this crash`,
    };
  if (ms > budgetMs) return { kind: 'not-served', reason: `not served again within ${budgetMs / 1000} s` };
  return { kind: 'measured', s: round(ms / 1000) };
}

/**
 * Whether the node about to be crashed still serves the share: the serving pod seen
 * right before the crash must be the one chosen (else the share moved meanwhile and the
 * crash would measure nothing). Pure; the caller re-reads `now` after its pause.
 */
export function victimStillServing(
  chosen: { pod: string; node: string },
  now: { pod: string; node: string } | undefined,
): boolean {
  return now !== undefined && now.pod === chosen.pod && now.node === chosen.node;
}

/**
 * Longhorn's emulated detection applied to a measured figure (crash-to-serving, or the
 * client's write gap): the rest of the pipeline is the same, so the figure moves by the
 * difference between the emulated verdict and ours. Undefined when either detection is
 * missing, or when the shifted figure would precede the emulated verdict (nothing can
 * be served again before the failover is decided: such a shift is not a measurement).
 */
export function shiftByDetection(
  figureS: number | undefined,
  measuredDetectS: number | undefined,
  emulatedDetectS: number,
): number | undefined {
  if (figureS === undefined || measuredDetectS === undefined) return undefined;
  const shifted = round(figureS + (emulatedDetectS - measuredDetectS));
  return shifted > emulatedDetectS ? shifted : undefined;
}

/**
 * The `longhorn` mode's figures for one crash (pure, mutates `sample`): Longhorn's 1 s
 * wall-clock verdict emulated from the lease's last renewTime (`longhornVerdictMs`, its
 * tick phase `phaseMs`), the sample's detection replaced by it and each figure in `keys`
 * moved by (emulated - measured detection) (`shiftByDetection`; a figure that would
 * come before the verdict is dropped). Without a renewTime read at the crash the
 * figures are dropped and a note says why. A sample with no measured detection is
 * left alone.
 */
export function emulateLonghornVerdict<K extends string>(
  sample: { detectS?: number; note?: string } & Partial<Record<K, number>>,
  keys: readonly K[],
  renewMs: number | undefined,
  leaseMs: number,
  crashWallMs: number,
  phaseMs: number,
): void {
  const measured = sample.detectS;
  if (measured === undefined) return;
  const figures = sample as Partial<Record<K, number>>;
  if (renewMs === undefined) {
    sample.note ??= 'no renewTime read at the crash: Longhorn verdict not emulated';
    for (const k of keys) delete figures[k];
    return;
  }
  const emulated = round((longhornVerdictMs(renewMs, leaseMs, phaseMs) - crashWallMs) / 1000);
  for (const k of keys) {
    const v = shiftByDetection(figures[k], measured, emulated);
    if (v === undefined) delete figures[k];
    else figures[k] = v as Partial<Record<K, number>>[K];
  }
  sample.detectS = emulated;
}

/** The 1-minute load averages sampled during a run (os.loadavg()[0]), summarized. */
export interface LoadSummary {
  samples: number;
  start?: number;
  end?: number;
  mean?: number;
  max?: number;
}

export function summarizeLoad(oneMinute: readonly number[]): LoadSummary {
  const v = oneMinute.filter((x) => Number.isFinite(x));
  if (v.length === 0) return { samples: 0 };
  return {
    samples: v.length,
    start: round(v[0] as number),
    end: round(v[v.length - 1] as number),
    mean: round(v.reduce((a, b) => a + b, 0) / v.length),
    max: round(Math.max(...v)),
  };
}

/**
 * How long a client may go without an acknowledged write right before a crash and still
 * count as writing through the share at the crash: a healthy writer is acknowledged every
 * 20 ms, and one commit took up to 1.2 s on the loaded 2-core machine (five-modes run of
 * 2026-12-01); a longer stall began before the crash and is not the crash's.
 */
export const CLIENT_STALL_TOLERANCE_MS = 2_000;

/**
 * Whether the client writes through the share right now (its last ack at most
 * `toleranceMs` ago): a crash is only measured from a flowing client (pure).
 */
export function clientFlowing(
  lastAckMs: number | undefined,
  nowMs: number,
  toleranceMs = CLIENT_STALL_TOLERANCE_MS,
): boolean {
  return lastAckMs !== undefined && nowMs - lastAckMs <= toleranceMs;
}

/**
 * How many acks in a row, each within the tolerance of the one before, count as the
 * client writing again after a crash (`resumedAt`): not a lone ack of a write that was
 * in flight at the crash (the dying server committed it).
 */
export const RESUMED_ACKS = 20;

/**
 * The first ack of the first flow of `needed` acks after `crashMs` (ack times in order,
 * one clock), each at most `toleranceMs` after the one before; undefined when none.
 */
export function resumedAt(
  acksMs: readonly number[],
  crashMs: number,
  needed: number,
  toleranceMs = CLIENT_STALL_TOLERANCE_MS,
): number | undefined {
  let start: number | undefined;
  let count = 0;
  let prev = Number.NaN;
  for (const t of acksMs) {
    if (t <= crashMs) continue;
    if (start === undefined || t - prev > toleranceMs) {
      start = t;
      count = 0;
    }
    count++;
    prev = t;
    if (count >= needed) return start;
  }
  return undefined;
}

/** The resumed flow's first ack (`resumedMs`) minus the last ack before it; NaN when none. */
export function resumedGapMs(acksMs: readonly number[], resumedMs: number): number {
  const before = acksMs.filter((t) => t < resumedMs).at(-1);
  return before === undefined ? Number.NaN : resumedMs - before;
}
