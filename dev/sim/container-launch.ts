/**
 * Pure translation of one container of a pod spec into the local process the
 * simulated kubelet runs: which script (by image), its args and its env.
 *
 * Images (the cross-component contract):
 *   leasehold.dev/leasehold:<tag>          args[0] = agent | manager -> node dist/<args[0]>/main.js args[1..]
 *   leasehold.dev/demo-share-server:<tag>  -> node dist/dev/share-server/main.js args
 * `command` is ignored (the image's entrypoint is the script above).
 * Image users (the image config's USER and its /etc/passwd, /etc/group; see
 * container-identity.ts for what the kubelet and containerd make of them):
 *   leasehold.dev/leasehold             USER 65532:65532 (Dockerfile; distroless :nonroot base,
 *                                       passwd root 0, nonroot 65532, nobody 65534)
 *   leasehold.dev/demo-share-server     no USER: runs as 0:0, as a typical NFS server image
 *                                       does (nfs-ganesha, Longhorn's share-manager run as root)
 *
 * Because every pod of every simulated node shares the host's network namespace (its
 * reported pod IP, see pod-ip.ts, is bound nowhere), the kubelet gives each pod its own
 * host ports and translates:
 *  - PORTS: every containerPort declared by any container of the pod gets a free host
 *    port; in env values and args a declared port number is replaced by its host port
 *    where it stands alone ("8081"), after "=" or ":" ("--port=8080",
 *    "tcp://127.0.0.1:8080/x"). When the image's port env var is unset (agent and manager
 *    LEASEHOLD_HTTP_PORT, share server SHARE_SERVER_PORT) it is set to the host port of
 *    the image's default port, so undeclared defaults never collide either. Probes
 *    resolve their port (number or name) through the same map.
 *  - PATHS: a volumeMount's mountPath at the start of an env value or arg, or after
 *    "=" or ":", is replaced by the volume's host directory.
 * NB: a value such as "8080" meant as something other than a port would be translated
 * too; the project's settings never collide with declared ports.
 * Env: the pod spec's env (value, downward-API fieldRef, $(VAR) expansion) plus PATH,
 * HOME (the image user's passwd home, as runc sets it), HOSTNAME (= pod name, as in a
 * container), KUBECONFIG and the node's own extra env (e.g. a fake clock); nothing else
 * of the simulator's environment leaks in. Every launch carries the process's identity
 * (uid, groups, capabilities: container-identity.ts), or the kubelet's refusal.
 */
import { join } from 'node:path';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { type ContainerIdentity, type ImageUser, resolveIdentity } from './container-identity.ts';

export const PROJECT_IMAGE = 'leasehold.dev/leasehold';
export const SHARE_SERVER_IMAGE = 'leasehold.dev/demo-share-server';

export interface LaunchContext {
  repoRoot: string;
  nodePath: string;
  podIP: string;
  hostIP: string;
  kubeconfigPath: string;
  /** containerPort -> host port, for the whole pod. */
  ports: ReadonlyMap<number, number>;
  /** mountPath -> host directory, for this container. */
  mounts: ReadonlyMap<string, string>;
  basePath: string;
  /** Extra env of the node for every container (e.g. a fake clock), before the spec's. */
  nodeEnv?: Readonly<Record<string, string>>;
  /** The simulator's own effective capabilities: what privileged and `add: [ALL]` grant. */
  hostCaps: readonly string[];
}

export type Launch =
  | {
      kind: 'process';
      command: string;
      args: string[];
      env: Record<string, string>;
      script: string;
      identity: ContainerIdentity;
    }
  | {
      kind: 'error';
      reason: 'ErrImagePull' | 'RunContainerError' | 'CreateContainerConfigError' | 'CreateContainerError';
      message: string;
    };

interface ImageEntrypoint {
  script: string;
  args: string[];
  portEnv: string;
  defaultPort: number;
  user: ImageUser;
}

/** gcr.io/distroless/nodejs24-debian12:nonroot with the Dockerfile's USER 65532:65532. */
const PROJECT_IMAGE_USER: ImageUser = {
  user: '65532:65532',
  passwd: [
    { name: 'root', uid: 0, gid: 0, home: '/root' },
    { name: 'nobody', uid: 65534, gid: 65534, home: '/nonexistent' },
    { name: 'nonroot', uid: 65532, gid: 65532, home: '/home/nonroot' },
  ],
  groups: [
    { name: 'root', gid: 0, members: [] },
    { name: 'tty', gid: 5, members: [] },
    { name: 'staff', gid: 50, members: [] },
    { name: 'nonroot', gid: 65532, members: [] },
    { name: 'nobody', gid: 65534, members: [] },
  ],
};

/** Like an NFS server image (nfs-ganesha): no USER, so root; a Debian-style base. */
const SHARE_SERVER_IMAGE_USER: ImageUser = {
  user: '',
  passwd: [
    { name: 'root', uid: 0, gid: 0, home: '/root' },
    { name: 'daemon', uid: 1, gid: 1, home: '/usr/sbin' },
    { name: 'nobody', uid: 65534, gid: 65534, home: '/nonexistent' },
  ],
  groups: [
    { name: 'root', gid: 0, members: [] },
    { name: 'daemon', gid: 1, members: [] },
    { name: 'nogroup', gid: 65534, members: [] },
  ],
};

function imageRepo(image: string): { repo: string; tag: string } {
  const at = image.indexOf('@');
  const base = at >= 0 ? image.slice(0, at) : image;
  const colon = base.lastIndexOf(':');
  return colon > base.lastIndexOf('/')
    ? { repo: base.slice(0, colon), tag: base.slice(colon + 1) }
    : { repo: base, tag: 'latest' };
}

function entrypointOf(container: V1Container): ImageEntrypoint | Launch {
  const image = container.image ?? '';
  const { repo } = imageRepo(image);
  const args = container.args ?? [];
  if (repo === PROJECT_IMAGE) {
    const which = args[0];
    if (which !== 'agent' && which !== 'manager') {
      return {
        kind: 'error',
        reason: 'RunContainerError',
        message: `image ${image}: args[0] must be "agent" or "manager" (it selects the entrypoint), got ${JSON.stringify(which ?? null)}`,
      };
    }
    return {
      script: `dist/${which}/main.js`,
      args: args.slice(1),
      portEnv: 'LEASEHOLD_HTTP_PORT',
      defaultPort: which === 'agent' ? 8081 : 8090,
      user: PROJECT_IMAGE_USER,
    };
  }
  if (repo === SHARE_SERVER_IMAGE) {
    return {
      script: 'dist/dev/share-server/main.js',
      args,
      portEnv: 'SHARE_SERVER_PORT',
      defaultPort: 8080,
      user: SHARE_SERVER_IMAGE_USER,
    };
  }
  return {
    kind: 'error',
    reason: 'ErrImagePull',
    message: `image ${JSON.stringify(image)} is not available on simulated nodes: they run only ${PROJECT_IMAGE}:<tag> (args[0] agent|manager) and ${SHARE_SERVER_IMAGE}:<tag>`,
  };
}

/** Every containerPort of the pod (init and main containers). */
export function declaredPorts(pod: V1Pod): number[] {
  const all = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  return [...new Set(all.flatMap((c) => (c.ports ?? []).map((p) => p.containerPort)))];
}

/** The default port of each container's image, so the kubelet can map it too. */
export function imageDefaultPorts(pod: V1Pod): number[] {
  const all = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  return all.flatMap((c) => {
    const entry = entrypointOf(c);
    return 'kind' in entry ? [] : [entry.defaultPort];
  });
}

export function translatePorts(value: string, ports: ReadonlyMap<number, number>): string {
  return value.replace(/(^|[=:])(\d{1,5})(?=$|\/)/g, (whole, lead: string, digits: string) => {
    const host = ports.get(Number(digits));
    return host === undefined ? whole : `${lead}${host}`;
  });
}

export function translatePaths(value: string, mounts: ReadonlyMap<string, string>): string {
  // Longest mount first, so /data/x wins over /data.
  const sorted = [...mounts.entries()].sort((a, b) => b[0].length - a[0].length);
  for (const [mountPath, hostDir] of sorted) {
    const escaped = mountPath.replace(/\/+$/, '').replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const re = new RegExp(`(^|[=:])${escaped}(?=$|/)`, 'g');
    if (re.test(value)) return value.replace(re, (_w, lead: string) => `${lead}${hostDir}`);
  }
  return value;
}

function fieldRefValue(pod: V1Pod, fieldPath: string, ctx: LaunchContext): string | undefined {
  const labelOrAnnotation = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(fieldPath);
  if (labelOrAnnotation) {
    const map = labelOrAnnotation[1] === 'labels' ? pod.metadata?.labels : pod.metadata?.annotations;
    return map?.[labelOrAnnotation[2] ?? ''] ?? '';
  }
  switch (fieldPath) {
    case 'metadata.name':
      return pod.metadata?.name ?? '';
    case 'metadata.namespace':
      return pod.metadata?.namespace ?? '';
    case 'metadata.uid':
      return pod.metadata?.uid ?? '';
    case 'spec.nodeName':
      return pod.spec?.nodeName ?? '';
    case 'spec.serviceAccountName':
      return pod.spec?.serviceAccountName ?? 'default';
    case 'status.podIP':
    case 'status.podIPs':
      return ctx.podIP;
    case 'status.hostIP':
    case 'status.hostIPs':
      return ctx.hostIP;
    default:
      return undefined;
  }
}

/** Kubernetes $(VAR) expansion: defined names are replaced, $$ escapes, others stay. */
export function expandVars(value: string, env: Readonly<Record<string, string>>): string {
  return value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (whole, name: string | undefined) => {
    if (name === undefined) return '$';
    return env[name] ?? whole;
  });
}

export function resolveLaunch(pod: V1Pod, container: V1Container, ctx: LaunchContext): Launch {
  const entry = entrypointOf(container);
  if ('kind' in entry) return entry;
  const who = resolveIdentity(pod, container, entry.user, ctx.hostCaps);
  if (who.kind === 'error') return who;
  const translate = (v: string) => translatePaths(translatePorts(v, ctx.ports), ctx.mounts);
  const env: Record<string, string> = {
    PATH: ctx.basePath,
    HOME: who.identity.home,
    ...ctx.nodeEnv,
    HOSTNAME: pod.metadata?.name ?? '',
    KUBECONFIG: ctx.kubeconfigPath,
  };
  for (const item of container.env ?? []) {
    if (item.valueFrom === undefined) {
      env[item.name] = translate(expandVars(item.value ?? '', env));
      continue;
    }
    const fieldPath = item.valueFrom?.fieldRef?.fieldPath;
    const value = fieldPath === undefined ? undefined : fieldRefValue(pod, fieldPath, ctx);
    if (value === undefined) {
      return {
        kind: 'error',
        reason: 'CreateContainerConfigError',
        message: `env ${item.name}: the simulated kubelet resolves only value and downward-API fieldRef (metadata.name/namespace/uid/labels/annotations, spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP), got ${JSON.stringify(item.valueFrom ?? null)}`,
      };
    }
    env[item.name] = value;
  }
  if (env[entry.portEnv] === undefined) {
    const host = ctx.ports.get(entry.defaultPort);
    if (host !== undefined) env[entry.portEnv] = String(host);
  }
  const args = entry.args.map((a) => translate(expandVars(a, env)));
  return {
    kind: 'process',
    command: ctx.nodePath,
    args: [join(ctx.repoRoot, entry.script), ...args],
    env,
    script: entry.script,
    identity: who.identity,
  };
}
