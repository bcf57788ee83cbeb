/**
 * The manager's modes and guards against the real API server: a bad spec is refused
 * (by the schema or with status Error) without disturbing anything else; the Fencing
 * condition and the FenceDisabled warning of an explicit `fence.action: none`;
 * observe-only records what it would do and touches nothing. The test plays pods and agents.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sleep } from '../../lib/clock.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import {
  createNamespace,
  createShareManager,
  eventsFor,
  FAST_LEASE,
  FAST_LEASE_D_MS,
  getShareManager,
  type HolderLoop,
  kubectl,
  podsOf,
  readLease,
  runningShare as runningShareOn,
  shareManagerBody,
  startManager,
  useManagerFixture,
} from './manager-harness.ts';

const cluster = useCluster({ scheduler: false });
const LEASE = FAST_LEASE;
const D_MS = FAST_LEASE_D_MS;
const holders: HolderLoop[] = [];

function runningShare(namespace: string, name: string, node: string) {
  return runningShareOn(cluster().kubeConfig, { namespace, name, node, lease: LEASE }, holders);
}

describe('manager modes', () => {
  useManagerFixture(cluster, ['node-1', 'node-3'], holders);

  it('a bad spec is rejected by the API or gets status Error; nothing else is disturbed', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'bad');
    const manager = startManager(cluster(), 'b1', { LEASEHOLD_WATCH_NAMESPACE: 'bad' });
    try {
      const good = await runningShare('bad', 'vol-good', 'node-3');
      const noImage = shareManagerBody({ namespace: 'bad', name: 'no-image' }) as {
        spec: { server: Record<string, unknown> };
      };
      delete noImage.spec.server.image;
      const rejected = await kubectl(cluster(), ['apply', '-f', '-'], JSON.stringify(noImage));
      assert.notEqual(rejected.code, 0);
      assert.match(rejected.stderr, /spec\.server\.image: Required value/);
      const badDuration = shareManagerBody({
        namespace: 'bad',
        name: 'bad-duration',
        lease: { duration: '6 seconds' },
      });
      const rejected2 = await kubectl(cluster(), ['apply', '-f', '-'], JSON.stringify(badDuration));
      assert.notEqual(rejected2.code, 0);
      assert.match(rejected2.stderr, /spec\.lease\.duration/);

      // Accepted by the schema, refused by the cross-field rule (D=3s is not > default T=4s).
      await createShareManager(kc, { namespace: 'bad', name: 'bad-timing', lease: { duration: '3s' } });
      const sm = await eventually('status Error', async () => {
        const s = await getShareManager(kc, 'bad', 'bad-timing');
        return s.status?.state === 'Error' ? s : undefined;
      });
      assert.match(
        sm.status?.message ?? '',
        /lease duration 3s > renew deadline 4s > renew interval 2s must hold/,
      );
      await sleep(1000);
      assert.deepEqual(await podsOf(kc, 'bad', 'bad-timing'), [], 'no pod for a bad spec');
      await assert.rejects(readLease(kc, 'bad', 'bad-timing'), 'no lease for a bad spec');
      const pods = await podsOf(kc, 'bad', 'vol-good');
      assert.deepEqual(
        pods.map((p) => p.metadata?.uid),
        [good.pod.metadata?.uid],
        'the good share manager is untouched',
      );
      assert.equal((await getShareManager(kc, 'bad', 'vol-good')).status?.state, 'Running');
    } finally {
      await manager.kill();
    }
  });

  it('fencing: the default is Fencing=True; an explicit none is Fencing=False with one Warning event', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'fencing');
    const manager = startManager(cluster(), 'f1', { LEASEHOLD_WATCH_NAMESPACE: 'fencing' });
    try {
      await createShareManager(kc, { namespace: 'fencing', name: 'vol-default' });
      await createShareManager(kc, {
        namespace: 'fencing',
        name: 'vol-none',
        extra: { fence: { action: 'none' } },
      });
      const fencing = (name: string) =>
        eventually(`the Fencing condition of ${name}`, async () =>
          (await getShareManager(kc, 'fencing', name)).status?.conditions?.find((c) => c.type === 'Fencing'),
        );
      const byDefault = await fencing('vol-default');
      assert.equal(byDefault.status, 'True');
      assert.equal(byDefault.reason, 'FencePod');
      const none = await fencing('vol-none');
      assert.equal(none.status, 'False');
      assert.equal(none.reason, 'FenceDisabled');
      assert.match(none.message ?? '', /keeps running/);
      assert.ok(none.lastTransitionTime, 'stamped when set');
      const warned = await eventually('a FenceDisabled event', async () => {
        const list = (await eventsFor(kc, 'fencing', 'vol-none')).filter((e) => e.reason === 'FenceDisabled');
        return list.length > 0 ? list : undefined;
      });
      assert.equal(warned[0]?.type, 'Warning');
      const pod = (await podsOf(kc, 'fencing', 'vol-none'))[0];
      const env = pod?.spec?.initContainers?.[0]?.env ?? [];
      assert.equal(
        env.find((e) => e.name === 'LEASEHOLD_FENCE_ACTION')?.value,
        'none',
        'honoured as written',
      );
      const defaultPod = (await podsOf(kc, 'fencing', 'vol-default'))[0];
      assert.equal(
        defaultPod?.spec?.initContainers?.[0]?.env?.find((e) => e.name === 'LEASEHOLD_FENCE_ACTION')?.value,
        'pod',
      );
      await sleep(2_000); // further passes (status writes, pod events) must not repeat the event
      assert.equal(
        (await eventsFor(kc, 'fencing', 'vol-none')).filter((e) => e.reason === 'FenceDisabled').length,
        1,
        'one event per change, not per pass',
      );
    } finally {
      await manager.kill();
    }
  });

  it('observe-only: records what it would do and touches nothing', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'observe');
    const manager = startManager(cluster(), 'obs1', {
      LEASEHOLD_WATCH_NAMESPACE: 'observe',
      LEASEHOLD_OBSERVE_ONLY: 'true',
    });
    try {
      const { pod, holder } = await runningShare('observe', 'vol-o', 'node-1');
      await holder.stop();
      const events = await eventually(
        'a WouldFailOver event',
        async () => {
          const list = await eventsFor(kc, 'observe', 'vol-o');
          return list.some((e) => e.reason === 'WouldFailOver') ? list : undefined;
        },
        15_000,
      );
      assert.match(
        events.find((e) => e.reason === 'WouldFailOver')?.message ?? '',
        /observe-only: .*would mark it delinquent/,
      );
      await sleep(2 * D_MS);
      const lease = await readLease(kc, 'observe', 'vol-o');
      assert.equal(lease.delinquentSince, undefined, 'no mark');
      assert.equal(lease.holder, pod.metadata?.name);
      const pods = await podsOf(kc, 'observe', 'vol-o');
      assert.deepEqual(
        pods.map((p) => p.metadata?.uid),
        [pod.metadata?.uid],
        'the pod is untouched, no replacement',
      );
      assert.equal(
        (await eventsFor(kc, 'observe', 'vol-o')).filter((e) => e.reason === 'WouldFailOver').length,
        1,
        'recorded once',
      );
    } finally {
      await manager.kill();
    }
  });
});
