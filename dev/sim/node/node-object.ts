/**
 * Pure builders of what a kubelet registers and reports for its node: the Node
 * (labels, the controller-managed attach-detach annotation that lets the attach-detach
 * controller create VolumeAttachments for it, capacity, address 127.0.0.1), its
 * conditions, its heartbeat Lease and its CSINode (registering the test CSI driver).
 */
import type { V1CSINode, V1Lease, V1Node, V1NodeCondition } from '@kubernetes/client-node';
import { k8s } from '../../../lib/kube-client.ts';

export const SIM_NODE_LABEL = 'leasehold.dev/sim-node';
const CAPACITY = { cpu: '8', memory: '32Gi', pods: '110', 'ephemeral-storage': '100Gi' };

export function nodeConditions(now: Date, since: Date): V1NodeCondition[] {
  const ok = (type: string, reason: string, message: string, status: string): V1NodeCondition => ({
    type,
    status,
    reason,
    message,
    lastHeartbeatTime: now,
    lastTransitionTime: since,
  });
  return [
    ok('Ready', 'KubeletReady', 'simulated kubelet is posting ready status', 'True'),
    ok('MemoryPressure', 'KubeletHasSufficientMemory', 'simulated', 'False'),
    ok('DiskPressure', 'KubeletHasNoDiskPressure', 'simulated', 'False'),
    ok('PIDPressure', 'KubeletHasSufficientPID', 'simulated', 'False'),
  ];
}

export function nodeObject(name: string, now: Date, bootId: string): V1Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      labels: {
        'kubernetes.io/hostname': name,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
        [SIM_NODE_LABEL]: 'true',
      },
      annotations: { 'volumes.kubernetes.io/controller-managed-attach-detach': 'true' },
    },
    spec: {},
    status: {
      capacity: CAPACITY,
      allocatable: CAPACITY,
      conditions: nodeConditions(now, now),
      addresses: [
        { type: 'InternalIP', address: '127.0.0.1' },
        { type: 'Hostname', address: name },
      ],
      daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
      nodeInfo: {
        architecture: 'amd64',
        bootID: bootId,
        containerRuntimeVersion: 'leasehold-sim://1',
        kernelVersion: 'sim',
        kubeProxyVersion: '',
        kubeletVersion: 'v1.34.0-leasehold-sim',
        machineID: name,
        operatingSystem: 'linux',
        osImage: 'leasehold simulated node',
        systemUUID: name,
      },
    },
  };
}

export function nodeLeaseObject(name: string, nodeUid: string, durationSeconds: number, now: Date): V1Lease {
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: {
      name,
      namespace: 'kube-node-lease',
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name, uid: nodeUid }],
    },
    spec: {
      holderIdentity: name,
      leaseDurationSeconds: durationSeconds,
      renewTime: new k8s.V1MicroTime(now.getTime()),
    },
  };
}

export function csiNodeObject(name: string, nodeUid: string, driver: string): V1CSINode {
  return {
    apiVersion: 'storage.k8s.io/v1',
    kind: 'CSINode',
    metadata: { name, ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name, uid: nodeUid }] },
    spec: { drivers: [{ name: driver, nodeID: name, topologyKeys: [] }] },
  };
}
