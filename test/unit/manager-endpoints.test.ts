import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1EndpointSlice, V1Pod, V1Service } from '@kubernetes/client-node';
import { fromWire } from '../../lib/lease-record.ts';
import { decideShareManager, fencingCondition } from '../../manager/reconciliation/decide-reconcile.ts';
import { serviceDrift } from '../../manager/reconciliation/service-spec.ts';
import {
  decideEndpoints,
  desiredEndpointSlice,
  endpointSliceName,
  isOwnEndpointSlice,
} from '../../manager/reconciliation/share-endpoints.ts';
import { resolveSpec, type ShareManager } from '../../manager/share-model/share-manager-spec.ts';

const nfs: ShareManager = {
  metadata: { name: 'vol', namespace: 'ns', uid: 'u', generation: 1 },
  spec: { volume: { pvc: 'pvc' } },
};
const userServer: ShareManager = {
  ...nfs,
  spec: { volume: { pvc: 'pvc' }, server: { image: 'img', ports: [{ name: 'web', containerPort: 8080 }] } },
};
const pod = (
  name: string,
  ip: string | undefined,
  opts: { phase?: string; ready?: boolean; deleted?: boolean } = {},
): V1Pod => ({
  metadata: {
    name,
    namespace: 'ns',
    uid: `${name}-uid`,
    labels: { 'leasehold.dev/share-manager': 'vol' },
    ...(opts.deleted ? { deletionTimestamp: new Date(0) } : {}),
  },
  spec: { containers: [], nodeName: 'n1' },
  status: {
    phase: opts.phase ?? 'Running',
    ...(ip ? { podIP: ip } : {}),
    conditions: [{ type: 'Ready', status: opts.ready ? 'True' : 'False' }],
  },
});
/** As the API server returns a written slice: a resourceVersion and a uid added. */
const stored = (slice: V1EndpointSlice | undefined): V1EndpointSlice => {
  assert.ok(slice);
  return { ...slice, metadata: { ...slice.metadata, resourceVersion: '3', uid: 'slice-uid' } };
};

test('the shipped server: every live pod with an address, ready or not, in name order; ended, deleted and address-less ones never', () => {
  const slice = desiredEndpointSlice(nfs, [
    pod('vol-b', '10.244.1.5'),
    pod('vol-a', '10.244.2.3', { ready: true }),
    pod('vol-c', undefined),
    pod('vol-d', '10.244.1.6', { phase: 'Failed' }),
    pod('vol-e', '10.244.1.7', { deleted: true }),
  ]);
  assert.ok(slice);
  assert.equal(slice.metadata?.name, endpointSliceName('vol'));
  assert.deepEqual(slice.metadata?.labels, {
    'kubernetes.io/service-name': 'vol',
    'endpointslice.kubernetes.io/managed-by': 'manager.leasehold.dev',
    'leasehold.dev/share-manager': 'vol',
  });
  assert.equal(slice.addressType, 'IPv4');
  assert.deepEqual(
    (slice.endpoints ?? []).map((e) => [e.addresses[0], e.targetRef?.name, e.conditions?.ready]),
    [
      ['10.244.2.3', 'vol-a', true],
      ['10.244.1.5', 'vol-b', true],
    ],
  );
  assert.deepEqual(
    slice.metadata?.ownerReferences?.map((o) => `${o.kind}/${o.name}/${o.uid}/${o.controller ?? false}`),
    ['Pod/vol-a/vol-a-uid/false', 'Pod/vol-b/vol-b-uid/false'],
    'owned by the pods it lists: the garbage collector removes it with the last',
  );
  assert.deepEqual(slice.ports, [{ name: 'nfs', port: 2049, protocol: 'TCP' }]);
  assert.ok(isOwnEndpointSlice(slice, nfs));
  assert.equal(
    isOwnEndpointSlice({ ...slice, metadata: { ...slice.metadata, name: 'vol-x7k2p' } }, nfs),
    false,
  );
});

test("a user's server: only Ready pods; its declared ports", () => {
  assert.equal(desiredEndpointSlice(userServer, [pod('vol-a', '10.244.1.5')]), undefined);
  const slice = desiredEndpointSlice(userServer, [pod('vol-a', '10.244.1.5', { ready: true })]);
  assert.deepEqual(slice?.ports, [{ name: 'web', port: 8080, protocol: 'TCP' }]);
});

test('an IPv6 pod gives an IPv6 slice', () => {
  assert.equal(desiredEndpointSlice(nfs, [pod('vol-a', 'fd00::5')])?.addressType, 'IPv6');
});

test('decideEndpoints: create, keep, replace on a new pod, delete when none may be published', () => {
  const a = [pod('vol-a', '10.244.1.5')];
  const created = decideEndpoints(nfs, a, undefined);
  assert.equal(created?.kind, 'applyEndpoints');
  assert.equal(created?.current, undefined);
  const have = stored(desiredEndpointSlice(nfs, a));
  assert.equal(decideEndpoints(nfs, a, have), undefined, 'in place: no write');
  // Failover: the lost pod force-deleted, the replacement with a new address.
  const b = [pod('vol-a', '10.244.1.5', { deleted: true }), pod('vol-b', '10.244.2.7')];
  const moved = decideEndpoints(nfs, b, have);
  assert.ok(moved?.kind === 'applyEndpoints');
  assert.equal(moved.current?.metadata?.resourceVersion, '3', 'a replace carries the cached version');
  assert.deepEqual(
    (moved.want.endpoints ?? []).map((e) => e.addresses[0]),
    ['10.244.2.7'],
  );
  const gone = decideEndpoints(nfs, [pod('vol-b', undefined)], have);
  assert.deepEqual(gone, { kind: 'deleteEndpoints', current: have });
  assert.equal(decideEndpoints(nfs, [], undefined), undefined);
  // A hand edit of what routing depends on is written back.
  const edited = stored(desiredEndpointSlice(nfs, a));
  edited.endpoints = [{ ...edited.endpoints?.[0], addresses: ['10.244.9.9'] }];
  assert.equal(decideEndpoints(nfs, a, edited)?.kind, 'applyEndpoints');
});

test("an upgrade: the previous release's selector goes only once the manager's slice is in place", () => {
  const resolved = resolveSpec(nfs.spec, {
    leaseDurationMs: 6000,
    renewIntervalMs: 2000,
    renewDeadlineMs: 4000,
    retryPeriodMs: 500,
  });
  assert.ok(resolved.ok);
  const service: V1Service = {
    metadata: { name: 'vol', namespace: 'ns', resourceVersion: '9' },
    spec: {
      clusterIP: '10.96.0.20',
      selector: { 'leasehold.dev/share-manager': 'vol' },
      publishNotReadyAddresses: true,
      ports: [{ name: 'nfs', port: 2049, targetPort: 2049 as unknown as string, protocol: 'TCP' }],
    },
  };
  const pods = [pod('vol-a', '10.244.1.5')];
  const kubernetesSlice: V1EndpointSlice = {
    metadata: {
      name: 'vol-x7k2p',
      namespace: 'ns',
      uid: 'k-uid',
      labels: {
        'kubernetes.io/service-name': 'vol',
        'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io',
        'leasehold.dev/share-manager': 'vol',
      },
    },
    addressType: 'IPv4',
    endpoints: [{ addresses: ['10.244.1.5'] }],
  };
  const snapshot = (endpointSlice: V1EndpointSlice | undefined, svc = service) =>
    decideShareManager({
      sm: { ...nfs, status: { conditions: [fencingCondition(resolved.fenceAction)] } },
      resolved,
      lease: fromWire({
        metadata: { namespace: 'ns', name: 'vol', resourceVersion: '5' },
        spec: { holderIdentity: 'vol-a', leaseDurationSeconds: 6 },
      }),
      service: svc,
      serviceDrift: serviceDrift(svc, nfs),
      endpointSlice,
      kubernetesSlices: [kubernetesSlice],
      legacyEndpointsMirrored: true,
      pods,
      now: 1000,
      podRequestSeenAt: undefined,
      podCreateTimeoutMs: 30_000,
      failoverRunning: false,
      newRequestId: 'r',
    }).map((a) => a.kind);
  const first = snapshot(undefined);
  assert.ok(first.includes('applyEndpoints'), JSON.stringify(first));
  assert.ok(!first.includes('repairService'), 'the selector stays while the slice is not written');
  assert.ok(!first.includes('deleteEndpoints'), "Kubernetes' slice stays while the selector does");
  const ours = stored(desiredEndpointSlice(nfs, pods));
  const next = snapshot(ours);
  assert.ok(!next.includes('applyEndpoints'));
  assert.ok(next.includes('repairService'), JSON.stringify(next));
  assert.ok(!next.includes('deleteEndpoints'), "Kubernetes' slice stays while the selector does");
  // The selector gone: Kubernetes' controller never updates its slice again, so it goes.
  const bare: V1Service = { ...service, spec: { ...service.spec, selector: undefined } };
  const last = snapshot(ours, bare);
  assert.deepEqual(
    last.filter((k) => k !== 'setStatus'),
    ['deleteEndpoints', 'deleteLegacyEndpoints'],
    JSON.stringify(last),
  );
  assert.ok(!next.includes('deleteLegacyEndpoints'), 'the v1 Endpoints stay while the selector does');
});
