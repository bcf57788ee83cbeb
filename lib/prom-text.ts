/**
 * The Prometheus text exposition format (version 0.0.4) for the agent's few metrics,
 * written by hand: prom-client, which the manager keeps, costs the agent ~12 MB of RSS
 * once loaded (measured on Node 24: 49.8 -> 62.0 MB on top of node:https; it pulls in
 * @opentelemetry/api, cluster, worker_threads), more than the agent's whole budget.
 *
 * Guarantees (test/unit/agent-metrics.test.ts checks the output with `promtool check
 * metrics` and against prom-client's families):
 *  - each family: `# HELP`, `# TYPE`, then its samples; HELP text and label values are
 *    escaped as the format requires (backslash, newline, and `"` in label values);
 *  - histograms: cumulative `_bucket` samples with `le` (last label, `+Inf` included),
 *    then `_sum` and `_count`, per label set;
 *  - values: integers and decimals as JavaScript prints them, `+Inf`, `-Inf`, `NaN`.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram';
export type Labels = Readonly<Record<string, string>>;

export interface Sample {
  /** Appended to the family name: `_bucket`, `_sum`, `_count` for histograms. */
  suffix?: string;
  labels?: Labels;
  value: number;
}

export interface Family {
  name: string;
  help: string;
  type: MetricType;
  samples: readonly Sample[];
}

export const CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

export function renderFamilies(families: readonly Family[]): string {
  let out = '';
  for (const family of families) {
    out += `# HELP ${family.name} ${escapeHelp(family.help)}\n# TYPE ${family.name} ${family.type}\n`;
    for (const sample of family.samples) {
      out += `${family.name}${sample.suffix ?? ''}${renderLabels(sample.labels)} ${renderValue(sample.value)}\n`;
    }
    out += '\n';
  }
  return out;
}

function renderLabels(labels: Labels | undefined): string {
  if (!labels) return '';
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabelValue(v)}"`);
  return parts.length === 0 ? '' : `{${parts.join(',')}}`;
}

function renderValue(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Number.POSITIVE_INFINITY) return '+Inf';
  if (value === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(value);
}

function escapeHelp(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
}

function escapeLabelValue(text: string): string {
  return escapeHelp(text).replace(/"/g, '\\"');
}

/** A histogram with fixed buckets, one series per label set (kept in first-seen order). */
export class Histogram {
  private readonly series = new Map<
    string,
    { labels: Labels; counts: number[]; sum: number; count: number }
  >();

  constructor(private readonly buckets: readonly number[]) {
    for (let i = 1; i < buckets.length; i++) {
      if (!((buckets[i] as number) > (buckets[i - 1] as number)))
        throw new RangeError(`histogram buckets must increase: ${buckets.join(', ')}`);
    }
  }

  observe(value: number, labels: Labels = {}): void {
    const key = JSON.stringify(labels);
    let s = this.series.get(key);
    if (!s) {
      s = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 };
      this.series.set(key, s);
    }
    for (let i = 0; i < this.buckets.length; i++) {
      if (value <= (this.buckets[i] as number)) s.counts[i] = (s.counts[i] as number) + 1;
    }
    s.sum += value;
    s.count += 1;
  }

  /** Series that were never observed have no samples (as prom-client does for labelled histograms). */
  samples(withEmpty?: Labels): Sample[] {
    const out: Sample[] = [];
    const all = [...this.series.values()];
    if (withEmpty && this.series.size === 0)
      all.push({ labels: withEmpty, counts: this.buckets.map(() => 0), sum: 0, count: 0 });
    for (const s of all) {
      this.buckets.forEach((le, i) => {
        out.push({
          suffix: '_bucket',
          labels: { ...s.labels, le: String(le) },
          value: s.counts[i] as number,
        });
      });
      out.push({ suffix: '_bucket', labels: { ...s.labels, le: '+Inf' }, value: s.count });
      out.push({ suffix: '_sum', labels: s.labels, value: s.sum });
      out.push({ suffix: '_count', labels: s.labels, value: s.count });
    }
    return out;
  }
}
