import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../lib/errors.ts';
import { readManagerConfig } from '../../manager/config.ts';

const base = { LEASEHOLD_POD_NAME: 'manager-x1', LEASEHOLD_NODE_NAME: 'node-1' };

test('defaults', () => {
  const c = readManagerConfig(base);
  assert.equal(c.identity, 'manager-x1');
  assert.deepEqual(c.defaults, {
    leaseDurationMs: 6000,
    renewIntervalMs: 2000,
    renewDeadlineMs: 4000,
    retryPeriodMs: 500,
  });
  assert.equal(c.httpPort, 8090);
  assert.equal(c.fastFailover, true);
  assert.equal(c.observeOnly, false);
  assert.equal(c.antiAffinity, 'auto');
  assert.equal(c.agentImage, 'leasehold.dev/leasehold:dev');
  assert.equal(c.namespace, undefined);
  assert.equal(c.agentServiceAccount, undefined);
});

test('every problem is reported at once, naming the variable, value and rule', () => {
  try {
    readManagerConfig({
      LEASEHOLD_NODE_NAME: 'Bad_Node',
      LEASEHOLD_ANTI_AFFINITY: 'sometimes',
      LEASEHOLD_STORM_THRESHOLD: '2',
      LEASEHOLD_AGENT_SERVICE_ACCOUNT: 'Agent!',
    });
    assert.fail('expected a ConfigError');
  } catch (err) {
    assert.ok(err instanceof ConfigError);
    assert.equal(err.problems.length, 5);
    assert.match(err.message, /LEASEHOLD_AGENT_SERVICE_ACCOUNT="Agent!": must be a Kubernetes object name/);
    assert.match(err.message, /LEASEHOLD_POD_NAME is not set/);
    assert.match(err.message, /LEASEHOLD_NODE_NAME="Bad_Node": must be a Kubernetes object name/);
    assert.match(
      err.message,
      /LEASEHOLD_ANTI_AFFINITY="sometimes": must be one of auto, required, preferred, none/,
    );
    assert.match(err.message, /LEASEHOLD_STORM_THRESHOLD="2": must be a number from 0 to 1/);
  }
});

test('the timing order D > T > R is enforced', () => {
  assert.throws(
    () => readManagerConfig({ ...base, LEASEHOLD_LEASE_DURATION: '3s' }),
    /lease duration 3s > renew deadline 4s > renew interval 2s must hold/,
  );
  assert.throws(
    () => readManagerConfig({ ...base, LEASEHOLD_RENEW_DEADLINE: '2200ms', LEASEHOLD_RETRY_PERIOD: '500ms' }),
    /must leave at least one retry period 500ms/,
  );
});

test('settings parse', () => {
  const c = readManagerConfig({
    ...base,
    LEASEHOLD_OBSERVE_ONLY: 'true',
    LEASEHOLD_WATCH_NAMESPACE: 'storage',
    LEASEHOLD_MAX_CONCURRENT_FAILOVERS: '3',
    LEASEHOLD_FAILOVER_TAKEOVER_TIMEOUT: '5s',
    LEASEHOLD_HTTP_PORT: '0',
    LEASEHOLD_AGENT_SERVICE_ACCOUNT: 'leasehold-agent',
  });
  assert.equal(c.agentServiceAccount, 'leasehold-agent');
  assert.equal(c.observeOnly, true);
  assert.equal(c.namespace, 'storage');
  assert.equal(c.maxConcurrentFailovers, 3);
  assert.equal(c.takeoverTimeoutMs, 5000);
  assert.equal(c.httpPort, 0);
});

test('LEASEHOLD_NFS_SERVER_IMAGE: the shipped NFS server image, defaulted; a reference with spaces is refused', () => {
  assert.equal(readManagerConfig(base).nfsServerImage, 'leasehold.dev/nfs-ganesha:dev');
  assert.equal(
    readManagerConfig({ ...base, LEASEHOLD_NFS_SERVER_IMAGE: 'registry.example/nfs-ganesha:1.2' })
      .nfsServerImage,
    'registry.example/nfs-ganesha:1.2',
  );
  assert.throws(
    () => readManagerConfig({ ...base, LEASEHOLD_NFS_SERVER_IMAGE: 'nfs ganesha' }),
    /LEASEHOLD_NFS_SERVER_IMAGE="nfs ganesha": must be an image reference/,
  );
});

test('volume handoff: volumes-in-use by default, the other modes by name; the replaced variable refused', () => {
  assert.equal(readManagerConfig(base).volumeHandoff, 'volumes-in-use');
  assert.equal(
    readManagerConfig({ ...base, LEASEHOLD_VOLUME_HANDOFF: 'volume-attachment' }).volumeHandoff,
    'volume-attachment',
  );
  assert.throws(
    () => readManagerConfig({ ...base, LEASEHOLD_VOLUME_HANDOFF: 'taint' }),
    /LEASEHOLD_VOLUME_HANDOFF="taint": must be one of volumes-in-use, volume-attachment, none/,
  );
  assert.throws(
    () => readManagerConfig({ ...base, LEASEHOLD_VOLUME_ATTACHMENT_CLEANUP: 'true' }),
    /LEASEHOLD_VOLUME_ATTACHMENT_CLEANUP=true: replaced by LEASEHOLD_VOLUME_HANDOFF/,
  );
});

test('kubelet unmount timeout: 30 s by default, 0 turns the check off, under 5 s refused naming the rule', () => {
  assert.equal(readManagerConfig(base).kubeletUnmountTimeoutMs, 30_000);
  assert.equal(
    readManagerConfig({ ...base, LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT: '0' }).kubeletUnmountTimeoutMs,
    0,
  );
  assert.equal(
    readManagerConfig({ ...base, LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT: '2m' }).kubeletUnmountTimeoutMs,
    120_000,
  );
  assert.throws(
    () => readManagerConfig({ ...base, LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT: '3s' }),
    /LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT=3s: must be 0 \(never\) or from 5s to 60m/,
  );
});

test('witnesses: off by default; a set of three; fewer refused, naming the variable (issue 28)', () => {
  const c = readManagerConfig(base);
  assert.deepEqual(c.witnesses, []);
  assert.deepEqual(c.witness, { maxHoldMs: 12_000, apiLostAfterMs: 1000 }, 'max hold: 2 D by default');
  const on = readManagerConfig({
    ...base,
    LEASEHOLD_WITNESSES: 'n1=http://10.0.0.1:8090,n2=http://10.0.0.2:8090,n3=http://10.0.0.3:8090',
  });
  assert.deepEqual(
    on.witnesses.map((w) => w.name),
    ['n1', 'n2', 'n3'],
  );
  assert.throws(
    () => readManagerConfig({ ...base, LEASEHOLD_WITNESSES: 'n1=http://10.0.0.1:8090' }),
    (err: unknown) => err instanceof ConfigError && /LEASEHOLD_WITNESSES=.*at least 3/.test(err.message),
  );
});

test('witness nodes: at least 3 distinct, not with an explicit list, not with port 0 (issue 28)', () => {
  assert.deepEqual(readManagerConfig({ ...base, LEASEHOLD_WITNESS_NODES: 'n1, n2,n3' }).witnessNodes, [
    'n1',
    'n2',
    'n3',
  ]);
  const refused = (env: Record<string, string>, rule: RegExp) =>
    assert.throws(
      () => readManagerConfig({ ...base, ...env }),
      (err: unknown) => err instanceof ConfigError && rule.test(err.message),
    );
  refused({ LEASEHOLD_WITNESS_NODES: 'n1,n2' }, /LEASEHOLD_WITNESS_NODES="n1,n2": at least 3 distinct/);
  refused({ LEASEHOLD_WITNESS_NODES: 'n1,n1,n2' }, /at least 3 distinct/);
  refused(
    {
      LEASEHOLD_WITNESS_NODES: 'n1,n2,n3',
      LEASEHOLD_WITNESSES: 'n1=http://10.0.0.1:8090,n2=http://10.0.0.2:8090,n3=http://10.0.0.3:8090',
    },
    /both set/,
  );
  refused({ LEASEHOLD_WITNESS_NODES: 'n1,n2,n3', LEASEHOLD_HTTP_PORT: '0' }, /fixed LEASEHOLD_HTTP_PORT/);
});
