/**
 * Test seam for the clock-skew scenario: a MutatingAdmissionPolicy (real Kubernetes
 * admission, admissionregistration.k8s.io/v1) that puts the agent sidecar of one
 * ShareManager's pods under libfaketime: it appends LD_PRELOAD (libfaketimeMT) and
 * FAKETIME=<offset> to the env of initContainers[0] (the agent) of every pod created
 * with label leasehold.dev/share-manager=<share>. The simulated kubelet passes the
 * pod's env to the process, so that agent's wall clock (Date, TLS checks) runs
 * `offset` ahead or behind; its monotonic clock is left alone
 * (FAKETIME_DONT_FAKE_MONOTONIC=1), as on a real node with a wrong wall clock.
 */
import { existsSync } from 'node:fs';
import type { Cluster } from '../../dev/cluster/types.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { runTool } from '../support/tools.ts';

export const LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';

export function libfaketimeAvailable(): boolean {
  return existsSync(LIBFAKETIME);
}

function policyYaml(share: string, offset: string): string {
  const env = (name: string, value: string) =>
    `JSONPatch{op: "add", path: "/spec/initContainers/0/env/-", value: Object.spec.initContainers.env{name: "${name}", value: "${value}"}}`;
  return `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: e2e-faketime-${share}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [pods]
  matchConditions:
    - name: pod-of-${share}
      expression: >-
        has(object.metadata.labels) && 'leasehold.dev/share-manager' in object.metadata.labels &&
        object.metadata.labels['leasehold.dev/share-manager'] == '${share}' &&
        has(object.spec.initContainers) && size(object.spec.initContainers) > 0
  mutations:
    - patchType: JSONPatch
      jsonPatch:
        expression: >-
          [${env('LD_PRELOAD', LIBFAKETIME)}, ${env('FAKETIME', offset)}, ${env('FAKETIME_DONT_FAKE_MONOTONIC', '1')}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: e2e-faketime-${share}
spec:
  policyName: e2e-faketime-${share}
`;
}

/**
 * Applies the policy and its binding for `share` (offset as libfaketime takes it: "+10m",
 * "-10m") and resolves once the API server applies it: the API server loads admission
 * policies asynchronously, so a pod created right after the apply may go unmutated. The
 * proof is a server-side dry run of a pod of the share in `default` whose agent comes
 * back with FAKETIME=<offset> (admission runs on dry runs; nothing is stored).
 */
export async function skewAgentsOf(cluster: Cluster, share: string, offset: string): Promise<void> {
  const result = await runTool(
    cluster.kubectl,
    ['--kubeconfig', cluster.kubeconfigPath, 'apply', '-f', '-'],
    {
      input: policyYaml(share, offset),
    },
  );
  if (result.code !== 0)
    throw new Error(`applying the faketime policy for ${share} failed: ${result.stderr}`);
  const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const probe: k8s.V1Pod = {
    metadata: {
      generateName: `e2e-faketime-probe-${share}-`,
      labels: { 'leasehold.dev/share-manager': share },
    },
    spec: {
      automountServiceAccountToken: false,
      initContainers: [
        { name: 'agent', image: 'leasehold.dev/leasehold:dev', env: [{ name: 'PROBE', value: '1' }] },
      ],
      containers: [{ name: 'server', image: 'leasehold.dev/demo-share-server:dev' }],
    },
  };
  await eventually(
    `the faketime policy of ${share} applied by the API server`,
    async () => {
      const pod = await core.createNamespacedPod(
        { namespace: 'default', body: probe, dryRun: 'All' },
        withDeadline(5_000),
      );
      const env = pod.spec?.initContainers?.[0]?.env ?? [];
      return env.some((e) => e.name === 'FAKETIME' && e.value === offset) ? true : undefined;
    },
    30_000,
    100,
  );
}
