/**
 * manager/manager-metrics.ts: the series of closed label sets exist at 0 from the start,
 * so that an increase() over them sees their first step.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { Registry } from 'prom-client';
import { createManagerMetrics, FAILOVER_PHASES, FAILOVER_RESULTS } from '../../manager/manager-metrics.ts';

it('exports every failover result and phase at 0 before any failover', async () => {
  const registry = new Registry();
  createManagerMetrics(registry);
  const fresh = await registry.metrics();
  assert.ok(FAILOVER_RESULTS.includes('replacement_lost'));
  for (const result of FAILOVER_RESULTS)
    assert.match(fresh, new RegExp(`^leasehold_manager_failovers_total\\{result="${result}"\\} 0$`, 'm'));
  for (const phase of FAILOVER_PHASES) {
    assert.match(
      fresh,
      new RegExp(`^leasehold_manager_failover_phase_duration_seconds_count\\{phase="${phase}"\\} 0$`, 'm'),
    );
    assert.match(
      fresh,
      new RegExp(
        `^leasehold_manager_failover_phase_duration_seconds_bucket\\{le="60",phase="${phase}"\\} 0$`,
        'm',
      ),
    );
  }
  assert.match(fresh, /^leasehold_manager_agent_fences_total 0$/m);
});
