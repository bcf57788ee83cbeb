import assert from 'node:assert/strict';
import { test } from 'node:test';
import { managerTimeline } from '../../bench/failover/real-node-logs.ts';

const line = (time: string, fields: Record<string, unknown>) =>
  `${time}Z stdout F ${JSON.stringify({ level: 'info', time, ...fields })}`;

test('the timeline is the last manager start, its lease watch and first verdict, in s since the crash', () => {
  const crash = Date.parse('2026-12-01T20:59:52.952Z');
  const log = [
    line('2026-12-01T20:59:25.109Z', { msg: 'manager started' }),
    line('2026-12-01T20:59:25.733Z', { msg: 'watch open', resource: 'leases' }),
    line('2026-12-01T20:59:40.000Z', { msg: 'lease stale by our observation' }),
    line('2026-12-01T20:59:54.679Z', { msg: 'manager started' }),
    line('2026-12-01T20:59:54.849Z', { msg: 'watch open', resource: 'sharemanagers' }),
    line('2026-12-01T20:59:54.851Z', { msg: 'watch open', resource: 'leases' }),
    'not json',
    line('2026-12-01T21:00:00.867Z', { msg: 'lease stale by our observation' }),
    line('2026-12-01T21:00:02.000Z', { msg: 'lease stale by our observation' }),
  ].join('\n');
  assert.deepEqual(managerTimeline(log, crash), { startedS: 1.727, leaseWatchOpenS: 1.899, staleS: 7.915 });
});

test('a manager without a verdict after its start has none in the timeline', () => {
  const crash = Date.parse('2026-12-01T20:59:52.952Z');
  const log = [
    line('2026-12-01T20:59:40.000Z', { msg: 'lease stale by our observation' }),
    line('2026-12-01T20:59:54.679Z', { msg: 'manager started' }),
  ].join('\n');
  assert.deepEqual(managerTimeline(log, crash), {
    startedS: 1.727,
    leaseWatchOpenS: undefined,
    staleS: undefined,
  });
});
