/**
 * The simulated kubelet's pure translation of a container into a local process:
 * image -> entrypoint, downward-API env, $(VAR) expansion, port and path translation,
 * and the pod status it reports.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { podStatusPatch } from '../../dev/sim/kubelet/pod-status.ts';
import { CAPABILITIES } from '../../dev/sim/runtime/container-identity.ts';
import {
  expandVars,
  type LaunchContext,
  resolveLaunch,
  translatePaths,
  translatePorts,
} from '../../dev/sim/runtime/container-launch.ts';
import type { ContainerView } from '../../dev/sim/runtime/container-runner.ts';

const ctx: LaunchContext = {
  repoRoot: '/repo',
  nodePath: '/bin/node',
  podIP: '127.0.0.1',
  hostIP: '127.0.0.1',
  kubeconfigPath: '/sim/pods/u1/kubeconfig',
  ports: new Map([
    [8081, 41001],
    [8080, 41002],
  ]),
  mounts: new Map([['/export', '/sim/volumes/pv-a']]),
  basePath: '/usr/bin',
  hostCaps: CAPABILITIES,
  rootfsDir: '/sim/pods/u1/rootfs/c',
};

const pod: V1Pod = {
  metadata: { name: 'sm-a-x1', namespace: 'shares', uid: 'u1', labels: { app: 'share' } },
  spec: { nodeName: 'sim-2', serviceAccountName: 'agent', containers: [] },
};

test('the project image runs the agent or manager entrypoint chosen by args[0]', () => {
  const launch = resolveLaunch(
    pod,
    { name: 'agent', image: 'leasehold.dev/leasehold:dev', args: ['agent', '--x'] },
    ctx,
  );
  assert.equal(launch.kind, 'process');
  if (launch.kind !== 'process') return;
  assert.deepEqual(launch.args, ['/repo/dist/agent/main.js', '--x']);
  assert.equal(launch.command, '/bin/node');
  assert.equal(
    launch.env.LEASEHOLD_HTTP_PORT,
    '41001',
    'the unset port env gets the host port of the default 8081',
  );
  assert.equal(launch.env.HOSTNAME, 'sm-a-x1');
  assert.equal(launch.env.KUBECONFIG, '/sim/pods/u1/kubeconfig');
  const manager = resolveLaunch(
    pod,
    { name: 'm', image: 'leasehold.dev/leasehold:v2', args: ['manager'] },
    ctx,
  );
  assert.equal(manager.kind === 'process' && manager.script, 'dist/manager/main.js');
  const bad = resolveLaunch(pod, { name: 'm', image: 'leasehold.dev/leasehold:dev', args: ['server'] }, ctx);
  assert.equal(bad.kind, 'error');
  assert.match(bad.kind === 'error' ? bad.message : '', /args\[0\] must be "agent" or "manager".*"server"/);
});

test('an unknown image is an ErrImagePull naming the image', () => {
  const launch = resolveLaunch(pod, { name: 'x', image: 'nginx:1.27' }, ctx);
  assert.equal(launch.kind, 'error');
  assert.equal(launch.kind === 'error' && launch.reason, 'ErrImagePull');
  assert.match(launch.kind === 'error' ? launch.message : '', /"nginx:1\.27"/);
});

test('env: downward API fields resolve, $(VAR) expands, ports and mount paths translate', () => {
  const launch = resolveLaunch(
    pod,
    {
      name: 'server',
      image: 'leasehold.dev/demo-share-server:dev',
      args: ['--dir=/export/data', '--port=8080', '--id=$(POD)'],
      env: [
        { name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
        { name: 'NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
        { name: 'NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
        { name: 'IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
        { name: 'UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } },
        { name: 'SA', valueFrom: { fieldRef: { fieldPath: 'spec.serviceAccountName' } } },
        { name: 'APP', valueFrom: { fieldRef: { fieldPath: "metadata.labels['app']" } } },
        { name: 'CHECK', value: 'tcp://127.0.0.1:8080' },
        { name: 'EMPTY' },
      ],
    },
    ctx,
  );
  assert.equal(launch.kind, 'process');
  if (launch.kind !== 'process') return;
  assert.deepEqual(launch.args.slice(1), ['--dir=/sim/volumes/pv-a/data', '--port=41002', '--id=sm-a-x1']);
  const { POD, NS, NODE, IP, UID, SA, APP, CHECK, EMPTY } = launch.env;
  assert.deepEqual(
    { POD, NS, NODE, IP, UID, SA, APP, CHECK, EMPTY },
    {
      POD: 'sm-a-x1',
      NS: 'shares',
      NODE: 'sim-2',
      IP: '127.0.0.1',
      UID: 'u1',
      SA: 'agent',
      APP: 'share',
      CHECK: 'tcp://127.0.0.1:41002',
      EMPTY: '',
    },
  );
  assert.equal(launch.env.SHARE_SERVER_PORT, '41002');
});

test('an unsupported valueFrom is a CreateContainerConfigError naming the variable', () => {
  const launch = resolveLaunch(
    pod,
    {
      name: 's',
      image: 'leasehold.dev/demo-share-server:dev',
      env: [{ name: 'PASSWORD', valueFrom: { secretKeyRef: { name: 's', key: 'k' } } }],
    },
    ctx,
  );
  assert.equal(launch.kind === 'error' && launch.reason, 'CreateContainerConfigError');
  assert.match(launch.kind === 'error' ? launch.message : '', /env PASSWORD/);
});

test('translation rules: whole values, after = or :, never inside other numbers or paths', () => {
  const ports = new Map([[8080, 40000]]);
  assert.equal(translatePorts('8080', ports), '40000');
  assert.equal(translatePorts('http://127.0.0.1:8080/healthz', ports), 'http://127.0.0.1:40000/healthz');
  assert.equal(translatePorts('18080', ports), '18080');
  assert.equal(translatePorts('8080x', ports), '8080x');
  assert.equal(translatePorts('6s', ports), '6s');
  const mounts = new Map([
    ['/data', '/h/d'],
    ['/data/sub', '/h/s'],
  ]);
  assert.equal(translatePaths('/data/sub/x', mounts), '/h/s/x');
  assert.equal(translatePaths('--dir=/data', mounts), '--dir=/h/d');
  assert.equal(translatePaths('/database', mounts), '/database');
  assert.equal(expandVars('$(A)-$$(A)-$(B)', { A: 'x' }), 'x-$(A)-$(B)');
});

test('pod status: Ready only when every container is ready; conditions keep their transition time', () => {
  const view = (name: string, ready: boolean): ContainerView => ({
    name,
    image: 'i',
    phase: { kind: 'running', startedAt: new Date(0) },
    lastTerminated: undefined,
    restartCount: 0,
    started: true,
    ready,
    hostPid: 1,
  });
  const memory = new Map();
  const runtime = {
    podUid: 'u1',
    podIP: '127.0.0.1',
    hostIP: '127.0.0.1',
    startTime: new Date(0),
    phase: 'Running' as const,
    initialized: true,
    init: [view('agent', true)],
    main: [view('server', false)],
  };
  const first = podStatusPatch(runtime, new Date(1000), memory).status as {
    conditions: Array<{ type: string; status: string; lastTransitionTime: Date }>;
  };
  assert.equal(first.conditions.find((c) => c.type === 'Ready')?.status, 'False');
  const second = podStatusPatch({ ...runtime, main: [view('server', true)] }, new Date(2000), memory)
    .status as typeof first;
  const ready = second.conditions.find((c) => c.type === 'Ready');
  assert.equal(ready?.status, 'True');
  assert.equal(ready?.lastTransitionTime.getTime(), 2000);
  const third = podStatusPatch({ ...runtime, main: [view('server', true)] }, new Date(3000), memory)
    .status as typeof first;
  assert.equal(
    third.conditions.find((c) => c.type === 'Ready')?.lastTransitionTime.getTime(),
    2000,
    'unchanged: same transition time',
  );
  assert.equal(third.conditions.find((c) => c.type === 'Initialized')?.lastTransitionTime.getTime(), 1000);
});
