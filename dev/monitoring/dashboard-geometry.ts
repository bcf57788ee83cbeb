/**
 * Where things go on the rendered dashboard, as pure functions: a panel's rectangle from
 * its gridPos (Grafana's grid: 24 columns, 30 px rows, 8 px gaps), the value axis' ticks,
 * the time axis' ticks, a value with its unit, a UTC clock time, and stacked series.
 *
 * Guarantees: ticks lie inside the range asked for and are evenly spaced; the value axis
 * always spans its data (and 0..1 when there is none); a gridPos outside the 24 columns
 * is an error naming it.
 * Not modelled: Grafana's responsive breakpoints (the picture is one fixed width),
 * logarithmic axes, units other than seconds, operations per second and plain numbers.
 */
import { LeaseholdError } from '../../lib/errors.ts';
import type { GridPos, Unit } from './dashboard-panels.ts';

export const GRID_COLUMNS = 24;
export const GRID_ROW_PX = 30;
export const GRID_GAP_PX = 8;

export interface Rect {
  x: number;
  y: number;
  w: number;
  h: number;
}

/** The panel's rectangle on a dashboard `widthPx` wide, `top` px below the picture's top. */
export function panelRect(g: GridPos, widthPx: number, top = 0): Rect {
  if (g.x + g.w > GRID_COLUMNS || g.w < 1 || g.h < 1)
    throw new LeaseholdError(
      'E_DASHBOARD',
      `gridPos ${JSON.stringify(g)}: x + w within ${GRID_COLUMNS} columns, w and h >= 1 expected`,
    );
  const col = (widthPx - (GRID_COLUMNS - 1) * GRID_GAP_PX) / GRID_COLUMNS;
  return {
    x: g.x * (col + GRID_GAP_PX),
    y: top + g.y * (GRID_ROW_PX + GRID_GAP_PX),
    w: g.w * col + (g.w - 1) * GRID_GAP_PX,
    h: g.h * GRID_ROW_PX + (g.h - 1) * GRID_GAP_PX,
  };
}

/** The height of the grid holding these gridPos. */
export function gridHeight(all: readonly GridPos[]): number {
  const rows = Math.max(0, ...all.map((g) => g.y + g.h));
  return rows === 0 ? 0 : rows * (GRID_ROW_PX + GRID_GAP_PX) - GRID_GAP_PX;
}

/** The axis' range and ticks: 1, 2 or 5 × 10^k apart, at most `maxTicks` + 1 of them. */
export function valueAxis(
  values: readonly number[],
  floor: number | undefined,
  maxTicks = 4,
): { min: number; max: number; ticks: number[] } {
  const finite = values.filter(Number.isFinite);
  let min = floor ?? Math.min(0, ...finite);
  let max = finite.length === 0 ? min + 1 : Math.max(...finite);
  if (max <= min) max = min + (min === 0 ? 1 : Math.abs(min));
  const raw = (max - min) / maxTicks;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  if (floor === undefined) min = Math.floor(min / step) * step;
  max = Math.ceil(max / step - 1e-9) * step;
  const ticks: number[] = [];
  for (let t = Math.ceil(min / step - 1e-9) * step; t <= max + step * 1e-9; t += step)
    ticks.push(roundTo(t, step));
  return { min, max, ticks };
}

function roundTo(v: number, step: number): number {
  const digits = Math.max(0, -Math.floor(Math.log10(step)) + 1);
  return Number(v.toFixed(Math.min(digits, 12)));
}

const TIME_STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];

/** Wall-clock ticks (ms) on whole multiples of a step from TIME_STEPS_S, at most `maxTicks`. */
export function timeTicks(fromMs: number, toMs: number, maxTicks: number): number[] {
  if (!(toMs > fromMs) || maxTicks < 1)
    throw new LeaseholdError(
      'E_DASHBOARD',
      `time axis ${fromMs}..${toMs} with ${maxTicks} ticks: from < to, ticks >= 1 expected`,
    );
  const spanS = (toMs - fromMs) / 1000;
  const stepS = TIME_STEPS_S.find((s) => spanS / s <= maxTicks) ?? 3600 * Math.ceil(spanS / maxTicks / 3600);
  const stepMs = stepS * 1000;
  const ticks: number[] = [];
  for (let t = Math.ceil(fromMs / stepMs) * stepMs; t <= toMs; t += stepMs) ticks.push(t);
  return ticks;
}

/** HH:MM:SS in UTC. */
export function clockOf(ms: number): string {
  return new Date(ms).toISOString().slice(11, 19);
}

/** A value as Grafana writes it: seconds below 1 as ms, three significant digits at most. */
export function formatValue(v: number, unit: Unit): string {
  if (!Number.isFinite(v)) return '–';
  const short = (x: number) => {
    if (x === 0) return '0';
    const abs = Math.abs(x);
    const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : 2;
    return String(Number(x.toFixed(digits)));
  };
  if (unit === 's') return Math.abs(v) < 1 && v !== 0 ? `${short(v * 1000)} ms` : `${short(v)} s`;
  if (unit === 'ops') return `${short(v)} ops/s`;
  return short(v);
}

export interface Series {
  name: string;
  /** [time ms, value]; NaN for a gap. */
  points: Array<[number, number]>;
}

/**
 * Stacked series (Grafana's stacking `normal`): each point's value plus the ones of the
 * series before it at the same time; each point also carries its base (the sum below it).
 */
export function stack(
  series: readonly Series[],
): Array<{ name: string; points: Array<[number, number, number]> }> {
  const below = new Map<number, number>();
  return series.map((s) => ({
    name: s.name,
    points: s.points.map(([t, v]) => {
      const base = below.get(t) ?? 0;
      const top = Number.isFinite(v) ? base + v : base;
      below.set(t, top);
      return [t, base, Number.isFinite(v) ? top : Number.NaN];
    }),
  }));
}
