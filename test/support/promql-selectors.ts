/**
 * *Pure*: what a PromQL expression reads, without evaluating it: each vector selector
 * (its metric name and label matchers) and each label named in a `by`, `without`, `on`,
 * `ignoring`, `group_left` or `group_right` list. For the chart's alert and dashboard
 * tests, which check those names against what the components really export.
 *
 * Guarantees: a metric name, a matcher or a grouping label written anywhere in the
 * expression is found (inside functions, aggregations, binary operations, subqueries);
 * names of functions, aggregations and keywords are never taken for metrics; string
 * literals (`"..."`, `'...'`, backquoted) are decoded. Not a validator: promtool says
 * whether the expression parses (an unbalanced bracket or unknown character here is an
 * error naming the expression and the offset, nothing more).
 */

export type MatchOp = '=' | '!=' | '=~' | '!~';

export interface Matcher {
  label: string;
  op: MatchOp;
  value: string;
}

export interface Selector {
  /** The metric name, or undefined for `{__name__=~"..."}` and other name-less selectors. */
  metric: string | undefined;
  matchers: Matcher[];
}

export interface ExpressionNames {
  selectors: Selector[];
  /** Labels named in by/without/on/ignoring/group_left/group_right lists, in order, once each. */
  groupingLabels: string[];
}

type Token =
  | { kind: 'ident'; text: string; at: number }
  | { kind: 'string'; text: string; at: number }
  | { kind: 'number'; text: string; at: number }
  | { kind: 'punct'; text: string; at: number };

const GROUPING_KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);
const AGGREGATIONS = new Set([
  'sum',
  'min',
  'max',
  'avg',
  'group',
  'stddev',
  'stdvar',
  'count',
  'count_values',
  'bottomk',
  'topk',
  'quantile',
  'limitk',
  'limit_ratio',
]);
/** Words that are operators or modifiers, never metrics (PromQL keywords are case-insensitive). */
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'atan2', 'inf', 'nan']);
const PUNCTUATION = ['=~', '!~', '!=', '==', '<=', '>=', '{', '}', '(', ')', '[', ']', ',', '=', '<', '>'];
const SINGLE = '+-*/%^@:';

function tokenize(expr: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < expr.length) {
    const c = expr[i] as string;
    if (/\s/.test(c)) {
      i++;
    } else if (c === '#') {
      while (i < expr.length && expr[i] !== '\n') i++;
    } else if (c === '"' || c === "'" || c === '`') {
      const at = i;
      let text = '';
      i++;
      while (i < expr.length && expr[i] !== c) {
        // Backquoted strings are raw; the others take Go's escapes (enough of them here).
        if (expr[i] === '\\' && c !== '`') {
          const next = expr[i + 1] ?? '';
          text += next === 'n' ? '\n' : next === 't' ? '\t' : next;
          i += 2;
        } else {
          text += expr[i];
          i++;
        }
      }
      if (i >= expr.length) throw new Error(`unterminated string at offset ${at} in: ${expr}`);
      i++;
      tokens.push({ kind: 'string', text, at });
    } else if (/[0-9.]/.test(c)) {
      const m = /^[0-9.][0-9a-zA-Z_.+]*/.exec(expr.slice(i)) as RegExpExecArray;
      // NB: `+` belongs to a number only in an exponent (1e+3); else it is an operator.
      const text = m[0].replace(/(?<![eE])\+.*$/, '');
      tokens.push({ kind: 'number', text, at: i });
      i += text.length;
    } else if (/[a-zA-Z_]/.test(c)) {
      const m = /^[a-zA-Z_][a-zA-Z0-9_:]*/.exec(expr.slice(i)) as RegExpExecArray;
      tokens.push({ kind: 'ident', text: m[0], at: i });
      i += m[0].length;
    } else {
      const p = PUNCTUATION.find((q) => expr.startsWith(q, i)) ?? (SINGLE.includes(c) ? c : undefined);
      if (p === undefined) throw new Error(`unexpected character "${c}" at offset ${i} in: ${expr}`);
      tokens.push({ kind: 'punct', text: p, at: i });
      i += p.length;
    }
  }
  return tokens;
}

/** The selectors and grouping labels of `expr`. */
export function expressionNames(expr: string): ExpressionNames {
  const tokens = tokenize(expr);
  const selectors: Selector[] = [];
  const grouping: string[] = [];
  const at = (k: number): Token | undefined => tokens[k];
  const isPunct = (k: number, text: string) => at(k)?.kind === 'punct' && at(k)?.text === text;

  /** Reads `{label op "value", ...}` starting at the `{` at k; returns the index after `}`. */
  const readMatchers = (k: number, into: Matcher[]): number => {
    let j = k + 1;
    while (!isPunct(j, '}')) {
      const label = at(j);
      const op = at(j + 1);
      const value = at(j + 2);
      if (label?.kind !== 'ident' || op?.kind !== 'punct' || value?.kind !== 'string')
        throw new Error(`malformed label matcher at offset ${label?.at ?? expr.length} in: ${expr}`);
      into.push({ label: label.text, op: op.text as MatchOp, value: value.text });
      j += 3;
      if (isPunct(j, ',')) j++;
    }
    return j + 1;
  };

  for (let k = 0; k < tokens.length; ) {
    const t = at(k) as Token;
    if (t.kind === 'punct' && t.text === '[') {
      // A range or subquery: durations only, nothing to read.
      while (k < tokens.length && !isPunct(k, ']')) k++;
      k++;
    } else if (t.kind === 'punct' && t.text === '{') {
      const matchers: Matcher[] = [];
      k = readMatchers(k, matchers);
      const name = matchers.find((m) => m.label === '__name__' && m.op === '=');
      selectors.push({ metric: name?.value, matchers: matchers.filter((m) => m !== name) });
    } else if (t.kind === 'ident') {
      const word = t.text.toLowerCase();
      if (GROUPING_KEYWORDS.has(word)) {
        k++;
        if (isPunct(k, '(')) {
          for (k++; !isPunct(k, ')'); k++) {
            const label = at(k);
            if (label === undefined) throw new Error(`unclosed label list of "${t.text}" in: ${expr}`);
            if (label.kind === 'ident' && !grouping.includes(label.text)) grouping.push(label.text);
          }
          k++;
        }
      } else if (KEYWORDS.has(word)) {
        k++;
      } else if (isPunct(k + 1, '(')) {
        k++; // a function call
      } else if (AGGREGATIONS.has(word) && GROUPING_KEYWORDS.has(at(k + 1)?.text.toLowerCase() ?? '')) {
        k++; // `sum by (x) (...)`
      } else {
        const matchers: Matcher[] = [];
        k = isPunct(k + 1, '{') ? readMatchers(k + 1, matchers) : k + 1;
        selectors.push({ metric: t.text, matchers });
      }
    } else {
      k++;
    }
  }
  return { selectors, groupingLabels: grouping };
}
