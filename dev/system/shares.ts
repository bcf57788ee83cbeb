/**
 * Share managers of the demo share server on the running system: for a share `name`
 * a PV of the sim's test CSI driver (`pv-<name>`), a PVC bound to it
 * (`<name>-data`) and a ShareManager `<name>` whose server is the demo share server
 * (image leasehold.dev/demo-share-server:dev, fenced by SIGTERM from the agent).
 * Plus the read side the scenarios need: which pod serves, its records over HTTP,
 * the Service's endpoints, the ShareManager status.
 *
 * The share server appends a numbered record every 100 ms to the volume and serves
 * them at GET /records; the kubelet maps its port 8080 to a host port.
 */
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import type { ShareRecord } from '../share-server/record-file.ts';
import { SHARE_SERVER_IMAGE, TEST_CSI_DRIVER } from '../sim/sim.ts';
import { SHARES_NAMESPACE, type System } from './system.ts';

export const SERVER_PORT = 8080;
const SM = { group: 'leasehold.dev', version: 'v1alpha1', plural: 'sharemanagers' };

export interface ShareOptions {
  /** Pin the share's pods to a node (spec.scheduling.nodeSelector). */
  node?: string;
  lease?: { duration?: string; renewInterval?: string; renewDeadline?: string; retryPeriod?: string };
  /** spec.fence; unset = none written, so the manager's default (the `pod` fence) applies. */
  fence?: {
    action?: 'pod' | 'signal' | 'command' | 'none';
    process?: string;
    signal?: string;
    command?: string;
  };
  /** Extra args of the demo share server (e.g. how it reacts to SIGTERM). */
  serverArgs?: string[];
}

export const pvName = (share: string) => `pv-${share}`;

export interface ShareStatus {
  state?: string;
  node?: string;
  pod?: string;
  leaseHolder?: string;
  lastFailover?: Record<string, string | undefined>;
  /** How to mount a share of the shipped NFS server (docs/operations.md "Mounting a share"). */
  export?: { source?: string; mountOptions?: string };
  conditions?: Array<{ type: string; status: string; reason?: string; message?: string }>;
}

/** A PV of the sim's test CSI driver (`pv-<name>`) and a PVC bound to it (`<name>-data`). */
export async function createVolume(sys: System, name: string): Promise<string> {
  const ns = SHARES_NAMESPACE;
  const claim = `${name}-data`;
  await sys.core.createPersistentVolume(
    {
      body: {
        metadata: { name: pvName(name) },
        spec: {
          capacity: { storage: '1Gi' },
          accessModes: ['ReadWriteOnce'],
          persistentVolumeReclaimPolicy: 'Retain',
          storageClassName: '',
          claimRef: { namespace: ns, name: claim },
          csi: { driver: TEST_CSI_DRIVER, volumeHandle: `vol-${name}` },
        },
      },
    },
    withDeadline(10_000),
  );
  await sys.core.createNamespacedPersistentVolumeClaim(
    {
      namespace: ns,
      body: {
        metadata: { name: claim },
        spec: {
          accessModes: ['ReadWriteOnce'],
          storageClassName: '',
          volumeName: pvName(name),
          resources: { requests: { storage: '1Gi' } },
        },
      },
    },
    withDeadline(10_000),
  );
  return claim;
}

export async function createShare(sys: System, name: string, opts: ShareOptions = {}): Promise<void> {
  const ns = SHARES_NAMESPACE;
  const claim = await createVolume(sys, name);
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  await custom.createNamespacedCustomObject(
    {
      ...SM,
      namespace: ns,
      body: {
        apiVersion: `${SM.group}/${SM.version}`,
        kind: 'ShareManager',
        metadata: { name, namespace: ns },
        spec: {
          volume: { pvc: claim, mountPath: '/export' },
          server: {
            image: `${SHARE_SERVER_IMAGE}:dev`,
            args: ['--dir=/export', ...(opts.serverArgs ?? [])],
            ports: [{ name: 'http', containerPort: SERVER_PORT, protocol: 'TCP' }],
          },
          ...(opts.fence ? { fence: opts.fence } : {}),
          serviceAccountName: 'leasehold-agent',
          ...(opts.node ? { scheduling: { nodeSelector: { 'kubernetes.io/hostname': opts.node } } } : {}),
          ...(opts.lease ? { lease: opts.lease } : {}),
        },
      },
    },
    withDeadline(10_000),
  );
}

export async function shareStatus(sys: Pick<System, 'kc'>, name: string): Promise<ShareStatus> {
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  const sm = (await custom.getNamespacedCustomObject(
    { ...SM, namespace: SHARES_NAMESPACE, name },
    withDeadline(5_000),
  )) as { status?: ShareStatus };
  return sm.status ?? {};
}

/** Removes the nodeSelector of a share (so a replacement may go anywhere). */
export async function unpinShare(sys: System, name: string): Promise<void> {
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  await custom.patchNamespacedCustomObject(
    { ...SM, namespace: SHARES_NAMESPACE, name, body: [{ op: 'remove', path: '/spec/scheduling' }] },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch, withDeadline(5_000)),
  );
}

export interface Serving {
  pod: string;
  node: string;
  port: number;
  lastSeq: number;
}

/** GET /records?after=N of a server on a host port; undefined when it does not answer. */
export async function fetchRecords(
  port: number,
  after = 0,
): Promise<{ server: string; lastSeq: number; records: ShareRecord[] } | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/records?after=${after}`, {
      signal: AbortSignal.timeout(2_000),
    });
    if (!res.ok) return undefined;
    return (await res.json()) as { server: string; lastSeq: number; records: ShareRecord[] };
  } catch {
    return undefined;
  }
}

/** The pods of a share (label leasehold.dev/share-manager=<name>), live ones only. */
export async function sharePods(
  sys: Pick<System, 'core'>,
  name: string,
  namespace = SHARES_NAMESPACE,
): Promise<k8s.V1Pod[]> {
  const list = await sys.core.listNamespacedPod(
    { namespace, labelSelector: `leasehold.dev/share-manager=${name}` },
    withDeadline(5_000),
  );
  return list.items.filter((p) => !p.metadata?.deletionTimestamp);
}

/** The pod currently answering for the share (other than `notPod`), or undefined. */
export async function servingNow(sys: System, name: string, notPod?: string): Promise<Serving | undefined> {
  for (const pod of await sharePods(sys, name)) {
    const podName = pod.metadata?.name ?? '';
    if (podName === notPod || pod.status?.phase !== 'Running') continue;
    const port = sys.sim.hostPort(SHARES_NAMESPACE, podName, SERVER_PORT);
    if (port === undefined) continue;
    const answer = await fetchRecords(port, Number.MAX_SAFE_INTEGER - 1);
    if (answer) return { pod: podName, node: pod.spec?.nodeName ?? '', port, lastSeq: answer.lastSeq };
  }
  return undefined;
}

export async function waitServing(
  sys: System,
  name: string,
  timeoutMs: number,
  notPod?: string,
): Promise<Serving> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const serving = await servingNow(sys, name, notPod).catch(() => undefined);
    if (serving) return serving;
    await sleep(100);
  }
  const status = await shareStatus(sys, name).catch((err: unknown) => ({ error: String(err) }));
  throw new LeaseholdError(
    'E_SHARE_NOT_SERVING',
    `share ${SHARES_NAMESPACE}/${name} not served${notPod ? ` by a pod other than ${notPod}` : ''} within ${timeoutMs} ms; status ${JSON.stringify(status)}`,
  );
}

/** The pod names the share's Service endpoints (EndpointSlices) point at, ready ones only. */
export async function serviceEndpointPods(sys: Pick<System, 'kc'>, name: string): Promise<string[]> {
  const discovery = sys.kc.makeApiClient(k8s.DiscoveryV1Api);
  const slices = await discovery.listNamespacedEndpointSlice(
    { namespace: SHARES_NAMESPACE, labelSelector: `kubernetes.io/service-name=${name}` },
    withDeadline(5_000),
  );
  return slices.items.flatMap((s) =>
    (s.endpoints ?? [])
      .filter((e) => e.conditions?.ready !== false)
      .map((e) => e.targetRef?.name ?? '')
      .filter((n) => n !== ''),
  );
}

/** Deletes the share's ShareManager (best effort: absent is fine). */
export async function deleteShare(sys: System, name: string): Promise<void> {
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  await custom
    .deleteNamespacedCustomObject({ ...SM, namespace: SHARES_NAMESPACE, name }, withDeadline(5_000))
    .catch((err: unknown) => {
      if (statusOf(err) !== 404) throw err;
    });
}
