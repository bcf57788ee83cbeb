/**
 * What a pod needs before its first container starts on a simulated node: host ports
 * for its declared (and image-default) container ports, a TokenRequest token for its
 * service account bound to the pod object (so the API server rejects it once the pod
 * is gone, and RBAC applies as in a cluster), and the launch of every container
 * (see ../runtime/container-launch.ts), checked against the built dist/ files.
 */
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { k8s, kubeCall, withDeadline } from '../../../lib/kube-client.ts';
import { freePort } from '../../net/free-port.ts';
import { capsFromMask } from '../runtime/container-identity.ts';
import { declaredPorts, imageDefaultPorts, type Launch, resolveLaunch } from '../runtime/container-launch.ts';
import { mountsOf } from './pod-volumes.ts';

/** containerPort -> a free host port, for every port the pod's containers may listen on. */
export async function allocatePorts(pod: V1Pod): Promise<Map<number, number>> {
  const ports = new Map<number, number>();
  for (const port of new Set([...declaredPorts(pod), ...imageDefaultPorts(pod)]))
    ports.set(port, await freePort());
  return ports;
}

export async function requestPodToken(kc: k8s.KubeConfig, pod: V1Pod): Promise<string> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const namespace = pod.metadata?.namespace ?? 'default';
  const sa = pod.spec?.serviceAccountName ?? 'default';
  const answer = await kubeCall(`request a token for ServiceAccount ${namespace}/${sa}`, () =>
    core.createNamespacedServiceAccountToken(
      {
        namespace,
        name: sa,
        body: {
          spec: {
            audiences: [],
            // NB: not refreshed; a pod outliving an hour would lose API access.
            expirationSeconds: 3600,
            boundObjectRef: {
              apiVersion: 'v1',
              kind: 'Pod',
              name: pod.metadata?.name,
              uid: pod.metadata?.uid,
            },
          },
        },
      },
      withDeadline(5_000),
    ),
  );
  return answer.status?.token ?? '';
}

/**
 * The simulator's own effective capabilities, as containerd's `cap.Current()` reads its
 * own: what a privileged container or `add: [ALL]` gets (a container can hold no more).
 */
export function simulatorCapabilities(): string[] {
  const status = readFileSync('/proc/self/status', 'utf8');
  return capsFromMask(/^CapEff:\s*([0-9a-f]+)$/m.exec(status)?.[1] ?? '0');
}

export interface PodLaunchInput {
  repoRoot: string;
  /** The node binary every container runs (see ../runtime/container-files.ts). */
  nodePath: string;
  podIP: string;
  hostIP: string;
  kubeconfigPath: string;
  ports: ReadonlyMap<number, number>;
  hostDirs: ReadonlyMap<string, string>;
  nodeEnv: Readonly<Record<string, string>>;
  /** <simRoot>/pods/<uid>: each container's writable layer is <podDir>/rootfs/<name>. */
  podDir: string;
}

/**
 * <podDir>/rootfs/<container>: the container's own writable layer, root 0755 like an
 * image's directories (only paths an image setting names are placed here; see
 * ../runtime/container-launch.ts PRIVATE PATHS).
 */
function containerRootfs(podDir: string, container: string): string {
  const dir = join(podDir, 'rootfs', container);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  return dir;
}

/** The launch of each init and main container, in spec order. */
export function resolvePodLaunches(pod: V1Pod, input: PodLaunchInput): { init: Launch[]; main: Launch[] } {
  const launch = (c: V1Container): Launch => {
    const l = resolveLaunch(pod, c, {
      repoRoot: input.repoRoot,
      nodePath: input.nodePath,
      podIP: input.podIP,
      hostIP: input.hostIP,
      kubeconfigPath: input.kubeconfigPath,
      ports: input.ports,
      mounts: mountsOf(c, input.hostDirs),
      basePath: process.env.PATH ?? '/usr/bin:/bin',
      nodeEnv: input.nodeEnv,
      hostCaps: simulatorCapabilities(),
      rootfsDir: containerRootfs(input.podDir, c.name),
    });
    if (l.kind === 'process' && !existsSync(join(input.repoRoot, l.script))) {
      return {
        kind: 'error',
        reason: 'RunContainerError',
        message: `${l.script} is not built: run \`npm run build\` (tsc -p tsconfig.build.json)`,
      };
    }
    return l;
  };
  return {
    init: (pod.spec?.initContainers ?? []).map(launch),
    main: (pod.spec?.containers ?? []).map(launch),
  };
}
