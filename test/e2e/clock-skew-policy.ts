/**
 * Test seam for the clock-skew scenario on real nodes: a MutatingAdmissionPolicy (real
 * Kubernetes admission, admissionregistration.k8s.io/v1) that puts the agent sidecar of
 * one ShareManager's pods under libfaketime. The project's image has no libfaketime, so
 * the policy brings the host's: to every pod created with label
 * leasehold.dev/share-manager=<share> it adds a read-only hostPath volume of the host's
 * libfaketime directory (the real nodes share the host's /usr; the image is Debian 12's
 * glibc like the host's, which the library needs), mounts it at the same path in
 * initContainers[0] (the agent: a mount, so the chart's readOnlyRootFilesystem stays),
 * and appends LD_PRELOAD (libfaketimeMT) and FAKETIME=<offset> to that container's env.
 * The agent's node runs as a plain (non-setuid) process, so the dynamic loader honours
 * LD_PRELOAD: its wall clock (Date, TLS checks) runs `offset` ahead or behind; its
 * monotonic clock is left alone (FAKETIME_DONT_FAKE_MONOTONIC=1), as on a real node
 * with a wrong wall clock.
 * Not guaranteed: the host having libfaketime (libfaketimeAvailable(); Debian's
 * libfaketime package, dev/debian-packages.sh).
 */
import { existsSync } from 'node:fs';
import type { Cluster } from '../../dev/cluster/types.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { AGENT_CONTAINER } from '../../manager/share-model/pod-spec.ts';
import { eventually } from '../support/cluster.ts';
import { runTool } from '../support/tools.ts';

export const LIBFAKETIME_DIR = '/usr/lib/x86_64-linux-gnu/faketime';
export const LIBFAKETIME = `${LIBFAKETIME_DIR}/libfaketimeMT.so.1`;
const VOLUME = 'e2e-faketime';
const AGENT = AGENT_CONTAINER;

export function libfaketimeAvailable(): boolean {
  return existsSync(LIBFAKETIME);
}

function policyYaml(share: string, offset: string): string {
  const env = (name: string, value: string) =>
    `JSONPatch{op: "add", path: "/spec/initContainers/0/env/-", value: Object.spec.initContainers.env{name: "${name}", value: "${value}"}}`;
  // NB: an apply configuration, merged by the Pod schema's list keys (volumes and
  // containers by name, volumeMounts by mountPath): the agent may have no volumeMounts
  // yet, and a JSONPatch whose value is a list of objects panics the API server (v1.36.3).
  const mount = [
    'Object{spec: Object.spec{',
    `volumes: [Object.spec.volumes{name: "${VOLUME}", hostPath: Object.spec.volumes.hostPath{path: "${LIBFAKETIME_DIR}", type: "Directory"}}], `,
    `initContainers: [Object.spec.initContainers{name: "${AGENT}", volumeMounts: [Object.spec.initContainers.volumeMounts{name: "${VOLUME}", mountPath: "${LIBFAKETIME_DIR}", readOnly: true}]}]`,
    '}}',
  ].join('');
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
        has(object.spec.initContainers) && size(object.spec.initContainers) > 0 &&
        object.spec.initContainers[0].name == '${AGENT}'
  mutations:
    - patchType: JSONPatch
      jsonPatch:
        expression: >-
          [${env('LD_PRELOAD', LIBFAKETIME)}, ${env('FAKETIME', offset)}, ${env('FAKETIME_DONT_FAKE_MONOTONIC', '1')}]
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: >-
          ${mount}
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
 * back with FAKETIME=<offset> and the library's mount (admission runs on dry runs;
 * nothing is stored).
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
        { name: AGENT, image: 'leasehold.dev/leasehold:dev', env: [{ name: 'PROBE', value: '1' }] },
      ],
      containers: [{ name: 'server', image: 'leasehold.dev/nfs-ganesha:dev' }],
      volumes: [{ name: 'data', emptyDir: {} }],
    },
  };
  await eventually(
    `the faketime policy of ${share} applied by the API server`,
    async () => {
      const pod = await core.createNamespacedPod(
        { namespace: 'default', body: probe, dryRun: 'All' },
        withDeadline(5_000),
      );
      const agent = pod.spec?.initContainers?.[0];
      const skewed = (agent?.env ?? []).some((e) => e.name === 'FAKETIME' && e.value === offset);
      const mounted = (agent?.volumeMounts ?? []).some((m) => m.name === VOLUME && m.readOnly === true);
      return skewed && mounted ? true : undefined;
    },
    30_000,
    100,
  );
}

/**
 * An agent 10 minutes behind must accept the API server's certificate and its CA, both
 * made at the control plane's start: they must be valid from before then. Puts
 * LD_PRELOAD (libfaketime) and FAKETIME=`offset` (e.g. "-1h") in this process's env now,
 * and takes them out at the cluster's progress line that says the certificates are made
 * (pass onClusterProgress as the cluster's onProgress); restore() takes them out in any
 * case (call it in `after`). So openssl makes them `offset` early. NB: whatever else
 * this process spawns meanwhile inherits the env: etcd (a static Go binary, which the
 * dynamic loader and so libfaketime never touch) and, when the images are not cached,
 * the image build's first tools.
 */
export function backdateClusterCerts(offset: string): {
  onClusterProgress(line: string): void;
  restore(): void;
} {
  const saved = { LD_PRELOAD: process.env.LD_PRELOAD, FAKETIME: process.env.FAKETIME };
  process.env.LD_PRELOAD = LIBFAKETIME;
  process.env.FAKETIME = offset;
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  };
  return {
    onClusterProgress: (line) => {
      if (line.includes('certificates made')) restore();
    },
    restore,
  };
}
