import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it, test } from 'node:test';
import { avoidanceFor, nodeHealth } from '../../manager/detection/node-health.ts';
import { exportStatus, NFS_MOUNT_OPTIONS } from '../../manager/share-model/nfs-server-preset.ts';
import type { NodeAvoidance, NodeAvoidances } from '../../manager/share-model/pod-spec.ts';
import {
  AGENT_RUNTIME_ENV,
  buildSharePod,
  isPodOfShare,
  sharePodFor,
} from '../../manager/share-model/pod-spec.ts';
import type { ShareManager } from '../../manager/share-model/share-manager-spec.ts';
import { resolveSpec } from '../../manager/share-model/share-manager-spec.ts';

const defaults = { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 };
const sm: ShareManager = {
  metadata: { name: 'vol-a', namespace: 'storage', uid: 'uid-1', generation: 1 },
  spec: {
    volume: { pvc: 'data-a' },
    server: {
      image: 'leasehold.dev/demo-share-server:dev',
      args: ['--dir', '/export'],
      ports: [{ containerPort: 2049 }],
    },
    lease: { duration: '8s', renewDeadline: '5s' },
    fence: { action: 'signal', process: 'share-server' },
    scheduling: { nodeSelector: { disk: 'ssd' } },
    serviceAccountName: 'share',
  },
};

function build(avoid?: NodeAvoidance | NodeAvoidances) {
  const resolved = resolveSpec(sm.spec, defaults);
  assert.ok(resolved.ok);
  return buildSharePod({
    sm,
    timings: resolved.timings,
    mountPath: resolved.mountPath,
    fenceAction: resolved.fenceAction,
    nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
    agentImage: 'leasehold.dev/leasehold:dev',
    agentPort: 8081,
    avoid,
    annotations: { 'leasehold.dev/pod-request': 'r1' },
  });
}

test("isPodOfShare: only the share's own pod (its label and its controller reference), so a failover deletes no other", () => {
  const pod = build();
  assert.equal(isPodOfShare(pod, 'vol-a', 'uid-1'), true);
  assert.equal(
    isPodOfShare(pod, 'vol-a'),
    true,
    'the ShareManager uid not known: label and owner name decide',
  );
  assert.equal(isPodOfShare(pod, 'vol-b'), false, "another share's pod");
  assert.equal(isPodOfShare(pod, 'vol-a', 'uid-2'), false, 'an earlier ShareManager of the same name');
  const relabelled = structuredClone(pod);
  relabelled.metadata = { ...relabelled.metadata, labels: { 'leasehold.dev/share-manager': 'vol-b' } };
  assert.equal(isPodOfShare(relabelled, 'vol-a'), false, 'label names another share');
  const orphan = structuredClone(pod);
  orphan.metadata = { ...orphan.metadata, ownerReferences: [] };
  assert.equal(isPodOfShare(orphan, 'vol-a'), false, 'no controller reference');
  const notController = structuredClone(pod);
  notController.metadata = {
    ...notController.metadata,
    ownerReferences: (pod.metadata?.ownerReferences ?? []).map((o) => ({ ...o, controller: false })),
  };
  assert.equal(isPodOfShare(notController, 'vol-a'), false, 'a reference that does not control it');
  const otherKind = structuredClone(pod);
  otherKind.metadata = {
    ...otherKind.metadata,
    ownerReferences: (pod.metadata?.ownerReferences ?? []).map((o) => ({
      ...o,
      kind: 'ReplicaSet',
      apiVersion: 'apps/v1',
    })),
  };
  assert.equal(isPodOfShare(otherKind, 'vol-a'), false, 'owned by something else of that name');
});

test('the pod: generateName, labels, owner, restartPolicy Never, agent as native sidecar', () => {
  const pod = build();
  assert.equal(pod.metadata?.generateName, 'vol-a-');
  assert.equal(pod.metadata?.name, undefined);
  assert.equal(pod.metadata?.namespace, 'storage');
  assert.equal(pod.metadata?.labels?.['leasehold.dev/share-manager'], 'vol-a');
  assert.equal(pod.metadata?.annotations?.['leasehold.dev/pod-request'], 'r1');
  assert.deepEqual(pod.metadata?.ownerReferences?.[0], {
    apiVersion: 'leasehold.dev/v1alpha1',
    kind: 'ShareManager',
    name: 'vol-a',
    uid: 'uid-1',
    controller: true,
    blockOwnerDeletion: true,
  });
  assert.equal(pod.spec?.restartPolicy, 'Never');
  assert.equal(pod.spec?.serviceAccountName, 'share');
  assert.deepEqual(pod.spec?.nodeSelector, { disk: 'ssd' });
  const agent = pod.spec?.initContainers?.[0];
  assert.equal(agent?.restartPolicy, 'Always');
  assert.deepEqual(agent?.args, ['agent']);
  assert.equal(agent?.image, 'leasehold.dev/leasehold:dev');
  assert.deepEqual(agent?.startupProbe?.httpGet, { path: '/readyz', port: 8081 });
  const server = pod.spec?.containers[0];
  assert.equal(server?.image, 'leasehold.dev/demo-share-server:dev');
  assert.deepEqual(server?.volumeMounts, [{ name: 'share', mountPath: '/export' }]);
  assert.deepEqual(pod.spec?.volumes, [{ name: 'share', persistentVolumeClaim: { claimName: 'data-a' } }]);
  assert.equal(pod.spec?.affinity, undefined);
});

test('agent env: spec timings over manager defaults, fence, downward API', () => {
  const env = Object.fromEntries(
    (build().spec?.initContainers?.[0]?.env ?? []).map((e) => [e.name, e.value ?? e.valueFrom]),
  );
  assert.equal(env.LEASEHOLD_LEASE_NAME, 'vol-a');
  assert.equal(env.LEASEHOLD_LEASE_DURATION, '8s');
  assert.equal(env.LEASEHOLD_RENEW_DEADLINE, '5s');
  assert.equal(env.LEASEHOLD_RENEW_INTERVAL, '2s');
  assert.equal(env.LEASEHOLD_RETRY_PERIOD, '500ms');
  assert.equal(env.LEASEHOLD_FENCE_ACTION, 'signal');
  assert.equal(env.LEASEHOLD_FENCE_PROCESS, 'share-server');
  assert.equal(env.LEASEHOLD_HTTP_PORT, '8081');
  assert.deepEqual(env.LEASEHOLD_POD_NAME, { fieldRef: { fieldPath: 'metadata.name' } });
  assert.deepEqual(env.LEASEHOLD_NODE_NAME, { fieldRef: { fieldPath: 'spec.nodeName' } });
  assert.deepEqual(env.LEASEHOLD_LEASE_NAMESPACE, { fieldRef: { fieldPath: 'metadata.namespace' } });
});

test("agent env: Node and glibc memory settings, on the agent only (the server's env is its own)", () => {
  const pod = build();
  const env = Object.fromEntries((pod.spec?.initContainers?.[0]?.env ?? []).map((e) => [e.name, e.value]));
  assert.equal(
    env.NODE_OPTIONS,
    '--jitless --max-semi-space-size=1 --v8-pool-size=1 --max-old-space-size=48',
  );
  assert.equal(env.MALLOC_ARENA_MAX, '1');
  const serverEnv = (pod.spec?.containers[0]?.env ?? []).map((e) => e.name);
  assert.ok(!serverEnv.includes('NODE_OPTIONS') && !serverEnv.includes('MALLOC_ARENA_MAX'));
});

test('agent env: this Node accepts NODE_OPTIONS and runs jitless with it', () => {
  const env = Object.fromEntries(AGENT_RUNTIME_ENV.map((e) => [e.name, e.value ?? '']));
  const run = spawnSync(process.execPath, ['-p', 'typeof WebAssembly'], { env, encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout.trim(), 'undefined', 'jitless: no WebAssembly');
});

test('node anti-affinity against the lost node, required or preferred', () => {
  const required = build({ node: 'node-1', mode: 'required' }).spec?.affinity?.nodeAffinity;
  assert.deepEqual(
    required?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms[0]?.matchFields,
    [{ key: 'metadata.name', operator: 'NotIn', values: ['node-1'] }],
  );
  const preferred = build({ node: 'node-1', mode: 'preferred' }).spec?.affinity?.nodeAffinity;
  assert.equal(preferred?.requiredDuringSchedulingIgnoredDuringExecution, undefined);
  assert.equal(preferred?.preferredDuringSchedulingIgnoredDuringExecution?.[0]?.weight, 100);
});

test('anti-affinity mode follows the lost node health in auto mode', () => {
  assert.deepEqual(avoidanceFor('auto', 'n1', 'unhealthy'), { node: 'n1', mode: 'required' });
  assert.deepEqual(avoidanceFor('auto', 'n1', 'unknown'), { node: 'n1', mode: 'required' });
  assert.deepEqual(avoidanceFor('auto', 'n1', 'healthy'), { node: 'n1', mode: 'preferred' });
  assert.deepEqual(avoidanceFor('preferred', 'n1', 'unhealthy'), { node: 'n1', mode: 'preferred' });
  assert.equal(avoidanceFor('none', 'n1', 'unhealthy'), undefined);
  assert.equal(avoidanceFor('auto', '', 'unhealthy'), undefined);
});

test('node health: Ready condition and heartbeat lease by our observation', () => {
  const ready = { status: { conditions: [{ type: 'Ready', status: 'True' }] } };
  const notReady = { status: { conditions: [{ type: 'Ready', status: 'Unknown' }] } };
  assert.equal(nodeHealth(undefined, undefined, 0, 40_000), 'unknown');
  assert.equal(nodeHealth(notReady, 0, 0, 40_000), 'unhealthy');
  assert.equal(nodeHealth(ready, 0, 40_000, 40_000), 'healthy');
  assert.equal(nodeHealth(ready, 0, 40_001, 40_000), 'unhealthy');
  assert.equal(nodeHealth(ready, undefined, 1e9, 40_000), 'healthy');
});

test('spec cross-field rule: clear message naming the fields', () => {
  const bad = resolveSpec({ ...sm.spec, lease: { duration: '3s' } }, defaults);
  assert.equal(bad.ok, false);
  assert.match(
    !bad.ok ? bad.message : '',
    /spec\.lease .*lease duration 3s > renew deadline 4s > renew interval 2s must hold/,
  );
  const fractional = resolveSpec({ ...sm.spec, lease: { duration: '6500ms' } }, defaults);
  assert.match(!fractional.ok ? fractional.message : '', /must be whole seconds/);
  const fence = resolveSpec({ ...sm.spec, fence: { action: 'command' } }, defaults);
  assert.match(!fence.ok ? fence.message : '', /spec\.fence\.command is required/);
});

test('the ServiceAccount: the spec names it, else the manager default, else the namespace default', () => {
  const resolved = resolveSpec(sm.spec, defaults);
  assert.ok(resolved.ok);
  const common = {
    timings: resolved.timings,
    mountPath: resolved.mountPath,
    fenceAction: resolved.fenceAction,
    nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
    agentImage: 'leasehold.dev/leasehold:dev',
    agentPort: 8081,
    avoid: undefined,
  };
  const unnamed = { ...sm, spec: { ...sm.spec, serviceAccountName: undefined } };
  assert.equal(
    buildSharePod({ ...common, sm, agentServiceAccount: 'leasehold-agent' }).spec?.serviceAccountName,
    'share',
  );
  assert.equal(
    buildSharePod({ ...common, sm: unnamed, agentServiceAccount: 'leasehold-agent' }).spec
      ?.serviceAccountName,
    'leasehold-agent',
  );
  assert.equal(buildSharePod({ ...common, sm: unnamed }).spec?.serviceAccountName, undefined);
});

test('no unfenced default: without spec.fence the agent fences the whole pod; none only when written', () => {
  const bare = { ...sm, spec: { ...sm.spec, fence: undefined } };
  const resolved = resolveSpec(bare.spec, defaults);
  assert.ok(resolved.ok);
  assert.equal(resolved.fenceAction, 'pod');
  const pod = buildSharePod({
    sm: bare,
    timings: resolved.timings,
    mountPath: resolved.mountPath,
    fenceAction: resolved.fenceAction,
    nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
    agentImage: 'leasehold.dev/leasehold:dev',
    agentPort: 8081,
    avoid: undefined,
  });
  const env = pod.spec?.initContainers?.[0]?.env ?? [];
  assert.equal(env.find((e) => e.name === 'LEASEHOLD_FENCE_ACTION')?.value, 'pod');
  const none = resolveSpec({ ...sm.spec, fence: { action: 'none' } }, defaults);
  assert.ok(none.ok);
  assert.equal(none.fenceAction, 'none');
});

test('the agent may signal a root server: uid 0, every capability dropped but KILL, read-only, no escalation', () => {
  const agent = build().spec?.initContainers?.[0];
  assert.deepEqual(agent?.securityContext, {
    runAsUser: 0,
    runAsGroup: 0,
    runAsNonRoot: false,
    allowPrivilegeEscalation: false,
    readOnlyRootFilesystem: true,
    capabilities: { drop: ['ALL'], add: ['KILL'] },
    seccompProfile: { type: 'RuntimeDefault' },
  });
});

test('the kubelet backstop: the server is live only while the agent proves the lease (/readyz), 1 s period, D - T of failures, 1 s grace', () => {
  // D = 8 s, T = 5 s in `sm`: 3 failures.
  const server = build().spec?.containers?.[0];
  assert.deepEqual(server?.livenessProbe, {
    httpGet: { path: '/readyz', port: 8081 },
    periodSeconds: 1,
    timeoutSeconds: 1,
    failureThreshold: 3,
    successThreshold: 1,
    terminationGracePeriodSeconds: 1,
  });
});

test('the backstop follows the share: 2 failures with the default D - T (2 s), 1 (the least) when D - T is under 2 s, whole seconds down', () => {
  const threshold = (lease: { duration: string; renewDeadline: string; renewInterval?: string }) => {
    const spec = { ...sm.spec, lease: { renewInterval: '500ms', retryPeriod: '100ms', ...lease } };
    const r = resolveSpec(spec, defaults);
    assert.ok(r.ok, r.ok ? '' : r.message);
    const pod = buildSharePod({
      sm: { ...sm, spec },
      timings: r.timings,
      mountPath: r.mountPath,
      fenceAction: r.fenceAction,
      nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
      agentImage: 'leasehold.dev/leasehold:dev',
      agentPort: 8081,
      avoid: undefined,
    });
    return pod.spec?.containers?.[0]?.livenessProbe?.failureThreshold;
  };
  assert.equal(threshold({ duration: '6s', renewDeadline: '4s' }), 2);
  assert.equal(threshold({ duration: '3s', renewDeadline: '1500ms', renewInterval: '1s' }), 1);
  assert.equal(threshold({ duration: '2s', renewDeadline: '1500ms', renewInterval: '1s' }), 1);
  assert.equal(threshold({ duration: '15s', renewDeadline: '10s' }), 5);
  assert.equal(threshold({ duration: '7s', renewDeadline: '3500ms' }), 3);
});

test('spec.fence.grace/timeout: passed to the agent, and held to grace < timeout < D - T', () => {
  // D = 8 s, T = 5 s in `sm`: the fence must end within 3 s.
  const ok = resolveSpec({ ...sm.spec, fence: { action: 'pod', grace: '1s', timeout: '2500ms' } }, defaults);
  assert.ok(ok.ok);
  const tooLong = resolveSpec({ ...sm.spec, fence: { timeout: '3s' } }, defaults);
  assert.ok(!tooLong.ok);
  assert.match(
    tooLong.message,
    /spec\.fence\.timeout=3s must be shorter than the lease duration minus the renew deadline \(3s\)/,
  );
  const graceTooLong = resolveSpec({ ...sm.spec, fence: { grace: '2s', timeout: '2s' } }, defaults);
  assert.ok(!graceTooLong.ok);
  assert.match(graceTooLong.message, /spec\.fence\.grace=2s must be shorter than spec\.fence\.timeout=2s/);
  const garbage = resolveSpec({ ...sm.spec, fence: { grace: 'soon' } }, defaults);
  assert.ok(!garbage.ok);
  assert.match(garbage.message, /spec\.fence\.grace="soon"/);
  const withFence = {
    ...sm,
    spec: { ...sm.spec, fence: { action: 'pod' as const, grace: '1s', timeout: '2500ms' } },
  };
  const pod = buildSharePod({
    sm: withFence,
    timings: ok.timings,
    mountPath: ok.mountPath,
    fenceAction: ok.fenceAction,
    nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
    agentImage: 'leasehold.dev/leasehold:dev',
    agentPort: 8081,
    avoid: undefined,
  });
  const env = pod.spec?.initContainers?.[0]?.env ?? [];
  assert.equal(env.find((e) => e.name === 'LEASEHOLD_FENCE_GRACE')?.value, '1s');
  assert.equal(env.find((e) => e.name === 'LEASEHOLD_FENCE_TIMEOUT')?.value, '2500ms');
});

describe('no spec.server: the shipped NFS server', () => {
  const nfsSm: ShareManager = {
    metadata: { name: 'vol-n', namespace: 'storage', uid: 'uid-n', generation: 1 },
    spec: { volume: { pvc: 'data-n', mountPath: '/srv/share' } },
  };
  const settings = {
    defaults,
    agentImage: 'leasehold.dev/leasehold:dev',
    agentPort: 8081,
    agentServiceAccount: undefined,
    nfsServerImage: 'registry.example/nfs-ganesha:1.2',
    nonFencingStorage: 'require-node-down' as const,
  };
  const podOf = (s: ShareManager) => {
    const built = sharePodFor(s, settings, undefined, {});
    assert.ok(built.ok, built.ok ? '' : built.message);
    return built.pod;
  };
  const agentEnvOf = (s: ShareManager) =>
    Object.fromEntries((podOf(s).spec?.initContainers?.[0]?.env ?? []).map((e) => [e.name, e.value]));

  it('the lease gate is the entrypoint: no startup probe on the agent, one on the server that arms its backstop', () => {
    const pod = podOf(nfsSm);
    const agent = pod.spec?.initContainers?.[0];
    assert.equal(agent?.startupProbe, undefined, 'the kubelet starts the server once the agent runs');
    assert.deepEqual(agent?.readinessProbe?.httpGet, { path: '/readyz', port: 8081 });
    const server = pod.spec?.containers[0];
    assert.equal(server?.env?.find((e) => e.name === 'LEASEHOLD_NFS_LEASE_GATE_PORT')?.value, '8081');
    assert.deepEqual(server?.startupProbe, {
      httpGet: { path: '/readyz', port: 8081 },
      periodSeconds: 1,
      failureThreshold: 630,
    });
    assert.deepEqual(server?.livenessProbe?.httpGet, { path: '/readyz', port: 8081 });
    // A user's server keeps the kubelet's gate on the agent and gets no gate env.
    const user = build();
    assert.deepEqual(user.spec?.initContainers?.[0]?.startupProbe, {
      httpGet: { path: '/readyz', port: 8081 },
      periodSeconds: 1,
      failureThreshold: 600,
    });
    assert.equal(user.spec?.containers[0]?.startupProbe, undefined);
    assert.ok(!user.spec?.containers[0]?.env?.some((e) => e.name === 'LEASEHOLD_NFS_LEASE_GATE_PORT'));
  });

  it('the server container: the manager image, 2049/TCP named nfs, the export at the mount path', () => {
    const pod = podOf(nfsSm);
    const server = pod.spec?.containers[0];
    assert.equal(server?.name, 'server');
    assert.equal(server?.image, 'registry.example/nfs-ganesha:1.2');
    assert.equal(server?.command, undefined, "the image's entrypoint runs");
    assert.deepEqual(server?.ports, [
      { name: 'nfs', containerPort: 2049, protocol: 'TCP' },
      { name: 'nfs-metrics', containerPort: 9587, protocol: 'TCP' },
    ]);
    assert.deepEqual(server?.env, [
      { name: 'LEASEHOLD_NFS_EXPORT_PATH', value: '/srv/share' },
      { name: 'LEASEHOLD_NFS_PSEUDO_PATH', value: '/srv/share' },
      { name: 'LEASEHOLD_NFS_PORT', value: '2049' },
      { name: 'LEASEHOLD_NFS_RUN_DIR', value: '/run/leasehold-nfs' },
      { name: 'LEASEHOLD_NFS_METRICS_PORT', value: '9587' },
      { name: 'LEASEHOLD_NFS_LEASE_GATE_PORT', value: '8081' },
      // D - T of the manager's defaults (6 s - 4 s): the entrypoint's watch tolerance.
      { name: 'LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE', value: '2s' },
    ]);
    assert.deepEqual(server?.volumeMounts, [
      { name: 'share', mountPath: '/srv/share' },
      { name: 'nfs-run', mountPath: '/run' },
      // ganesha's OFD-lock test needs a writable /tmp under the read-only root.
      { name: 'nfs-run', mountPath: '/tmp', subPath: 'tmp' },
    ]);
    assert.deepEqual(pod.spec?.volumes, [
      { name: 'share', persistentVolumeClaim: { claimName: 'data-n' } },
      { name: 'nfs-run', emptyDir: { medium: 'Memory', sizeLimit: '16Mi' } },
    ]);
    assert.deepEqual(server?.livenessProbe?.httpGet, { path: '/readyz', port: 8081 }, 'the backstop too');
  });

  it('securityContext: root with only the VFS FSAL capabilities, read-only root, no escalation', () => {
    assert.deepEqual(podOf(nfsSm).spec?.containers[0]?.securityContext, {
      runAsUser: 0,
      runAsGroup: 0,
      runAsNonRoot: false,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: {
        drop: ['ALL'],
        add: ['CHOWN', 'DAC_OVERRIDE', 'DAC_READ_SEARCH', 'FOWNER', 'FSETID', 'SETGID', 'SETUID'],
      },
      seccompProfile: { type: 'RuntimeDefault' },
    });
  });

  it("the agent takes a silent holder's lease on its own only under nonFencingStorage lease-only (issue 27 item 1)", () => {
    assert.equal(
      agentEnvOf(nfsSm).LEASEHOLD_TAKE_EXPIRED,
      'false',
      'require-node-down: left to the gated failover',
    );
    const leaseOnly = sharePodFor(nfsSm, { ...settings, nonFencingStorage: 'lease-only' }, undefined, {});
    assert.ok(leaseOnly.ok);
    const env = Object.fromEntries(
      (leaseOnly.pod.spec?.initContainers?.[0]?.env ?? []).map((e) => [e.name, e.value]),
    );
    assert.equal(env.LEASEHOLD_TAKE_EXPIRED, 'true');
  });

  it("the manager's witness set goes to the agent as LEASEHOLD_WITNESSES; none: not set (issue 28)", () => {
    assert.equal(agentEnvOf(nfsSm).LEASEHOLD_WITNESSES, undefined);
    const witnesses = [
      { name: 'a', url: 'http://10.0.0.1:8090' },
      { name: 'b', url: 'http://10.0.0.2:8090' },
      { name: 'c', url: 'http://10.0.0.3:8090' },
    ];
    const built = sharePodFor(nfsSm, { ...settings, witnesses }, undefined, {});
    assert.ok(built.ok);
    const env = Object.fromEntries(
      (built.pod.spec?.initContainers?.[0]?.env ?? []).map((e) => [e.name, e.value]),
    );
    assert.equal(
      env.LEASEHOLD_WITNESSES,
      'a=http://10.0.0.1:8090,b=http://10.0.0.2:8090,c=http://10.0.0.3:8090',
    );
  });

  it('the agent: pod fence, server check tcp://127.0.0.1:2049 with a timeout below T - R', () => {
    const env = agentEnvOf(nfsSm);
    assert.equal(env.LEASEHOLD_FENCE_ACTION, 'pod');
    assert.equal(env.LEASEHOLD_SERVER_CHECK, 'tcp://127.0.0.1:2049');
    assert.equal(env.LEASEHOLD_SERVER_CHECK_TIMEOUT, '1s', 'T - R = 2s: 1 s');
    assert.equal(env.LEASEHOLD_SERVER_CHECK_FAILURES, undefined, "the agent's default (3)");
    const fast = agentEnvOf({
      ...nfsSm,
      spec: { ...nfsSm.spec, lease: { duration: '3s', renewInterval: '1s', renewDeadline: '2s' } },
    });
    assert.equal(
      fast.LEASEHOLD_SERVER_CHECK_TIMEOUT,
      '500ms',
      'T - R = 1s: half of it (the agent needs < T - R)',
    );
  });

  it("the user's spec.serverCheck and spec.fence win over the presets", () => {
    const env = agentEnvOf({
      ...nfsSm,
      spec: {
        ...nfsSm.spec,
        serverCheck: { target: 'tcp://127.0.0.1:12049', failures: 5 },
        fence: { action: 'signal', process: 'ganesha.nfsd', signal: 'SIGKILL' },
      },
    });
    assert.equal(env.LEASEHOLD_SERVER_CHECK, 'tcp://127.0.0.1:12049');
    assert.equal(env.LEASEHOLD_SERVER_CHECK_TIMEOUT, undefined);
    assert.equal(env.LEASEHOLD_SERVER_CHECK_FAILURES, '5');
    assert.equal(env.LEASEHOLD_FENCE_ACTION, 'signal');
    assert.equal(env.LEASEHOLD_FENCE_PROCESS, 'ganesha.nfsd');
  });

  it('the default mount path /export; a path the server refuses is a spec error naming the field', () => {
    const plain = podOf({ ...nfsSm, spec: { volume: { pvc: 'data-n' } } });
    assert.equal(
      plain.spec?.containers[0]?.env?.find((e) => e.name === 'LEASEHOLD_NFS_EXPORT_PATH')?.value,
      '/export',
    );
    const root = resolveSpec({ volume: { pvc: 'data-n', mountPath: '/' } }, defaults);
    assert.ok(!root.ok);
    assert.match(
      root.message,
      /spec\.volume\.mountPath="\/": the shipped NFS server \(no spec\.server\) refuses it: LEASEHOLD_NFS_PSEUDO_PATH="\/": must not be the pseudo root/,
    );
    const spaced = resolveSpec({ volume: { pvc: 'data-n', mountPath: '/my share' } }, defaults);
    assert.ok(!spaced.ok);
    assert.match(spaced.message, /spec\.volume\.mountPath="\/my share": .*LEASEHOLD_NFS_EXPORT_PATH/);
    // The same path is fine for a user's own server: its rules are not ours.
    assert.ok(resolveSpec({ ...sm.spec, volume: { pvc: 'data-a', mountPath: '/' } }, defaults).ok);
  });

  it("a user's own server is used exactly as written: no NFS env, check, run volume or security preset", () => {
    const pod = build();
    const server = pod.spec?.containers[0];
    assert.deepEqual(server?.args, ['--dir', '/export']);
    assert.deepEqual(server?.ports, [{ containerPort: 2049 }]);
    assert.deepEqual(server?.env, []);
    assert.equal(server?.securityContext, undefined);
    assert.equal(pod.spec?.volumes?.length, 1);
    const env = (pod.spec?.initContainers?.[0]?.env ?? []).map((e) => e.name);
    assert.ok(!env.includes('LEASEHOLD_SERVER_CHECK'));
  });
});

describe('status.export and the mount options', () => {
  it('ip:/path, [ip]:/path for IPv6, port 2049, the recommended options', () => {
    assert.deepEqual(exportStatus('10.96.0.20', '/export'), {
      clusterIP: '10.96.0.20',
      port: 2049,
      path: '/export',
      source: '10.96.0.20:/export',
      mountOptions: 'nfsvers=4.1,proto=tcp,hard,timeo=20,retrans=2,noresvport',
    });
    assert.equal(exportStatus('fd00:10:96::1', '/srv/share').source, '[fd00:10:96::1]:/srv/share');
  });

  it('the options are hard mounts over NFSv4.1/TCP (a soft mount would fail writes during a failover)', () => {
    const options = new Set(NFS_MOUNT_OPTIONS.split(','));
    for (const o of ['hard', 'nfsvers=4.1', 'proto=tcp', 'noresvport']) assert.ok(options.has(o), o);
    assert.ok(!options.has('soft'));
  });
});

test('the pod is a Service endpoint soon after the agent holds the lease: agent readiness every 1 s', () => {
  const pod = build();
  const agent = pod.spec?.initContainers?.find((c) => c.name === 'agent');
  assert.deepEqual(agent?.readinessProbe?.httpGet?.path, '/readyz');
  assert.equal(agent?.readinessProbe?.periodSeconds, 1);
});

test('after a lost replacement the next pod avoids every lost node, each with its own mode', () => {
  const affinity = build([
    { node: 'sim-2', mode: 'required' },
    { node: 'sim-1', mode: 'required' },
    { node: 'sim-3', mode: 'preferred' },
    { node: 'sim-1', mode: 'preferred' },
  ]).spec?.affinity?.nodeAffinity;
  // One value per metadata.name requirement (the API rejects more): ANDed in one term.
  assert.deepEqual(affinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms, [
    {
      matchFields: [
        { key: 'metadata.name', operator: 'NotIn', values: ['sim-2'] },
        { key: 'metadata.name', operator: 'NotIn', values: ['sim-1'] },
      ],
    },
  ]);
  // A node required once is not also preferred.
  assert.deepEqual(affinity?.preferredDuringSchedulingIgnoredDuringExecution, [
    {
      weight: 100,
      preference: { matchFields: [{ key: 'metadata.name', operator: 'NotIn', values: ['sim-3'] }] },
    },
  ]);
  assert.equal(build([]).spec?.affinity, undefined);
});

describe('placement and resources from the spec (issue 26)', () => {
  const withPlacement = (avoid?: NodeAvoidance) => {
    const spec = {
      ...sm.spec,
      scheduling: {
        priorityClassName: 'storage-critical',
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [
                { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }] },
                { matchExpressions: [{ key: 'zone', operator: 'In', values: ['b'] }] },
              ],
            },
            preferredDuringSchedulingIgnoredDuringExecution: [
              {
                weight: 10,
                preference: { matchExpressions: [{ key: 'disk', operator: 'In', values: ['ssd'] }] },
              },
            ],
          },
          podAntiAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [] },
        },
      },
      resources: {
        server: { requests: { memory: '64Mi' }, limits: { memory: '1Gi' } },
        agent: { requests: { cpu: '10m' } },
      },
    };
    const resolved = resolveSpec(spec, defaults);
    assert.ok(resolved.ok);
    return buildSharePod({
      sm: { ...sm, spec },
      timings: resolved.timings,
      mountPath: resolved.mountPath,
      fenceAction: resolved.fenceAction,
      nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
      agentImage: 'leasehold.dev/leasehold:dev',
      agentPort: 8081,
      avoid,
    });
  };

  it('priorityClassName, the affinity as written and each container its resources', () => {
    const pod = withPlacement();
    assert.equal(pod.spec?.priorityClassName, 'storage-critical');
    assert.deepEqual(pod.spec?.affinity?.podAntiAffinity, {
      preferredDuringSchedulingIgnoredDuringExecution: [],
    });
    assert.equal(
      pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms
        .length,
      2,
    );
    assert.deepEqual(pod.spec?.containers[0]?.resources, {
      requests: { memory: '64Mi' },
      limits: { memory: '1Gi' },
    });
    assert.deepEqual(pod.spec?.initContainers?.[0]?.resources, { requests: { cpu: '10m' } });
  });

  it("after a failover the lost node is excluded from each of the user's required terms and avoided among the preferences", () => {
    const required = withPlacement({ node: 'node-1', mode: 'required' });
    const notOn = { key: 'metadata.name', operator: 'NotIn', values: ['node-1'] };
    assert.deepEqual(
      required.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution
        ?.nodeSelectorTerms,
      [
        { matchExpressions: [{ key: 'zone', operator: 'In', values: ['a'] }], matchFields: [notOn] },
        { matchExpressions: [{ key: 'zone', operator: 'In', values: ['b'] }], matchFields: [notOn] },
      ],
    );
    const preferred = withPlacement({ node: 'node-1', mode: 'preferred' });
    const prefs =
      preferred.spec?.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution ?? [];
    assert.equal(prefs.length, 2, 'the user preference and the avoidance');
    assert.deepEqual(prefs[1]?.preference, { matchFields: [notOn] });
    assert.equal(
      preferred.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution
        ?.nodeSelectorTerms.length,
      2,
      "the user's required terms kept as written",
    );
  });
});
