/**
 * The real node's fault state machine (dev/node/node-faults.ts) without a machine: a
 * target that records each step. A crash silences the API link, removes the API
 * server's route and takes the node off the fabric before any process dies (so the
 * dying node sends no FIN, RST or ICMP to anyone); heal after it resets the link and
 * boots again (which attaches the node again). A partition is from the API server
 * only: the fabric is left alone. Faults from a state other than `running` are refused.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ApiLink, LinkMode } from '../../dev/node/api-link.ts';
import { type FaultTarget, NodeFaults } from '../../dev/node/node-faults.ts';

function recording(): { target: FaultTarget; steps: string[] } {
  const steps: string[] = [];
  let mode: LinkMode = 'pass';
  const link = {
    port: 1,
    get mode() {
      return mode;
    },
    setMode(m: LinkMode) {
      mode = m;
      steps.push(`link ${m}`);
    },
    connections: () => ({ accepted: 0, open: 0 }),
    close: async () => {},
  } satisfies ApiLink;
  const target: FaultTarget = {
    name: 'real-1',
    cgroupRoot: '/leasehold-node-x',
    link,
    pidNs: () => undefined,
    route: async (on) => {
      steps.push(`route ${on ? 'on' : 'off'}`);
    },
    offFabric: async () => {
      steps.push('off fabric');
    },
    spawned: () => [],
    powerOff: async () => {
      steps.push('power off');
    },
    boot: async () => {
      steps.push('boot');
    },
    progress: () => {},
  };
  return { target, steps };
}

test('a crash cuts the API link, the route and the fabric before the power goes; heal boots again', async () => {
  const { target, steps } = recording();
  const faults = new NodeFaults(target);
  await faults.crash();
  assert.equal(faults.state, 'crashed');
  assert.deepEqual(steps, ['link down', 'route off', 'off fabric', 'power off']);
  await assert.rejects(faults.crash(), { code: 'E_NODE_FAULT', message: /cannot crash while crashed/ });
  steps.length = 0;
  await faults.heal();
  assert.equal(faults.state, 'running');
  assert.deepEqual(steps, ['link pass', 'boot']);
  assert.deepEqual(
    faults.faults.map((f) => f.fault),
    ['crash', 'heal'],
  );
});

test('a partition is from the API server only: the fabric stays', async () => {
  const { target, steps } = recording();
  const faults = new NodeFaults(target);
  faults.partition('stall');
  await Promise.resolve();
  assert.deepEqual(steps, ['link stall', 'route off']);
  await faults.heal();
  assert.deepEqual(steps, ['link stall', 'route off', 'route on', 'link pass']);
  assert.throws(() => faults.partition('drop' as 'close'), { code: 'E_NODE_FAULT', message: /'drop'/ });
});
