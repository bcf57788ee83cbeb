import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { readNfsServerConfig } from '../../server/nfs-ganesha/config.ts';
import { decideRpcbind } from '../../server/nfs-ganesha/rpcbind.ts';

const config = (env: Record<string, string>) => readNfsServerConfig(env);

describe('nfs-ganesha rpcbind decision', () => {
  it('starts rpcbind only for NFSv3 in auto mode without a socket', () => {
    assert.deepEqual(decideRpcbind(config({ LEASEHOLD_NFS_VERSIONS: '3,4.1' }), false), { kind: 'start' });
  });

  it('never starts one without NFSv3, even without a socket', () => {
    assert.deepEqual(decideRpcbind(config({}), false), { kind: 'none', reason: 'no NFSv3' });
    assert.deepEqual(decideRpcbind(config({ LEASEHOLD_NFS_VERSIONS: '4.0,4.1,4.2' }), false), {
      kind: 'none',
      reason: 'no NFSv3',
    });
  });

  it("uses an rpcbind that is there already (a sidecar, a test rig's private one)", () => {
    assert.deepEqual(decideRpcbind(config({ LEASEHOLD_NFS_VERSIONS: '3' }), true), {
      kind: 'none',
      reason: 'rpcbind answers',
    });
  });

  it('never starts one when the user provides rpcbind', () => {
    assert.deepEqual(
      decideRpcbind(config({ LEASEHOLD_NFS_VERSIONS: '3', LEASEHOLD_NFS_RPCBIND: 'external' }), false),
      { kind: 'none', reason: 'LEASEHOLD_NFS_RPCBIND=external' },
    );
  });
});
