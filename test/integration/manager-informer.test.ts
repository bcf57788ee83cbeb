/**
 * lib/informer.ts against the real API server: a quiet watch is restarted and keeps
 * delivering; after an API server restart it comes back by itself (re-list on 410 or
 * resume) and reports a deletion made in etcd while no watch was possible; the
 * manager's LeaseMonitor fed by it judges a holder that stops right after a routine
 * re-watch D after its last renewal (manager/detection/watch-continuity.ts), where the
 * old reset-on-every-re-watch rule is blind while re-watches come faster than D.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { sleep, systemClock } from '../../lib/clock.ts';
import { type ConnectKind, Informer, type RestartReason } from '../../lib/informer.ts';
import type { Logger } from '../../lib/logger.ts';
import { LeaseMonitor } from '../../manager/detection/lease-monitor.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import { HolderLoop } from './manager-holder-loop.ts';

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

  it('a holder stopping right after a routine re-watch is judged D after its last renewal', async (t) => {
    const kc = cluster().kubeConfig;
    await kc.makeApiClient(k8s.CoreV1Api).createNamespace({ body: { metadata: { name: 'rewatch' } } });
    const D = 6000; // longer than the 2-3 s watches: the old rule never gets D of one watch
    const silent = { warn: () => {}, info: () => {}, debug: () => {}, error: () => {} } as unknown as Logger;
    const verdictAt: { kept?: number; old?: number } = {};
    let holderStopped = false;
    const early: string[] = [];
    const monitorFor = (rule: 'kept' | 'old') =>
      new LeaseMonitor(
        systemClock,
        () => D,
        {
          onStale: (v) => {
            if (!holderStopped) early.push(`${rule}: ${v.key} stale while renewing`);
            verdictAt[rule] ??= Date.now(); // wall ms, as HolderLoop.lastRenewalAt
          },
          onLeaseChange: () => {},
          onLeaseGone: () => {},
        },
        silent,
        rule === 'old' ? { maxGapMs: 0 } : undefined, // 0: reset on every re-watch (the old rule)
      );
    const monitors = [monitorFor('kept'), monitorFor('old')];
    const connects: { at: number; kind: ConnectKind }[] = [];
    const reasons: RestartReason[] = [];
    const informer = new Informer<k8s.V1Lease>({
      resource: 'leases',
      kubeConfig: kc,
      path: '/apis/coordination.k8s.io/v1/namespaces/rewatch/leases',
      watchTimeout: { minSeconds: 2, maxSeconds: 3 },
      onEvent: (type, l) => {
        for (const m of monitors)
          if (type === 'deleted') m.leaseDeleted(l.metadata?.namespace ?? '', l.metadata?.name ?? '');
          else m.leaseSeen(l);
      },
      onConnected: (kind) => {
        connects.push({ at: Date.now(), kind });
        for (const m of monitors) m.watchConnected(kind);
      },
      onDisconnected: (reason) => {
        reasons.push(reason);
        for (const m of monitors) m.watchDisconnected(reason);
      },
    });
    const holder = new HolderLoop(kc, 'rewatch', 'share', 'pod-a', 'node-a', 500, 0, D / 1000).start();
    informer.start();
    try {
      await eventually('the held lease observed', async () =>
        monitors[0]?.observation('rewatch/share')?.lease.holder === 'pod-a' ? true : undefined,
      );
      const before = connects.length;
      await eventually('a routine re-watch', async () => (connects.length > before ? true : undefined), 6000);
      await holder.stop(); // right after the re-watch
      holderStopped = true;
      const last = holder.lastRenewalAt;
      await eventually('the verdict', async () => verdictAt.kept, D + 6000);
      const kept = (verdictAt.kept ?? 0) - last;
      await sleep(Math.max(0, last + D + 2000 - Date.now()));
      const old = verdictAt.old === undefined ? undefined : verdictAt.old - last;
      const rewatches = connects.filter((c) => c.at > last && c.at < (verdictAt.kept ?? 0)).length;
      t.diagnostic(
        `verdict ${kept} ms after the last renewal (D ${D}); old rule: ${old === undefined ? 'none' : `${old} ms`}; ` +
          `${rewatches} re-watches in between; connects ${connects.map((c) => c.kind).join(',')}`,
      );
      assert.deepEqual(early, [], `the holder lapsed under load: ${JSON.stringify(holder.lapses)}`);
      assert.ok(rewatches >= 1, 'a re-watch came between the last renewal and the verdict');
      assert.ok(
        reasons.every((r) => r === 'ended') && connects.slice(1).every((c) => c.kind === 'resumed'),
        `routine re-watches only: ${reasons.join(',')}`,
      );
      assert.ok(kept >= D - 250 && kept <= D + 1500, `verdict ${kept} ms after the last renewal`);
      assert.ok(old === undefined || old > D + 1500, `the old rule judged ${old} ms after it`);
    } finally {
      await holder.stop();
      await informer.stop();
      for (const m of monitors) m.stop();
    }
  });
});
