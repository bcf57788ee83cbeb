/**
 * The API server stops for 15 s (from the stop's start) while 20 holders keep trying to
 * renew, then starts again: the manager was blind, so it declares nothing stale and
 * fails nothing over (the blindness rule). Its watches come back by themselves
 * (restarts counted).
 * Why 15 s: past 4 D (every lease looks stale when the manager sees it again) and past
 * the 12.6 s it takes the informers' re-watch backoff (0.2 s, doubling) to reach its
 * 10 s cap (lib/watch-backoff.ts), so the watches come back from the longest pause. It
 * was 30 s after a stop of up to 5 s, which added nothing to those.
 * Why 20 holders: the rule is per Lease; 20 still renew at once when the API returns
 * (20 writes a second, each cut at 1 s). It was 50, which only added load: on a loaded
 * 2-core machine a holder whose renewals time out for D is rightly judged stale.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sleep } from '../../lib/clock.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import {
  createNamespace,
  FAST_LEASE_D_MS,
  FAST_MANAGER_DEFAULTS,
  HolderLoop,
  readLease,
  startManager,
  useManagerFixture,
} from './manager-harness.ts';

const cluster = useCluster({ scheduler: false });
const D_MS = FAST_LEASE_D_MS;
const holders: HolderLoop[] = [];
const HOLDERS = 20;
const OUTAGE_MS = 15_000;

describe('API server outage', () => {
  useManagerFixture(cluster, [], holders);

  it('API server stopped for 15 s with 20 holders trying: zero verdicts, zero failovers', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'outage');
    const manager = startManager(cluster(), 'o1', {
      ...FAST_MANAGER_DEFAULTS,
      LEASEHOLD_WATCH_NAMESPACE: 'outage',
    });
    for (let i = 0; i < HOLDERS; i++)
      holders.push(new HolderLoop(kc, 'outage', `lease-${i}`, `pod-${i}`, 'node-1', 1000).start());
    await eventually(
      'all renewing',
      async () => (holders.every((h) => h.renewals >= 2) ? true : undefined),
      30_000,
    );
    await sleep(D_MS);

    const downAt = performance.now();
    await cluster().stopApiServer();
    await sleep(Math.max(0, OUTAGE_MS - (performance.now() - downAt)));
    await cluster().startApiServer();
    await eventually(
      'renewals again',
      async () => {
        const since = Date.now() - 1500;
        return holders.every((h) => h.lastRenewalAt > since) ? true : undefined;
      },
      30_000,
    );
    await eventually(
      'the manager watching leases again',
      async () => {
        const opened = (await manager.lines()).filter(
          (l) => l.msg === 'watch open' && l.resource === 'leases',
        );
        return opened.length >= 2 ? true : undefined;
      },
      30_000,
    );
    await sleep(15_000); // past the longest re-watch backoff plus 3 D

    const lines = await manager.lines();
    assert.deepEqual(
      lines.filter((l) => l.msg === 'lease stale by our observation'),
      [],
      'no verdict',
    );
    assert.ok(
      lines.filter((l) => l.msg === 'watch open' && l.resource === 'leases').length >= 2,
      'the lease watch came back',
    );
    assert.ok(
      lines.some((l) => String(l.msg).startsWith('watch broken')),
      'the break was noticed and logged',
    );
    for (let i = 0; i < HOLDERS; i++)
      assert.equal((await readLease(kc, 'outage', `lease-${i}`)).delinquentSince, undefined);
    assert.ok(holders.every((h) => !h.lost));
    assert.equal(manager.child.exitCode, null, 'the manager is still running');
  });
});
