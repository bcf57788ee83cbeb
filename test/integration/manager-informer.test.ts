/**
 * lib/informer.ts against the real API server: a quiet watch is restarted and keeps
 * delivering; after an API server restart it comes back by itself (re-list on 410 or
 * resume) and reports a deletion made in etcd while no watch was possible.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { Informer, type RestartReason } from '../../lib/informer.ts';
import { eventually, useCluster } from '../support/cluster.ts';

const cluster = useCluster({ scheduler: false, controllerManager: false });

/** The etcd client URL of this test's cluster, read from its kube-apiserver's command line. */
function etcdUrl(clusterDir: string): string {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let cmdline = '';
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (!cmdline.includes(clusterDir) || !cmdline.includes('--etcd-servers=')) continue;
    const match = /--etcd-servers=([^\0,]+)/.exec(cmdline);
    if (match?.[1]) return match[1];
  }
  throw new Error(`no kube-apiserver of ${clusterDir} found`);
}

/** Deletes a key straight from etcd (as if changed while no API server was watching). */
async function deleteFromEtcd(etcd: string, key: string): Promise<void> {
  const res = await fetch(`${etcd}/v3/kv/deleterange`, {
    method: 'POST',
    body: JSON.stringify({ key: Buffer.from(key).toString('base64') }),
  });
  const text = await res.text();
  assert.equal(res.status, 200, text);
  assert.match(text, /"deleted":"1"/);
}

function lease(name: string): k8s.V1Lease {
  return { metadata: { name }, spec: { holderIdentity: 'x', leaseDurationSeconds: 6 } };
}

describe('informer', () => {
  it('restarts a watch that stays quiet too long, and still delivers afterwards', async () => {
    const kc = cluster().kubeConfig;
    await kc.makeApiClient(k8s.CoreV1Api).createNamespace({ body: { metadata: { name: 'quiet' } } });
    const seen: string[] = [];
    const reasons: RestartReason[] = [];
    const informer = new Informer<k8s.V1Lease>({
      resource: 'leases',
      kubeConfig: kc,
      path: '/apis/coordination.k8s.io/v1/namespaces/quiet/leases',
      quietTimeoutMs: 1000,
      backoff: { initialMs: 50, maxMs: 200 },
      onEvent: (type, l) => seen.push(`${type}:${l.metadata?.name}`),
      onDisconnected: (reason) => reasons.push(reason),
    });
    informer.start();
    try {
      await eventually('synced and healthy', async () =>
        informer.synced && informer.healthy ? true : undefined,
      );
      await sleep(3500);
      assert.ok(informer.restarts >= 2, `restarted ${informer.restarts} times`);
      assert.ok(reasons.length >= 2 && reasons.every((r) => r === 'quiet'), reasons.join(','));
      await kc
        .makeApiClient(k8s.CoordinationV1Api)
        .createNamespacedLease({ namespace: 'quiet', body: lease('after-quiet') });
      await eventually(
        'the new lease delivered',
        async () => (seen.includes('added:after-quiet') ? true : undefined),
        5000,
      );
      assert.equal(informer.get('quiet', 'after-quiet')?.spec?.holderIdentity, 'x');
    } finally {
      await informer.stop();
    }
  });

  it('comes back by itself after an API server restart and reports what changed meanwhile', async () => {
    const kc = cluster().kubeConfig;
    await kc.makeApiClient(k8s.CoreV1Api).createNamespace({ body: { metadata: { name: 'gone' } } });
    const api = kc.makeApiClient(k8s.CoordinationV1Api);
    for (const name of ['a', 'b', 'c'])
      await api.createNamespacedLease({ namespace: 'gone', body: lease(name) });
    const seen: string[] = [];
    const connects: string[] = [];
    const informer = new Informer<k8s.V1Lease>({
      resource: 'leases',
      kubeConfig: kc,
      path: '/apis/coordination.k8s.io/v1/namespaces/gone/leases',
      backoff: { initialMs: 50, maxMs: 500 },
      onEvent: (type, l) => seen.push(`${type}:${l.metadata?.name}`),
      onConnected: (kind) => connects.push(kind),
    });
    informer.start();
    try {
      await eventually('synced', async () => (informer.synced && informer.healthy ? true : undefined));
      assert.deepEqual(seen.sort(), ['added:a', 'added:b', 'added:c']);
      const etcd = etcdUrl(cluster().dir); // read from the API server's command line while it runs
      await cluster().stopApiServer();
      await eventually('the break noticed', async () => (informer.healthy ? undefined : true), 15_000);
      await deleteFromEtcd(etcd, '/registry/leases/gone/b');
      await sleep(1000);
      await cluster().startApiServer();
      await eventually('watching again', async () => (informer.healthy ? true : undefined), 20_000);
      await eventually(
        'the deletion made while blind',
        async () => (seen.includes('deleted:b') ? true : undefined),
        10_000,
      );
      assert.deepEqual(
        informer
          .list()
          .map((l) => l.metadata?.name)
          .sort(),
        ['a', 'c'],
      );
      assert.ok(informer.restarts >= 1);
      assert.equal(connects[0], 'relisted');
      assert.ok(connects.length >= 2, connects.join(','));
    } finally {
      await informer.stop();
    }
  });
});
