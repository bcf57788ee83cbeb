/**
 * *Pure*: the series a component exports, read from its /metrics text, and the check
 * that a PromQL expression (an alert's, a dashboard panel's) reads only those.
 *
 * A catalogue holds, per sample name (histograms' `_bucket`, `_sum`, `_count` each),
 * the label sets scraped, plus the labels the scrape adds (prometheus-operator's target
 * labels and the chart's relabelings: `job`, `namespace`, `pod`, `share`...), which the
 * exposition cannot show.
 *
 * Guarantees of `problemsOf`: one line per problem, naming the expression's place, the
 * metric and what the scrape has instead, for: a metric no component exports; a label
 * matcher on a label the metric never carries; an `=` matcher (or a regex `=~`) that
 * no scraped value of that label satisfies (a renamed label value); a grouping label
 * (by, on, ...) that no metric of the expression carries. A negative matcher (`!=`,
 * `!~`) is checked for its label only.
 */
import { expressionNames, type Matcher } from './promql-selectors.ts';

export interface ScrapedSeries {
  name: string;
  labels: Record<string, string>;
}

export interface CatalogueEntry {
  /** Which component exports it (for messages). */
  source: string;
  /** The label sets of its samples, as scraped. */
  series: Record<string, string>[];
  /** Labels the scrape adds to every series of this source. */
  targetLabels: readonly string[];
}

export type Catalogue = Map<string, CatalogueEntry>;

/** The samples of a text exposition (format 0.0.4), label values unescaped. */
export function parseExposition(text: string): ScrapedSeries[] {
  const out: ScrapedSeries[] = [];
  for (const [n, line] of text.split('\n').entries()) {
    if (line === '' || line.startsWith('#')) continue;
    const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)?.[0];
    if (name === undefined) throw new Error(`line ${n + 1} of the exposition is no sample: ${line}`);
    const labels: Record<string, string> = {};
    let i = name.length;
    if (line[i] === '{') {
      i++;
      while (line[i] !== '}') {
        const m = /^\s*([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(line.slice(i));
        if (!m) throw new Error(`line ${n + 1} of the exposition has a malformed label: ${line}`);
        i += m[0].length;
        let value = '';
        while (line[i] !== '"') {
          if (i >= line.length) throw new Error(`line ${n + 1}: unterminated label value: ${line}`);
          if (line[i] === '\\') {
            const next = line[i + 1];
            value += next === 'n' ? '\n' : (next ?? '');
            i += 2;
          } else {
            value += line[i];
            i++;
          }
        }
        labels[m[1] as string] = value;
        i++;
        if (line[i] === ',') i++;
      }
    }
    out.push({ name, labels });
  }
  return out;
}

/** Adds the samples of one component's /metrics to `catalogue` (a name in two sources is an error). */
export function addScrape(
  catalogue: Catalogue,
  source: string,
  exposition: string,
  targetLabels: readonly string[],
): Catalogue {
  for (const { name, labels } of parseExposition(exposition)) {
    const entry = catalogue.get(name) ?? { source, series: [], targetLabels };
    if (entry.source !== source)
      throw new Error(`metric ${name} is exported by both ${entry.source} and ${source}`);
    entry.series.push(labels);
    catalogue.set(name, entry);
  }
  return catalogue;
}

function satisfies(value: string, m: Matcher): boolean {
  if (m.op === '=') return value === m.value;
  if (m.op === '=~') return new RegExp(`^(?:${m.value})$`).test(value);
  return true;
}

/** Everything `expr` reads that the catalogue lacks; `where` names the expression (an alert, a panel). */
export function problemsOf(where: string, expr: string, catalogue: Catalogue): string[] {
  const problems: string[] = [];
  const { selectors, groupingLabels } = expressionNames(expr);
  const available = new Set<string>();
  for (const { metric, matchers } of selectors) {
    if (metric === undefined) {
      problems.push(
        `${where}: a selector without a metric name (${JSON.stringify(matchers)}) cannot be checked`,
      );
      continue;
    }
    const entry = catalogue.get(metric);
    if (!entry) {
      const stem = metric.split('_').slice(0, 3).join('_');
      const near = [...catalogue.keys()].filter((k) => k.startsWith(stem)).slice(0, 12);
      problems.push(
        `${where}: metric ${metric} is not exported by the components scraped (${near.length > 0 ? `names starting ${stem}: ${near.join(', ')}` : `no name starts ${stem}`})`,
      );
      continue;
    }
    const scrapedLabels = new Set(entry.series.flatMap((s) => Object.keys(s)));
    for (const l of [...scrapedLabels, ...entry.targetLabels]) available.add(l);
    for (const m of matchers) {
      if (entry.targetLabels.includes(m.label)) continue;
      if (!scrapedLabels.has(m.label)) {
        problems.push(
          `${where}: ${metric} has no label "${m.label}" (${entry.source} exports ${[...scrapedLabels].join(', ') || 'none'}; the scrape adds ${entry.targetLabels.join(', ')})`,
        );
        continue;
      }
      const values = [...new Set(entry.series.map((s) => s[m.label]).filter((v) => v !== undefined))];
      if (!values.some((v) => satisfies(v as string, m)))
        problems.push(
          `${where}: ${metric}{${m.label}${m.op}"${m.value}"} matches no series ${entry.source} exports (values of ${m.label}: ${values.join(', ')})`,
        );
    }
  }
  for (const label of groupingLabels) {
    if (!available.has(label))
      problems.push(`${where}: groups by "${label}", a label none of its metrics carries`);
  }
  return problems;
}
