/**
 * The demo's command line (dev/demo/args.ts): the demo on real nodes, each bad value
 * rejected naming the option and the rule, an unknown option too.
 *   node --import tsx --test test/unit/demo-args.test.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseDemoArgs } from '../../dev/demo/args.ts';

test('no arguments: the demo on 2 real nodes, ADC sync 1m', () => {
  assert.deepEqual(parseDemoArgs([]), { nodes: 2, adcSync: '1m', kernels: ['6.1', '6.12'] });
});

test('--nodes, --adc-sync and --kernels', () => {
  assert.deepEqual(parseDemoArgs(['--nodes', '3', '--adc-sync=2s']), {
    nodes: 3,
    adcSync: '2s',
    kernels: ['6.1', '6.12'],
  });
  assert.deepEqual(parseDemoArgs(['--kernels', '6.1,6.1']), {
    nodes: 2,
    adcSync: '1m',
    kernels: ['6.1', '6.1'],
  });
});

test('bad input: each rejected naming the option and the rule', () => {
  const problem = (argv: string[]) => {
    const r = parseDemoArgs(argv);
    assert.ok('problem' in r, `${argv.join(' ')} rejected: ${JSON.stringify(r)}`);
    return r.problem;
  };
  assert.match(problem(['--nodes', '1']), /--nodes=1: .*2 to 5.*surviving node/);
  assert.match(problem(['--nodes', '6']), /--nodes=6/);
  assert.match(problem(['--nodes', '2.5']), /--nodes=2\.5/);
  assert.match(problem(['--adc-sync', '90']), /--adc-sync=90: .*like 2s or 1m/);
  assert.match(problem(['--adc-sync', '0s']), /--adc-sync=0s/);
  assert.match(problem(['--real']), /--real/);
  assert.match(problem(['extra']), /extra/);
  assert.match(problem(['--kernels', '6.1']), /--kernels=6\.1: must be two of 6\.1, 6\.12/);
  assert.match(problem(['--kernels', '6.1,5.10']), /--kernels=6\.1,5\.10/);
});
