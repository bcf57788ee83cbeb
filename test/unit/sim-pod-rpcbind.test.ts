/** Which simulated pods get the sandbox's rpcbind: the server's own rule on its resolved env. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NFS_SERVER_SCRIPT } from '../../dev/sim/runtime/container-launch.ts';
import { podNeedsRpcbind } from '../../dev/sim/runtime/pod-rpcbind.ts';

const nfs = (env: Record<string, string>) => ({ kind: 'process', script: NFS_SERVER_SCRIPT, env });

test('an NFS server container with NFSv3 gets one; without 3, external, or bad settings not', () => {
  assert.equal(podNeedsRpcbind([nfs({ LEASEHOLD_NFS_VERSIONS: '3,4.1' })]), true);
  assert.equal(podNeedsRpcbind([nfs({})]), false, 'NFSv4 only by default');
  assert.equal(
    podNeedsRpcbind([nfs({ LEASEHOLD_NFS_VERSIONS: '3', LEASEHOLD_NFS_RPCBIND: 'external' })]),
    false,
  );
  assert.equal(podNeedsRpcbind([nfs({ LEASEHOLD_NFS_VERSIONS: '3', LEASEHOLD_NFS_PORT: 'x' })]), false);
});

test('only the NFS server image counts, in any container of the pod', () => {
  const other = { kind: 'process', script: 'dist/agent/main.js', env: { LEASEHOLD_NFS_VERSIONS: '3' } };
  assert.equal(podNeedsRpcbind([other]), false);
  assert.equal(podNeedsRpcbind([{ kind: 'error' }]), false);
  assert.equal(podNeedsRpcbind([other, nfs({ LEASEHOLD_NFS_VERSIONS: '3' })]), true);
});
