/**
 * /readyz is the proof the server may serve (its startup gate and its liveness probe):
 * 200 only while the lease is held AND the last successful renewal was sent within T.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AgentHealth } from '../../agent/agent-health.ts';
import { AgentMetrics } from '../../agent/agent-metrics.ts';
import { ManualClock } from '../../lib/clock.ts';

const T = 4_000;

function setup() {
  const clock = new ManualClock(10_000);
  const metrics = new AgentMetrics(clock);
  return { clock, metrics, health: new AgentHealth(metrics, T) };
}

test('ready while holding and renewed within T; not ready once T passed without a renewal', () => {
  const { clock, metrics, health } = setup();
  assert.equal(health.readyz().ok, false, 'not before the lease is held');
  metrics.renewed(clock.now(), 0, false);
  health.enter('holding');
  assert.equal(health.readyz().ok, true);
  clock.advance(T);
  assert.equal(health.readyz().ok, true, 'exactly T: still proven');
  clock.advance(1);
  const late = health.readyz();
  assert.equal(late.ok, false, 'T + 1 ms without a renewal: the proof lapsed');
  assert.match(late.detail, /last successful renewal sent 4\.0s ago/);
  metrics.renewed(clock.now(), 5, true);
  assert.equal(health.readyz().ok, true, 'a renewal restores it');
});

test('not ready in every other phase, and cannot-fence says why on both endpoints', () => {
  const { clock, metrics, health } = setup();
  metrics.renewed(clock.now(), 0, false);
  for (const phase of ['acquiring', 'releasing', 'fenced', 'stopped'] as const) {
    health.enter(phase);
    assert.equal(health.readyz().ok, false, phase);
  }
  health.enter('cannot-fence', 'cannot fence: no CAP_KILL');
  assert.deepEqual(health.readyz(), { ok: false, detail: 'cannot fence: no CAP_KILL' });
  assert.deepEqual(health.healthz(), { ok: false, detail: 'cannot fence: no CAP_KILL' });
});
