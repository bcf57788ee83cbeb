/**
 * spec.nfs: the shipped NFS server's settings on a ShareManager, checked by the server's
 * own rules and named by their spec field; passed to the server as its env vars; NFSv3
 * adds the MOUNT port to the server and the Service and changes the mount options.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { servicePorts } from '../../manager/reconciliation/service-spec.ts';
import { exportStatus, NFS_MOUNT_OPTIONS } from '../../manager/share-model/nfs-server-preset.ts';
import { sharePodFor } from '../../manager/share-model/pod-spec.ts';
import { resolveSpec, type ShareManager } from '../../manager/share-model/share-manager-spec.ts';
import { readNfsServerConfig } from '../../server/nfs-ganesha/config.ts';

const defaults = { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 };
const settings = {
  defaults,
  agentImage: 'leasehold.dev/leasehold:dev',
  agentPort: 8081,
  agentServiceAccount: undefined,
  nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
  nonFencingStorage: 'require-node-down' as const,
};
const share = (nfs: ShareManager['spec']['nfs']): ShareManager => ({
  metadata: { name: 'vol-n', namespace: 'storage', uid: 'uid-n', generation: 1 },
  spec: { volume: { pvc: 'data-n', mountPath: '/srv/share' }, nfs },
});

function serverEnv(sm: ShareManager): Record<string, string> {
  const built = sharePodFor(sm, settings, undefined, {});
  assert.ok(built.ok, built.ok ? '' : built.message);
  const server = built.pod.spec?.containers.find((c) => c.name === 'server');
  return Object.fromEntries((server?.env ?? []).map((e) => [e.name, e.value ?? '']));
}

test('spec.nfs reaches the server as its env vars, and the server reads them back as written', () => {
  const env = serverEnv(
    share({
      versions: ['4.2', '3'],
      gracePeriod: '20s',
      leaseLifetime: '8s',
      clients: ['10.0.0.0/8', 'host-a'],
      squash: 'root_squash',
    }),
  );
  assert.equal(env.LEASEHOLD_NFS_VERSIONS, '4.2,3');
  assert.equal(env.LEASEHOLD_NFS_MOUNT_PORT, '20048');
  const config = readNfsServerConfig(env);
  assert.deepEqual(config.versions, ['3', '4.2']);
  assert.equal(config.gracePeriodS, 20);
  assert.equal(config.leaseLifetimeS, 8);
  assert.deepEqual(config.clients, ['10.0.0.0/8', 'host-a']);
  assert.equal(config.squash, 'root_squash');
  assert.equal(config.exportPath, '/srv/share');
});

test('the server has no readiness probe: the pod is an endpoint as soon as ganesha starts', () => {
  const built = sharePodFor(share(undefined), settings, undefined, {});
  assert.ok(built.ok);
  const server = built.pod.spec?.containers.find((c) => c.name === 'server');
  assert.equal(server?.readinessProbe, undefined);
  assert.ok(server?.livenessProbe, 'the lease backstop stays');
});

test('without spec.nfs the server gets no setting of it (its own defaults: 4.1/4.2, grace 15 s, lease 10 s)', () => {
  const env = serverEnv(share(undefined));
  for (const name of ['LEASEHOLD_NFS_VERSIONS', 'LEASEHOLD_NFS_GRACE_PERIOD', 'LEASEHOLD_NFS_MOUNT_PORT'])
    assert.equal(env[name], undefined, name);
  const config = readNfsServerConfig(env);
  assert.deepEqual([config.versions, config.gracePeriodS, config.leaseLifetimeS], [['4.1', '4.2'], 15, 10]);
});

test('a setting the server would refuse is a spec error naming the spec field and the rule', () => {
  const short = resolveSpec(share({ gracePeriod: '5s' }).spec, defaults);
  assert.equal(short.ok, false);
  assert.match(short.ok ? '' : short.message, /spec\.nfs\.gracePeriod="5s".*must be at least/);
  const fractional = resolveSpec(share({ leaseLifetime: '1500ms' }).spec, defaults);
  assert.match(fractional.ok ? '' : fractional.message, /spec\.nfs\.leaseLifetime="1500ms".*whole seconds/);
  const badClient = resolveSpec(share({ clients: ['a b'] }).spec, defaults);
  assert.match(badClient.ok ? '' : badClient.message, /spec\.nfs\.clients=\["a b"\]/);
});

test('spec.nfs with a user server is refused: it would silently do nothing', () => {
  const sm = share({ versions: ['3'] });
  sm.spec.server = { image: 'example.com/my-nfs:1', ports: [{ containerPort: 2049 }] };
  const resolved = resolveSpec(sm.spec, defaults);
  assert.equal(resolved.ok, false);
  assert.match(resolved.ok ? '' : resolved.message, /spec\.nfs: applies only to the shipped NFS server/);
});

test('NFSv3 adds the MOUNT port to the Service; the mount options follow the highest version served', () => {
  assert.deepEqual(
    servicePorts(share(undefined)).map((p) => [p.name, p.port]),
    [['nfs', 2049]],
  );
  assert.deepEqual(
    servicePorts(share({ versions: ['3', '4.1'] })).map((p) => [p.name, p.port]),
    [
      ['nfs', 2049],
      ['nfs-mount', 20048],
    ],
  );
  const opts = (versions: ('3' | '4.0' | '4.1' | '4.2')[]) =>
    exportStatus('10.96.0.9', '/srv/share', { versions }).mountOptions;
  assert.equal(exportStatus('10.96.0.9', '/srv/share').mountOptions, NFS_MOUNT_OPTIONS);
  assert.match(opts(['3', '4.1']), /^nfsvers=4\.1,/);
  // 4.1 also when 4.2 is served (READ_PLUS after a failover: nfs-server-preset.ts); 4.2 only alone.
  assert.match(opts(['4.1', '4.2']), /^nfsvers=4\.1,/);
  assert.match(opts(['4.2']), /^nfsvers=4\.2,/);
  assert.match(opts(['4.0']), /^nfsvers=4\.0,/);
  const v3 = new Set(opts(['3']).split(','));
  for (const o of ['nfsvers=3', 'nolock', 'port=2049', 'mountport=20048', 'hard', 'mountproto=tcp'])
    assert.ok(v3.has(o), o);
});

test('NFSv3 adds KILL to the server (to stop its rpcbind, which runs as _rpc), and nothing else', () => {
  const capsOf = (nfs: ShareManager['spec']['nfs']) => {
    const built = sharePodFor(share(nfs), settings, undefined, {});
    assert.ok(built.ok, built.ok ? '' : built.message);
    return built.pod.spec?.containers.find((c) => c.name === 'server')?.securityContext?.capabilities;
  };
  const v4 = ['CHOWN', 'DAC_OVERRIDE', 'DAC_READ_SEARCH', 'FOWNER', 'FSETID', 'SETGID', 'SETUID'];
  assert.deepEqual(capsOf(undefined), { drop: ['ALL'], add: v4 });
  assert.deepEqual(capsOf({ versions: ['4.0', '4.1'] }), { drop: ['ALL'], add: v4 });
  assert.deepEqual(capsOf({ versions: ['3', '4.1'] }), { drop: ['ALL'], add: [...v4, 'KILL'].sort() });
  assert.ok(
    !capsOf({ versions: ['3'] })?.add?.includes('NET_BIND_SERVICE'),
    'rpcbind serves its socket without it',
  );
});
