/**
 * The dashboard drawn as one plain SVG (polylines, rects, text; Grafana's dark theme's
 * colours), from the panels (dashboard-panels.ts) and what Prometheus answered for them:
 * each panel at its gridPos, with its title; a timeseries with its value axis (in the
 * panel's unit), the shared time axis (UTC), its series as lines or bars (stacked when
 * the panel stacks) and a legend named from legendFormat; a stat as its value in its
 * threshold's colour; a table as its organized columns; a row as its title.
 *
 * Guarantees: pure (same input, same text); every text is XML-escaped; a series with
 * no finite point is still listed in its legend (Grafana lists it too). `marker` draws
 * a dashed vertical line with a label over every timeseries (the renderer's, not the
 * dashboard's: the dashboard has no annotations).
 * Not modelled: tooltips, legend values, Grafana's exact fonts and spacing.
 */
import {
  clockOf,
  formatValue,
  gridHeight,
  panelRect,
  type Rect,
  type Series,
  stack,
  timeTicks,
  valueAxis,
} from './dashboard-geometry.ts';
import type { Panel } from './dashboard-panels.ts';

export type PanelData =
  | { kind: 'row' }
  | { kind: 'stat'; value: number | undefined }
  | { kind: 'table'; rows: Array<Record<string, string>> }
  | { kind: 'timeseries'; series: Series[] };

export interface DashboardPicture {
  title: string;
  /** Lines under the title: what this picture is. */
  notes: string[];
  fromMs: number;
  toMs: number;
  widthPx: number;
  marker?: { atMs: number; label: string };
  panels: Array<{ panel: Panel; data: PanelData }>;
}

const THEME = {
  page: '#111217',
  panel: '#181b1f',
  border: '#2c3235',
  text: '#ccccdc',
  dim: '#8e8e9e',
  grid: '#2c3235',
};
/** Grafana's classic palette, in its order. */
export const PALETTE = [
  '#73bf69',
  '#f2cc0c',
  '#8ab8ff',
  '#ff780a',
  '#f2495c',
  '#5794f2',
  '#b877d9',
  '#705da0',
  '#37872d',
  '#fade2a',
];
const NAMED: Record<string, string> = {
  green: '#73bf69',
  red: '#f2495c',
  yellow: '#fade2a',
  orange: '#ff9830',
  blue: '#5794f2',
};
const FONT = 'DejaVu Sans, sans-serif';
/**
 * Spacing in px: around and inside panels, a panel's title bar, the page's title and each
 * note line; `charPx` about the width of a character at 11 px (DejaVu Sans), for legends.
 */
const SIZE = { pad: 8, titleH: 24, headerH: 30, noteH: 16, charPx: 6.4 } as const;

export function escapeXml(s: string): string {
  return s.replace(
    /[<>&"']/g,
    (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' })[c] as string,
  );
}

function text(x: number, y: number, s: string, attrs = ''): string {
  return `<text x="${r(x)}" y="${r(y)}" ${attrs}>${escapeXml(s)}</text>`;
}

/** Coordinates rounded to 0.1 px: smaller text, no visible difference. */
function r(v: number): string {
  return String(Math.round(v * 10) / 10);
}

export function dashboardSvg(p: DashboardPicture): string {
  const top = SIZE.headerH + p.notes.length * SIZE.noteH + SIZE.pad;
  const height = top + gridHeight(p.panels.map((x) => x.panel.gridPos)) + SIZE.pad;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${p.widthPx + 2 * SIZE.pad}" height="${r(height)}" font-family="${FONT}" font-size="11" fill="${THEME.text}">`,
    `<rect width="100%" height="100%" fill="${THEME.page}"/>`,
    text(SIZE.pad, 22, p.title, 'font-size="18" font-weight="bold"'),
    ...p.notes.map((n, i) =>
      text(SIZE.pad, SIZE.headerH + 12 + i * SIZE.noteH, n, `fill="${THEME.dim}" font-size="12"`),
    ),
  ];
  for (const { panel, data } of p.panels) {
    const rect = panelRect(panel.gridPos, p.widthPx, top);
    const box = { ...rect, x: rect.x + SIZE.pad };
    parts.push(panelSvg(panel, data, box, p));
  }
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function panelSvg(panel: Panel, data: PanelData, b: Rect, p: DashboardPicture): string {
  if (panel.type === 'row') return text(b.x, b.y + 20, panel.title, 'font-size="15" font-weight="bold"');
  const frame = [
    `<rect x="${r(b.x)}" y="${r(b.y)}" width="${r(b.w)}" height="${r(b.h)}" rx="2" fill="${THEME.panel}" stroke="${THEME.border}"/>`,
    text(b.x + SIZE.pad, b.y + 17, panel.title, 'font-size="12" font-weight="bold"'),
  ];
  const inner = {
    x: b.x + SIZE.pad,
    y: b.y + SIZE.titleH,
    w: b.w - 2 * SIZE.pad,
    h: b.h - SIZE.titleH - SIZE.pad,
  };
  if (panel.type === 'stat' && data.kind === 'stat') frame.push(statSvg(panel, data.value, inner));
  else if (panel.type === 'table' && data.kind === 'table')
    frame.push(tableSvg(panel.columns, data.rows, inner));
  else if (panel.type === 'timeseries' && data.kind === 'timeseries')
    frame.push(timeseriesSvg(panel, data.series, inner, p));
  else
    frame.push(
      text(
        inner.x,
        inner.y + 14,
        `no data of kind ${data.kind} for a ${panel.type} panel`,
        `fill="${THEME.dim}"`,
      ),
    );
  return frame.join('\n');
}

/** The colour of the highest threshold at or below the value (the base one below all). */
export function thresholdColor(
  steps: ReadonlyArray<{ color: string; value: number | null }>,
  v: number | undefined,
): string {
  let color = steps[0]?.color ?? 'green';
  if (v !== undefined) for (const s of steps) if (s.value === null || v >= s.value) color = s.color;
  return NAMED[color] ?? color;
}

function statSvg(panel: Extract<Panel, { type: 'stat' }>, v: number | undefined, b: Rect): string {
  const label = v === undefined ? 'No data' : formatValue(v, panel.unit);
  const size = Math.min(48, b.h * 0.7);
  return text(
    b.x + b.w / 2,
    b.y + b.h / 2 + size / 3,
    label,
    `font-size="${r(size)}" font-weight="bold" text-anchor="middle" fill="${thresholdColor(panel.thresholds, v)}"`,
  );
}

function tableSvg(columns: readonly string[], rows: ReadonlyArray<Record<string, string>>, b: Rect): string {
  const colW = b.w / columns.length;
  const out = columns.map((c, i) =>
    text(b.x + i * colW, b.y + 12, c, `font-weight="bold" fill="${THEME.dim}"`),
  );
  out.push(
    `<line x1="${r(b.x)}" y1="${r(b.y + 18)}" x2="${r(b.x + b.w)}" y2="${r(b.y + 18)}" stroke="${THEME.grid}"/>`,
  );
  if (rows.length === 0) out.push(text(b.x, b.y + 36, 'No data', `fill="${THEME.dim}"`));
  for (const [j, row] of rows.entries())
    for (const [i, c] of columns.entries()) out.push(text(b.x + i * colW, b.y + 36 + j * 20, row[c] ?? ''));
  return out.join('\n');
}

/** Legend rows: each entry's x offset and row, entries flowing left to right. */
export function legendLayout(
  names: readonly string[],
  widthPx: number,
): Array<{ name: string; x: number; row: number }> {
  const out: Array<{ name: string; x: number; row: number }> = [];
  let x = 0;
  let row = 0;
  for (const name of names) {
    const w = 22 + name.length * SIZE.charPx + 14;
    if (x > 0 && x + w > widthPx) {
      x = 0;
      row++;
    }
    out.push({ name, x, row });
    x += w;
  }
  return out;
}

function timeseriesSvg(
  panel: Extract<Panel, { type: 'timeseries' }>,
  series: readonly Series[],
  b: Rect,
  p: DashboardPicture,
): string {
  // The legend keeps the plot at least 60 px high; what does not fit is counted in its
  // last row (Grafana scrolls it).
  const maxRows = Math.max(1, Math.floor((b.h - 20 - 60) / 16));
  const all = legendLayout(
    series.map((s) => s.name),
    b.w,
  );
  const legend = all.filter(
    (l) => all.length === 0 || l.row < maxRows - (all.some((x) => x.row >= maxRows) ? 1 : 0),
  );
  const hidden = all.length - legend.length;
  const legendRows =
    legend.length === 0 ? 0 : Math.max(...legend.map((l) => l.row)) + 1 + (hidden > 0 ? 1 : 0);
  const axisW = 52;
  const plot = { x: b.x + axisW, y: b.y + 4, w: b.w - axisW, h: b.h - 4 - 16 - legendRows * 16 };
  const stacked = panel.stacked
    ? stack(series)
    : series.map((s) => ({
        name: s.name,
        points: s.points.map(([t, v]) => [t, 0, v] as [number, number, number]),
      }));
  const axis = valueAxis(
    stacked.flatMap((s) => s.points.map(([, , v]) => v)),
    panel.min,
    Math.max(2, Math.floor(plot.h / 30)),
  );
  const X = (t: number) => plot.x + ((t - p.fromMs) / (p.toMs - p.fromMs)) * plot.w;
  const Y = (v: number) => plot.y + plot.h - ((v - axis.min) / (axis.max - axis.min)) * plot.h;
  const out: string[] = [];
  for (const t of axis.ticks) {
    out.push(
      `<line x1="${r(plot.x)}" y1="${r(Y(t))}" x2="${r(plot.x + plot.w)}" y2="${r(Y(t))}" stroke="${THEME.grid}"/>`,
    );
    out.push(text(plot.x - 6, Y(t) + 4, formatValue(t, panel.unit), `text-anchor="end" fill="${THEME.dim}"`));
  }
  for (const t of timeTicks(p.fromMs, p.toMs, Math.max(2, Math.floor(plot.w / 90)))) {
    out.push(
      `<line x1="${r(X(t))}" y1="${r(plot.y)}" x2="${r(X(t))}" y2="${r(plot.y + plot.h)}" stroke="${THEME.grid}"/>`,
    );
    // A label that would cross the plot's edges (into the value axis, out of the panel) is left out.
    if (X(t) - 26 < plot.x || X(t) + 26 > plot.x + plot.w) continue;
    out.push(text(X(t), plot.y + plot.h + 13, clockOf(t), `text-anchor="middle" fill="${THEME.dim}"`));
  }
  if (p.marker && p.marker.atMs >= p.fromMs && p.marker.atMs <= p.toMs) {
    const mx = X(p.marker.atMs);
    out.push(
      `<line x1="${r(mx)}" y1="${r(plot.y)}" x2="${r(mx)}" y2="${r(plot.y + plot.h)}" stroke="#e02f44" stroke-dasharray="4 3"/>`,
    );
    out.push(text(mx + 3, plot.y + 10, p.marker.label, 'fill="#e02f44" font-size="10"'));
  }
  const stepPx = barWidth(
    stacked.flatMap((s) => s.points.map(([t]) => t)),
    X,
  );
  stacked.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length] as string;
    if (panel.bars) {
      // Unstacked bars stand side by side in their step, as Grafana groups them.
      const slot = panel.stacked ? stepPx : stepPx / stacked.length;
      const left = -stepPx / 2 + (panel.stacked ? 0 : i * slot);
      for (const [t, base, top] of s.points)
        if (Number.isFinite(top) && top !== base)
          out.push(
            `<rect x="${r(X(t) + left)}" y="${r(Y(top))}" width="${r(slot)}" height="${r(Math.max(0.5, Y(base) - Y(top)))}" fill="${color}" fill-opacity="0.8"/>`,
          );
      return;
    }
    for (const run of runsOf(s.points))
      out.push(
        `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${run.map(([t, , v]) => `${r(X(t))},${r(Y(v))}`).join(' ')}"/>`,
      );
  });
  for (const l of legend) {
    const color = PALETTE[legend.indexOf(l) % PALETTE.length] as string;
    const ly = plot.y + plot.h + 30 + l.row * 16;
    out.push(`<rect x="${r(b.x + l.x)}" y="${r(ly - 5)}" width="14" height="3" fill="${color}"/>`);
    out.push(text(b.x + l.x + 20, ly, l.name));
  }
  if (hidden > 0)
    out.push(
      text(
        b.x,
        plot.y + plot.h + 30 + (legendRows - 1) * 16,
        `… and ${hidden} more series`,
        `fill="${THEME.dim}"`,
      ),
    );
  if (series.length === 0)
    out.push(
      text(plot.x + plot.w / 2, plot.y + plot.h / 2, 'No data', `text-anchor="middle" fill="${THEME.dim}"`),
    );
  return out.join('\n');
}

/** 80 % of the smallest gap between the series' times, in px (bars of one step). */
function barWidth(times: readonly number[], X: (t: number) => number): number {
  const sorted = [...new Set(times)].sort((a, b) => a - b);
  let gap = Number.POSITIVE_INFINITY;
  for (let i = 1; i < sorted.length; i++)
    gap = Math.min(gap, X(sorted[i] as number) - X(sorted[i - 1] as number));
  return Number.isFinite(gap) ? Math.max(1, gap * 0.8) : 4;
}

/** Runs of consecutive finite points (a gap in the data is a gap in the line). */
export function runsOf<P extends readonly [number, number, number]>(points: readonly P[]): P[][] {
  const runs: P[][] = [];
  let run: P[] = [];
  for (const pt of points) {
    if (Number.isFinite(pt[2])) run.push(pt);
    else if (run.length > 0) {
      runs.push(run);
      run = [];
    }
  }
  if (run.length > 0) runs.push(run);
  return runs;
}
