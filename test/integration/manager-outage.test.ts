/**
 * The API server stops for 30 s while 50 holders keep trying to renew, then starts
 * again: the manager was blind, so it declares nothing stale and fails nothing over
 * (the blindness rule). Its watches come back by themselves (restarts counted).
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

describe('API server outage', () => {
  useManagerFixture(cluster, [], holders);

  it('API server stopped for 30 s with 50 holders trying: zero verdicts, zero failovers', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'outage');
    const manager = startManager(cluster(), 'o1', {
      ...FAST_MANAGER_DEFAULTS,
      LEASEHOLD_WATCH_NAMESPACE: 'outage',
    });
    for (let i = 0; i < 50; i++)
      holders.push(new HolderLoop(kc, 'outage', `lease-${i}`, `pod-${i}`, 'node-1', 1000).start());
    await eventually(
      'all renewing',
      async () => (holders.every((h) => h.renewals >= 2) ? true : undefined),
      30_000,
    );
    await sleep(D_MS);

    await cluster().stopApiServer();
    await sleep(30_000);
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
    for (let i = 0; i < 50; i++)
      assert.equal((await readLease(kc, 'outage', `lease-${i}`)).delinquentSince, undefined);
    assert.ok(holders.every((h) => !h.lost));
    assert.equal(manager.child.exitCode, null, 'the manager is still running');
  });
});
