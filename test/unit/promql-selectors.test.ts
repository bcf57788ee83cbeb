/**
 * test/support/promql-selectors.ts: the metric names, matchers and grouping labels an
 * expression reads, in the shapes the chart's alerts and dashboard use.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { expressionNames } from '../support/promql-selectors.ts';

describe('expressionNames', () => {
  it('finds the metrics of an arithmetic over aggregations, not the functions or aggregations', () => {
    const names = expressionNames(
      'max(leasehold_manager_leases_tracked)\n  - (count(leasehold_agent_lease_held == 1) or vector(0))\n  > 0',
    );
    assert.deepEqual(
      names.selectors.map((s) => s.metric),
      ['leasehold_manager_leases_tracked', 'leasehold_agent_lease_held'],
    );
    assert.deepEqual(names.groupingLabels, []);
  });

  it('reads matchers with every operator and both string quotings, a backquoted regex raw', () => {
    const { selectors } = expressionNames(
      `sum(increase(x_bucket{phase="total",le=~"60(\\\\.0)?", result!='a\\'b', pod!~\`m-\\d+\`}[30m]))`,
    );
    assert.deepEqual(selectors, [
      {
        metric: 'x_bucket',
        matchers: [
          { label: 'phase', op: '=', value: 'total' },
          { label: 'le', op: '=~', value: '60(\\.0)?' },
          { label: 'result', op: '!=', value: "a'b" },
          { label: 'pod', op: '!~', value: 'm-\\d+' },
        ],
      },
    ]);
  });

  it('collects by/without/on/ignoring/group_left labels, before or after the aggregated expression', () => {
    const names = expressionNames(
      'histogram_quantile(0.99, sum by (le, phase) (rate(a_bucket[5m]))) / on (phase) group_left (node) sum(b) without (pod, le)',
    );
    assert.deepEqual(
      names.selectors.map((s) => s.metric),
      ['a_bucket', 'b'],
    );
    assert.deepEqual(names.groupingLabels, ['le', 'phase', 'node', 'pod']);
  });

  it('skips ranges, subqueries, offsets, @ modifiers, numbers with exponents and keywords', () => {
    const names = expressionNames(
      'max_over_time(deriv(a[5m])[30m:1m]) offset 1h @ end() > bool 1e+3 and b unless c or Inf',
    );
    assert.deepEqual(
      names.selectors.map((s) => s.metric),
      ['a', 'b', 'c'],
    );
  });

  it('a name-less selector carries its __name__ matcher as the metric', () => {
    assert.deepEqual(expressionNames('{__name__="up", job="x"}').selectors, [
      { metric: 'up', matchers: [{ label: 'job', op: '=', value: 'x' }] },
    ]);
  });

  it('names the offset of what it cannot read', () => {
    assert.throws(() => expressionNames('sum(a{b="c)'), /unterminated string at offset 8 in: sum/);
    assert.throws(() => expressionNames('a{b}'), /malformed label matcher at offset 2/);
    assert.throws(() => expressionNames('a ; b'), /unexpected character ";" at offset 2/);
  });
});
