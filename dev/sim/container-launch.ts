/**
 * Pure translation of one container of a pod spec into the local process the
 * simulated kubelet runs: which script (by image), its args and its env.
 *
 * Images (the cross-component contract):
 *   leasehold.dev/leasehold:<tag>          args[0] = agent | manager -> node dist/<args[0]>/main.js args[1..]
 *   leasehold.dev/demo-share-server:<tag>  -> node dist/dev/share-server/main.js args
 *   leasehold.dev/nfs-ganesha:<tag>        -> node dist/server/nfs-ganesha/main.js args, which
 *                                          runs the host's Debian ganesha.nfsd as its child
 * `command` is ignored (the image's entrypoint is the script above).
 * Image users (the image config's USER and its /etc/passwd, /etc/group; see
 * container-identity.ts for what the kubelet and containerd make of them):
 *   leasehold.dev/leasehold             USER 65532:65532 (Dockerfile; distroless :nonroot base,
 *                                       passwd root 0, nonroot 65532, nobody 65534)
 *   leasehold.dev/demo-share-server     no USER: runs as 0:0, as a typical NFS server image
 *                                       does (nfs-ganesha, Longhorn's share-manager run as root)
 *   leasehold.dev/nfs-ganesha           no USER (server/nfs-ganesha/Dockerfile): 0:0; passwd of
 *                                       node:24-bookworm-slim (Debian base-passwd + node 1000)
 *
 * Because every pod of every simulated node shares the host's network namespace (its
 * reported pod IP, see pod-ip.ts, is bound nowhere), the kubelet gives each pod its own
 * host ports and translates:
 *  - PORTS: every containerPort declared by any container of the pod gets a free host
 *    port; in env values and args a declared port number is replaced by its host port
 *    where it stands alone ("8081"), after "=" or ":" ("--port=8080",
 *    "tcp://127.0.0.1:8080/x"). When an image's port env var is unset (agent and manager
 *    LEASEHOLD_HTTP_PORT, share server SHARE_SERVER_PORT, NFS server LEASEHOLD_NFS_PORT
 *    2049 and LEASEHOLD_NFS_MOUNT_PORT 20048) it is set to the host port of that default
 *    port, so undeclared defaults never collide either. Probes resolve their port
 *    (number or name) through the same map.
 *  - BIND ADDRESS: the NFS server's LEASEHOLD_NFS_BIND_ADDR, unset or a wildcard (0.0.0.0,
 *    ::) or the pod IP, becomes 127.0.0.1: in a pod a wildcard means the pod's own
 *    interfaces, on the shared host it would mean every interface of the machine, and
 *    the pod IP is bound nowhere. Any other value is passed on (and fails to bind, as it
 *    would in a pod that has no such address).
 *  - PRIVATE PATHS: the NFS server's LEASEHOLD_NFS_RUN_DIR (default /run/leasehold-nfs)
 *    when no volume is mounted there becomes <pod dir>/rootfs/<container>/<path>, the
 *    container's own writable layer, so pods of one machine never share a rendered
 *    config or pid file. NB: readOnlyRootFilesystem is not modelled (that dir stays
 *    writable); the shipped preset mounts an emptyDir there, which works either way.
 *  - PATHS: a volumeMount's mountPath at the start of an env value or arg, or after
 *    "=" or ":", is replaced by the volume's host directory. Not in the env vars an image
 *    declares as no file path: the NFS server's LEASEHOLD_NFS_PSEUDO_PATH is the path
 *    clients mount (the preset sets it to the volume's mountPath), not a directory.
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
/** The shipped NFS server (server/nfs-ganesha/), manager/config.ts LEASEHOLD_NFS_SERVER_IMAGE. */
export const NFS_SERVER_IMAGE = 'leasehold.dev/nfs-ganesha';
/** What the NFS server image runs (relative to the repository). */
export const NFS_SERVER_SCRIPT = 'dist/server/nfs-ganesha/main.js';

const WILDCARDS = new Set(['0.0.0.0', '::', '::0']);

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
  /** This container's writable layer (its paths off every volume), e.g. <pod dir>/rootfs/<name>. */
  rootfsDir: string;
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
  /** Port env vars of the image and the default port each stands for. */
  defaultPorts: ReadonlyArray<{ env: string; port: number }>;
  /** An env var naming the address to listen on (made loopback, see the header). */
  bindEnv?: { name: string };
  /** Env vars whose value is no file path (path translation leaves them alone). */
  notPathEnv?: readonly string[];
  /** Env vars naming a writable path and its default (kept private, see the header). */
  privatePathEnv?: ReadonlyArray<{ name: string; fallback: string }>;
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

/**
 * node:24-bookworm-slim (the Dockerfile's base): Debian 12 base-passwd plus `node` 1000.
 * NB: the system users the Debian packages add (messagebus for dbus, _rpc for rpcbind,
 * statd for nfs-common, uids from 100 in install order) are left out: nothing in the
 * container runs as them (no image is built on these machines to read the real file).
 */
const NFS_SERVER_IMAGE_USER: ImageUser = {
  user: '',
  passwd: [
    { name: 'root', uid: 0, gid: 0, home: '/root' },
    { name: 'daemon', uid: 1, gid: 1, home: '/usr/sbin' },
    { name: 'bin', uid: 2, gid: 2, home: '/bin' },
    { name: 'sys', uid: 3, gid: 3, home: '/dev' },
    { name: 'nobody', uid: 65534, gid: 65534, home: '/nonexistent' },
    { name: 'node', uid: 1000, gid: 1000, home: '/home/node' },
  ],
  groups: [
    { name: 'root', gid: 0, members: [] },
    { name: 'daemon', gid: 1, members: [] },
    { name: 'bin', gid: 2, members: [] },
    { name: 'sys', gid: 3, members: [] },
    { name: 'staff', gid: 50, members: [] },
    { name: 'users', gid: 100, members: [] },
    { name: 'nogroup', gid: 65534, members: [] },
    { name: 'node', gid: 1000, members: [] },
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
      defaultPorts: [{ env: 'LEASEHOLD_HTTP_PORT', port: which === 'agent' ? 8081 : 8090 }],
      user: PROJECT_IMAGE_USER,
    };
  }
  if (repo === SHARE_SERVER_IMAGE) {
    return {
      script: 'dist/dev/share-server/main.js',
      args,
      defaultPorts: [{ env: 'SHARE_SERVER_PORT', port: 8080 }],
      user: SHARE_SERVER_IMAGE_USER,
    };
  }
  if (repo === NFS_SERVER_IMAGE) {
    return {
      script: NFS_SERVER_SCRIPT,
      args,
      defaultPorts: [
        { env: 'LEASEHOLD_NFS_PORT', port: 2049 },
        { env: 'LEASEHOLD_NFS_MOUNT_PORT', port: 20048 },
      ],
      bindEnv: { name: 'LEASEHOLD_NFS_BIND_ADDR' },
      notPathEnv: ['LEASEHOLD_NFS_PSEUDO_PATH'],
      privatePathEnv: [{ name: 'LEASEHOLD_NFS_RUN_DIR', fallback: '/run/leasehold-nfs' }],
      user: NFS_SERVER_IMAGE_USER,
    };
  }
  return {
    kind: 'error',
    reason: 'ErrImagePull',
    message: `image ${JSON.stringify(image)} is not available on simulated nodes: they run only ${PROJECT_IMAGE}:<tag> (args[0] agent|manager), ${SHARE_SERVER_IMAGE}:<tag> and ${NFS_SERVER_IMAGE}:<tag>`,
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
    return 'kind' in entry ? [] : entry.defaultPorts.map((d) => d.port);
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

/** True when `path` is a volume's host directory or inside one (translated already). */
function isUnderMount(path: string, mounts: ReadonlyMap<string, string>): boolean {
  return [...mounts.values()].some((dir) => path === dir || path.startsWith(`${dir.replace(/\/+$/, '')}/`));
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
      const value = expandVars(item.value ?? '', env);
      env[item.name] = entry.notPathEnv?.includes(item.name)
        ? translatePorts(value, ctx.ports)
        : translate(value);
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
  for (const { env: name, port } of entry.defaultPorts) {
    const host = ctx.ports.get(port);
    if (env[name] === undefined && host !== undefined) env[name] = String(host);
  }
  if (entry.bindEnv) {
    const value = env[entry.bindEnv.name];
    if (value === undefined || WILDCARDS.has(value) || value === ctx.podIP)
      env[entry.bindEnv.name] = '127.0.0.1';
  }
  for (const { name, fallback } of entry.privatePathEnv ?? []) {
    // A set value is translated already when a volume is mounted there; the default too, here.
    const value = env[name] ?? translate(fallback);
    env[name] =
      !value.startsWith('/') || isUnderMount(value, ctx.mounts) ? value : join(ctx.rootfsDir, value);
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
