/**
 * The real-node benchmark's side-by-side table (pure): one row per mode of the run
 * (leasehold, stock, ...), each with detection, crash-to-serving and clientWriteGap
 * p50/p95 and measured/total crashes;
 * a mode with capped crashes says how many and at what budget (a capped crash has no
 * crash-to-serving: its figures are of the measured ones only, `-` when none).
 */
import type { Summary } from './stats.ts';

export interface TableRow {
  label: string;
  detection: Summary;
  crashToServing: Summary;
  clientWriteGap: Summary;
  measured: number;
  total: number;
  capped?: number;
  budgetS?: number;
}

const fmt = (x: number | undefined) => (x === undefined ? '     -' : x.toFixed(2).padStart(6));
const pair = (s: Summary) => `${fmt(s.p50)} ${fmt(s.p95)}`;

export function realNodeTable(rows: readonly TableRow[]): string[] {
  const width = Math.max(36, ...rows.map((r) => r.label.length + 2));
  return [
    `${'run'.padEnd(width)}detection p50/p95   crash-to-serving p50/p95   clientWriteGap p50/p95   measured`,
    ...rows.map((r) => {
      const capped = r.capped ? `, ${r.capped} capped at ${r.budgetS ?? '?'} s` : '';
      return `${r.label.padEnd(width)}${pair(r.detection)}      ${pair(r.crashToServing)}              ${pair(r.clientWriteGap)}            ${r.measured}/${r.total}${capped}`;
    }),
  ];
}
