/**
 * The files a container's user must be able to use, with the owners and modes a real
 * kubelet gives them, now that containers run as their image's or securityContext's
 * user (container-identity.ts). Nothing is simply opened to everyone:
 *  - the sim root and the pod dirs on the way are 0711 (enter, not list): a container
 *    reaches the paths it was given, as through its bind mounts, and cannot browse
 *    other pods' dirs; its logs dir is 0700 (the container writes to descriptors the
 *    kubelet opened, as to a runtime's pipes);
 *  - the per-pod kubeconfig carries the service-account token, so it gets the projected
 *    token's rules (kubelet pkg/volume/projected, FsUserFrom): owned by the pod's one
 *    runAsUser and 0600 when every container sets the same one; group fsGroup and 0640
 *    with an fsGroup; else root and 0644 (the kube-api-access volume's defaultMode 420,
 *    readable by any user of the container); the cluster CA it names is copied next to
 *    it as ca.crt, 0644 (the projected kube-root-ca.crt), out of the cluster's private dir;
 *  - an emptyDir is 0777, as the kubelet's emptydir plugin makes it; with an fsGroup it
 *    is group-owned by it with the setgid bit (SetVolumeOwnership);
 *  - PVC directories stay root-owned 0755, like the root of a fresh filesystem: the
 *    test CSIDriver has the default fsGroupPolicy (ReadWriteOnceWithFSType) and the
 *    test PVs no fsType, so a kubelet would not apply fsGroup to them either;
 *  - the node binary: the toolchain's Node lives under /root (0700), which no other uid
 *    may enter, so the sim hard-links it (or copies it, across filesystems) to
 *    <simRoot>/image/node, the way an image brings its own /nodejs/bin/node.
 */
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  linkSync,
  mkdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { LeaseholdError } from '../../../lib/errors.ts';
import { fsUserOf } from './container-identity.ts';

export interface FileMode {
  uid: number;
  gid: number;
  mode: number;
}

/** Owner and mode of the pod's token kubeconfig (projected service-account token rules). */
export function tokenFileMode(pod: V1Pod): FileMode {
  const fsUser = fsUserOf(pod);
  const fsGroup = pod.spec?.securityContext?.fsGroup;
  if (fsUser === undefined && fsGroup === undefined) return { uid: 0, gid: 0, mode: 0o644 };
  return { uid: fsUser ?? 0, gid: fsGroup ?? 0, mode: fsGroup === undefined ? 0o600 : 0o640 };
}

/**
 * Gives the pod's token kubeconfig (JSON, written by dev/cluster) its owner and mode,
 * with the CA it names copied beside it as ca.crt (0644) so the container's user can
 * read it. NB: the kubeconfig is rewritten in place, before any container starts.
 */
export function exposeTokenKubeconfig(path: string, pod: V1Pod): void {
  const config = JSON.parse(readFileSync(path, 'utf8')) as {
    clusters?: Array<{ cluster?: Record<string, string> }>;
  };
  const ca = join(dirname(path), 'ca.crt');
  for (const entry of config.clusters ?? []) {
    const from = entry.cluster?.['certificate-authority'];
    if (entry.cluster && from !== undefined) {
      copyFileSync(from, ca);
      chmodSync(ca, 0o644);
      entry.cluster['certificate-authority'] = ca;
    }
  }
  writeFileSync(path, `${JSON.stringify(config, null, 2)}\n`);
  applyFileMode(path, tokenFileMode(pod));
}

/** Owner and mode of an emptyDir's directory. */
export function emptyDirMode(pod: V1Pod): FileMode {
  const fsGroup = pod.spec?.securityContext?.fsGroup;
  return fsGroup === undefined ? { uid: 0, gid: 0, mode: 0o777 } : { uid: 0, gid: fsGroup, mode: 0o2777 };
}

export function applyFileMode(path: string, want: FileMode): void {
  chownSync(path, want.uid, want.gid);
  chmodSync(path, want.mode);
}

/** Lets any uid enter (not list) `dir`, keeping the rest of its mode. */
export function makeTraversable(dir: string): void {
  chmodSync(dir, (statSync(dir).mode & 0o7777) | 0o111);
}

/** <simRoot>/pods/<uid> with its logs dir, enterable (not listable) by the containers' users. */
export function preparePodDir(simRoot: string, podUid: string): string {
  const pods = join(simRoot, 'pods');
  const podDir = join(pods, podUid);
  mkdirSync(join(podDir, 'logs'), { recursive: true });
  makeTraversable(simRoot);
  // volumes/ may exist already: emptyDirs are made while the volumes resolve.
  for (const dir of [pods, podDir, join(podDir, 'volumes')]) if (existsSync(dir)) chmodSync(dir, 0o711);
  chmodSync(join(podDir, 'logs'), 0o700);
  return podDir;
}

/** The node binary containers run, reachable by every uid (idempotent). */
export function containerNodePath(simRoot: string): string {
  const dir = join(simRoot, 'image');
  const target = join(dir, 'node');
  if (existsSync(target)) return target;
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  makeTraversable(simRoot);
  try {
    try {
      linkSync(process.execPath, target);
    } catch (err) {
      // NB: only across filesystems; never copy onto an existing link, which would
      // write into the toolchain's own binary.
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      copyFileSync(process.execPath, target);
      chmodSync(target, 0o755);
    }
  } catch (err) {
    throw new LeaseholdError(
      'E_SIM_NODE_BINARY',
      `providing the containers' node binary ${process.execPath} at ${target} failed`,
      { cause: err },
    );
  }
  return target;
}
