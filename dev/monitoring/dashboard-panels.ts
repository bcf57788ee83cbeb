/**
 * The chart's Grafana dashboard (charts/leasehold/dashboards/leasehold.json) read as
 * what a renderer needs of each panel, and the Grafana rules its queries and legends
 * follow, as pure functions: `panelsOf` (rows' nested panels flattened, in file order),
 * `queryOf` (Grafana's `$__interval`, `$__rate_interval` and `$__range` substituted, as
 * Grafana does for a Prometheus data source), `seriesName` (a series' legend from the
 * target's legendFormat), `gridStep` (the step Grafana would pick for a range).
 *
 * Guarantees: a panel type, unit or variable this file does not know is an error naming
 * the panel, never a silently different picture. Only what the dashboard uses is read:
 * row, stat, table, timeseries; units `s` and `none`; draw styles line and bars;
 * stacking `normal`; thresholds' colours; a table's `organize` columns.
 * Not modelled: Grafana's own value reductions (a stat reads its instant query), panel
 * links, repeats, overrides, tooltips.
 */
import { LeaseholdError } from '../../lib/errors.ts';

export interface GridPos {
  x: number;
  y: number;
  w: number;
  h: number;
}

export interface PanelTarget {
  refId: string;
  expr: string;
  legendFormat?: string;
  instant: boolean;
}

export interface Threshold {
  color: string;
  /** null: the base colour. */
  value: number | null;
}

interface PanelBase {
  id: number;
  title: string;
  gridPos: GridPos;
}

export type Panel =
  | (PanelBase & { type: 'row' })
  | (PanelBase & { type: 'stat'; unit: Unit; targets: PanelTarget[]; thresholds: Threshold[] })
  | (PanelBase & { type: 'table'; targets: PanelTarget[]; columns: string[] })
  | (PanelBase & {
      type: 'timeseries';
      unit: Unit;
      targets: PanelTarget[];
      min?: number;
      bars: boolean;
      stacked: boolean;
    });

export type Unit = 's' | 'ops' | 'none';

type Json = Record<string, unknown>;

function problem(where: string, what: string): LeaseholdError {
  return new LeaseholdError('E_DASHBOARD', `dashboard panel ${where}: ${what}`);
}

function obj(v: unknown): Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : {};
}

function gridPosOf(v: unknown, where: string): GridPos {
  const g = obj(v);
  const [x, y, w, h] = [g.x, g.y, g.w, g.h];
  if (![x, y, w, h].every((n) => Number.isInteger(n) && (n as number) >= 0))
    throw problem(where, `gridPos ${JSON.stringify(v)}: x, y, w, h as integers >= 0 expected`);
  return { x, y, w, h } as GridPos;
}

function unitOf(v: unknown, where: string): Unit {
  if (v === undefined || v === 'none') return 'none';
  if (v === 's' || v === 'ops') return v;
  throw problem(where, `unit ${JSON.stringify(v)}: only "s", "ops" and "none" are drawn`);
}

function targetsOf(v: unknown, where: string): PanelTarget[] {
  if (!Array.isArray(v) || v.length === 0) throw problem(where, 'no targets');
  return v.map((t) => {
    const o = obj(t);
    if (typeof o.expr !== 'string' || o.expr === '') throw problem(where, `target ${o.refId}: no expr`);
    return {
      refId: String(o.refId ?? ''),
      expr: o.expr,
      ...(typeof o.legendFormat === 'string' ? { legendFormat: o.legendFormat } : {}),
      instant: o.instant === true,
    };
  });
}

/** Every panel of the dashboard JSON, a row's nested panels after the row. */
export function panelsOf(dashboard: unknown): Panel[] {
  const top = obj(dashboard).panels;
  if (!Array.isArray(top)) throw new LeaseholdError('E_DASHBOARD', 'dashboard JSON has no panels list');
  const flat = (list: unknown[]): unknown[] => list.flatMap((p) => [p, ...flat(asList(obj(p).panels))]);
  return flat(top).map((raw) => panelOf(obj(raw)));
}

function asList(v: unknown): unknown[] {
  return Array.isArray(v) ? v : [];
}

function panelOf(p: Json): Panel {
  const where = `${JSON.stringify(p.title)} (id ${p.id})`;
  const base = { id: Number(p.id), title: String(p.title ?? ''), gridPos: gridPosOf(p.gridPos, where) };
  const defaults = obj(obj(p.fieldConfig).defaults);
  const custom = obj(defaults.custom);
  switch (p.type) {
    case 'row':
      return { ...base, type: 'row' };
    case 'stat':
      return {
        ...base,
        type: 'stat',
        unit: unitOf(defaults.unit, where),
        targets: targetsOf(p.targets, where),
        thresholds: asList(obj(defaults.thresholds).steps).map((s) => ({
          color: String(obj(s).color),
          value: typeof obj(s).value === 'number' ? (obj(s).value as number) : null,
        })),
      };
    case 'table': {
      const organize = asList(p.transformations)
        .map(obj)
        .find((t) => t.id === 'organize');
      const index = obj(obj(organize?.options).indexByName);
      const columns = Object.keys(index).sort((a, b) => Number(index[a]) - Number(index[b]));
      if (columns.length === 0) throw problem(where, 'a table without organize.indexByName columns');
      return { ...base, type: 'table', targets: targetsOf(p.targets, where), columns };
    }
    case 'timeseries': {
      const stacking = obj(custom.stacking).mode;
      if (stacking !== undefined && stacking !== 'none' && stacking !== 'normal')
        throw problem(where, `stacking ${JSON.stringify(stacking)}: only normal or none drawn`);
      const draw = custom.drawStyle;
      if (draw !== undefined && draw !== 'line' && draw !== 'bars')
        throw problem(where, `drawStyle ${JSON.stringify(draw)}: only line or bars drawn`);
      return {
        ...base,
        type: 'timeseries',
        unit: unitOf(defaults.unit, where),
        targets: targetsOf(p.targets, where),
        ...(typeof defaults.min === 'number' ? { min: defaults.min } : {}),
        bars: draw === 'bars',
        stacked: stacking === 'normal',
      };
    }
    default:
      throw problem(where, `type ${JSON.stringify(p.type)} is not drawn (row, stat, table, timeseries)`);
  }
}

/** Grafana's interval variables for one query, in seconds. */
export interface Intervals {
  /** `$__interval`: the step. */
  stepS: number;
  /** The data source's scrape interval (Grafana's `timeInterval` setting). */
  scrapeS: number;
  /** `$__range`: the whole range. */
  rangeS: number;
}

/**
 * The PromQL Grafana sends: `$__rate_interval` is max(step + scrape, 4 × scrape)
 * (Grafana's rule), `$__interval` the step, `$__range` the range; `${datasource}` and any
 * other variable in the expression is an error (none of this dashboard's queries has one).
 */
export function queryOf(expr: string, iv: Intervals): string {
  const rate = Math.max(iv.stepS + iv.scrapeS, 4 * iv.scrapeS);
  const out = expr
    .replace(/\$__rate_interval\b/g, `${rate}s`)
    .replace(/\$__interval\b/g, `${iv.stepS}s`)
    .replace(/\$__range\b/g, `${iv.rangeS}s`);
  const unknown = /\$\{?\w+/.exec(out);
  if (unknown) throw new LeaseholdError('E_DASHBOARD', `unknown Grafana variable ${unknown[0]} in: ${expr}`);
  return out;
}

/**
 * Grafana's step for a range drawn `widthPx` wide: range / width, never below the scrape
 * interval, rounded up to a whole second.
 */
export function gridStep(rangeS: number, widthPx: number, scrapeS: number): number {
  if (!(rangeS > 0) || !(widthPx > 0) || !(scrapeS > 0))
    throw new LeaseholdError(
      'E_DASHBOARD',
      `step of range ${rangeS} s, width ${widthPx} px, scrape ${scrapeS} s: all > 0 expected`,
    );
  return Math.max(scrapeS, Math.ceil(rangeS / widthPx));
}

/**
 * A series' legend: the legendFormat with each `{{label}}` replaced by the series'
 * value of that label (empty when it has none); without a legendFormat, Grafana's
 * default: `name{label="value", ...}`, or the expression when the series has no labels.
 */
export function seriesName(
  labels: Record<string, string>,
  legendFormat: string | undefined,
  expr: string,
): string {
  if (legendFormat !== undefined && legendFormat !== '')
    return legendFormat.replace(/\{\{\s*([a-zA-Z_]\w*)\s*\}\}/g, (_, l: string) => labels[l] ?? '');
  const { __name__: name = '', ...rest } = labels;
  const pairs = Object.entries(rest).map(([k, v]) => `${k}="${v}"`);
  if (name === '' && pairs.length === 0) return expr;
  return `${name}{${pairs.join(', ')}}`;
}
