/**
 * Pure: who a container's process is on a real node (kubelet + containerd 2.x + runc):
 * uid, gid, supplementary groups, the five capability sets and no_new_privs, from the
 * pod, the container and the image's user. The simulated kubelet applies the result
 * with setpriv (pod-sandbox.ts), so the kernel itself then grants or refuses a signal.
 *
 * What was read, not guessed (containerd v2.4.0-beta.0-70-g301026e58, runc
 * v1.5.0-rc.1-213-g76d9cf5da; kubelet from kubernetes pkg/kubelet/kuberuntime):
 *  - kubelet: `verifyRunAsNonRoot` (security_context_others.go) refuses runAsUser 0,
 *    an image user 0 ("container has runAsNonRoot and image will run as root") and a
 *    non-numeric image user; `getImageUser` treats an image without USER as uid 0. When
 *    runAsUser is unset the kubelet passes the image's *uid only* to the CRI, never its
 *    group. CRI supplementalGroups = pod fsGroup + pod supplementalGroups.
 *    NoNewPrivs = allowPrivilegeEscalation == false.
 *  - containerd internal/cri/server/container_create.go: user string "uid[:gid]"
 *    (GenerateUserString, internal/cri/util/util.go) -> oci.WithUser; `oci.WithNewPrivileges`
 *    then `WithNoNewPrivileges` only if asked; `customopts.WithCapabilities`, then
 *    `oci.WithPrivileged` for privileged, then `customopts.WithoutAmbientCaps`
 *    ("Clear all ambient capabilities ... kubernetes/kubernetes#56374").
 *  - pkg/oci/spec_opts.go: `WithUserID` takes the gid from the image's /etc/passwd
 *    entry of that uid, or 0 when there is none; `ensureAdditionalGids` always puts the
 *    primary gid into the additional gids; internal/cri/server/container_create_linux.go
 *    merges /etc/group memberships (policy Merge, the default) and supplementalGroups,
 *    sorted (`mergeGids`, internal/cri/opts/spec_opts.go).
 *  - pkg/oci/spec.go `defaultUnixCaps`: the 14 capabilities below, as bounding, permitted
 *    and effective; no inheritable, no ambient.
 *  - internal/cri/opts/spec_opts.go `WithCapabilities`: add "ALL" (case-insensitive)
 *    sets all of containerd's own effective caps (`cap.Current()`, service_linux.go);
 *    drop "ALL" empties the sets; then every other name becomes "CAP_" + upper(name)
 *    and is added to bounding/permitted/effective and dropped from those and inheritable
 *    (pkg/oci/spec_opts.go WithAddedCapabilities / WithDroppedCapabilities). So the
 *    drops win over the adds, and NB: `add: [CAP_KILL]` becomes "CAP_CAP_KILL", which runc
 *    ignores with a warning (libcontainer/capabilities/capabilities.go `New`: "ignoring
 *    unknown or unavailable capabilities"); it grants nothing. Nothing sets Inheritable
 *    (WithCapabilities only filters an existing one) or Ambient (cleared).
 *  - `oci.WithPrivileged` (pkg/oci/spec_opts.go): `WithAllCurrentCapabilities`, after the
 *    add/drop, so privileged means all of containerd's caps whatever was dropped.
 *  - runc libcontainer/init_linux.go `finalizeNamespace`: bounding set first, keep-caps,
 *    setgroups/setgid/setuid (`setupUser`), then capset of effective/permitted/
 *    inheritable and ambient, then execve. The kernel's execve rules then decide what
 *    the process holds: a non-root uid without ambient caps and without file caps gets
 *    empty permitted/effective, so a capability "added" to a non-root container does
 *    nothing (kubernetes/kubernetes#56374); uid 0 gets permitted = effective = bounding.
 *
 * Not modelled: user namespaces (hostUsers: false), runAsUser on Windows, seccomp and
 * AppArmor profiles, the SELinux label, the volume-gid annotation groups.
 */
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { CAPABILITIES, CONTAINERD_DEFAULT_CAPS } from './capabilities.ts';

export { CAPABILITIES, CONTAINERD_DEFAULT_CAPS, capsFromMask, capsToMask } from './capabilities.ts';

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

export interface GroupEntry {
  name: string;
  gid: number;
  members: readonly string[];
}

/** What the OCI image config and the image's /etc/passwd and /etc/group say. */
export interface ImageUser {
  /** The image config's User ("" when the Dockerfile has no USER: the runtime runs it as 0). */
  user: string;
  passwd: readonly PasswdEntry[];
  groups: readonly GroupEntry[];
}

export interface CapabilitySets {
  bounding: string[];
  permitted: string[];
  effective: string[];
  inheritable: string[];
  ambient: string[];
}

export interface ContainerIdentity {
  uid: number;
  gid: number;
  /** Supplementary groups, sorted, always including gid (as setgroups(2) gets them). */
  groups: number[];
  /** HOME as runc sets it when the spec's env has none: the passwd entry's, else "/". */
  home: string;
  /** process.capabilities of the OCI spec containerd writes. */
  spec: CapabilitySets;
  /** What the process holds after execve (what /proc/<pid>/status shows). */
  afterExec: CapabilitySets;
  noNewPrivs: boolean;
  /** Names runc ignores as unknown (e.g. "CAP_CAP_KILL" from `add: [CAP_KILL]`); logged. */
  ignoredCaps: string[];
}

export type IdentityResult =
  | { kind: 'identity'; identity: ContainerIdentity }
  | {
      kind: 'error';
      reason: 'CreateContainerConfigError' | 'CreateContainerError' | 'RunContainerError';
      message: string;
    };

const fail = (
  reason: 'CreateContainerConfigError' | 'CreateContainerError' | 'RunContainerError',
  message: string,
) => ({ kind: 'error', reason, message }) as const;

/** kubelet's format.Pod: "name_namespace(uid)". */
function podRef(pod: V1Pod): string {
  return `${pod.metadata?.name ?? ''}_${pod.metadata?.namespace ?? ''}(${pod.metadata?.uid ?? ''})`;
}

/** The kubelet's image user: uid part of the image's User, a name, or (no USER) 0. */
function imageUid(image: ImageUser): { uid: number | undefined; username: string | undefined } {
  if (image.user === '') return { uid: 0, username: undefined };
  const part = image.user.split(':')[0] ?? '';
  return /^\d+$/.test(part) ? { uid: Number(part), username: undefined } : { uid: undefined, username: part };
}

function without(list: readonly string[], cap: string): string[] {
  return list.filter((c) => c !== cap);
}

/** containerd's spec capabilities for this container (before runc drops unknown names). */
function specCapabilities(container: V1Container, hostCaps: readonly string[]): CapabilitySets {
  const sc = container.securityContext;
  let bounding = [...CONTAINERD_DEFAULT_CAPS];
  let permitted = [...CONTAINERD_DEFAULT_CAPS];
  let effective = [...CONTAINERD_DEFAULT_CAPS];
  let inheritable: string[] = [];
  const caps = sc?.capabilities;
  if (caps) {
    const add = caps.add ?? [];
    const drop = caps.drop ?? [];
    const isAll = (c: string) => c.toUpperCase() === 'ALL';
    if (add.some(isAll)) {
      bounding = [...hostCaps];
      permitted = [...hostCaps];
      effective = [...hostCaps];
      inheritable = inheritable.filter((c) => hostCaps.includes(c));
    }
    if (drop.some(isAll)) {
      bounding = [];
      permitted = [];
      effective = [];
      inheritable = [];
    }
    for (const c of add.filter((c) => !isAll(c))) {
      const name = `CAP_${c.toUpperCase()}`;
      if (!bounding.includes(name)) bounding.push(name);
      if (!effective.includes(name)) effective.push(name);
      if (!permitted.includes(name)) permitted.push(name);
    }
    for (const c of drop.filter((c) => !isAll(c))) {
      const name = `CAP_${c.toUpperCase()}`;
      bounding = without(bounding, name);
      effective = without(effective, name);
      permitted = without(permitted, name);
      inheritable = without(inheritable, name);
    }
  }
  if (sc?.privileged === true) {
    // WithAllCurrentCapabilities replaces bounding/permitted/effective; inheritable is
    // only filtered, so it stays empty.
    bounding = [...hostCaps];
    permitted = [...hostCaps];
    effective = [...hostCaps];
  }
  return { bounding, permitted, effective, inheritable, ambient: [] };
}

/** Sorted by bit number, known names only: how the kernel reports a set. */
function known(caps: readonly string[]): string[] {
  return CAPABILITIES.filter((c) => caps.includes(c));
}

/**
 * The identity of `container` of `pod` on a real node. `hostCaps` is the effective
 * set of the runtime's own process (containerd's `cap.Current()`): what privileged and
 * `add: [ALL]` grant.
 */
export function resolveIdentity(
  pod: V1Pod,
  container: V1Container,
  image: ImageUser,
  hostCaps: readonly string[],
): IdentityResult {
  const podSc = pod.spec?.securityContext;
  const sc = container.securityContext;
  const runAsUser = sc?.runAsUser ?? podSc?.runAsUser;
  const runAsGroup = sc?.runAsGroup ?? podSc?.runAsGroup;
  const runAsNonRoot = sc?.runAsNonRoot ?? podSc?.runAsNonRoot;
  const fromImage = imageUid(image);
  const where = `(pod: ${JSON.stringify(podRef(pod))}, container: ${container.name})`;

  if (runAsNonRoot === true) {
    if (runAsUser !== undefined) {
      if (runAsUser === 0)
        return fail('CreateContainerConfigError', `container's runAsUser breaks non-root policy ${where}`);
    } else if (fromImage.uid === undefined) {
      return fail(
        'CreateContainerConfigError',
        `container has runAsNonRoot and image has non-numeric user (${fromImage.username}), cannot verify user is non-root ${where}`,
      );
    } else if (fromImage.uid === 0) {
      return fail(
        'CreateContainerConfigError',
        `container has runAsNonRoot and image will run as root ${where}`,
      );
    }
  }

  // The CRI user: runAsUser, else the image's uid (never its group), else its name.
  const criUid = runAsUser ?? fromImage.uid;
  const criName = criUid === undefined ? fromImage.username : undefined;
  let uid: number;
  let gid: number;
  let entry: PasswdEntry | undefined;
  if (criUid !== undefined) {
    uid = criUid;
    entry = image.passwd.find((p) => p.uid === uid);
    // oci.WithUserID: the passwd entry's gid, or 0 when the uid has none.
    gid = runAsGroup ?? entry?.gid ?? 0;
  } else {
    entry = image.passwd.find((p) => p.name === criName);
    if (!entry) {
      return fail(
        'CreateContainerError',
        `failed to create containerd container: no users found for image user ${JSON.stringify(criName)} ${where}`,
      );
    }
    uid = entry.uid;
    gid = runAsGroup ?? entry.gid;
  }

  const supplemental = [
    ...(podSc?.fsGroup === undefined ? [] : [podSc.fsGroup]),
    ...(podSc?.supplementalGroups ?? []),
  ];
  const policy = podSc?.supplementalGroupsPolicy ?? 'Merge';
  const fromGroupFile =
    policy === 'Merge' && entry
      ? image.groups.filter((g) => g.name !== entry.name && g.members.includes(entry.name)).map((g) => g.gid)
      : [];
  const groups = [...new Set([gid, ...fromGroupFile, ...supplemental])].sort((a, b) => a - b);

  const spec = specCapabilities(container, hostCaps);
  const all = [...spec.bounding, ...spec.permitted, ...spec.effective, ...spec.inheritable];
  const ignoredCaps = [...new Set(all.filter((c) => !CAPABILITIES.includes(c)))].sort();
  const unavailable = [...new Set(all.filter((c) => CAPABILITIES.includes(c) && !hostCaps.includes(c)))];
  if (unavailable.length > 0) {
    // runc can drop from the bounding set but not raise beyond its own caps: capset EPERM.
    return fail(
      'RunContainerError',
      `container ${container.name}: unable to apply caps: ${unavailable.join(', ')} not held by the simulator's own process, so no runtime could grant it here ${where}`,
    );
  }
  const bounding = known(spec.bounding);
  // execve: uid 0 gets permitted = effective = bounding; any other uid, with no ambient
  // caps and no file caps on node, gets nothing.
  const held = uid === 0 ? bounding : [];
  return {
    kind: 'identity',
    identity: {
      uid,
      gid,
      groups,
      home: entry?.home ?? '/',
      spec,
      afterExec: { bounding, permitted: held, effective: held, inheritable: [], ambient: [] },
      noNewPrivs: sc?.allowPrivilegeEscalation === false,
      ignoredCaps,
    },
  };
}

/**
 * setpriv(1) options that give the process this identity: the bounding set, no
 * inheritable and no ambient caps, setgroups/setresgid/setresuid, then execve of the
 * command, which leaves the kernel to compute permitted/effective as it does after runc.
 * NB: they must follow nsenter (which needs CAP_SYS_ADMIN to join the namespaces).
 */
export function setprivArgs(identity: ContainerIdentity): string[] {
  const lower = (c: string) => c.replace(/^CAP_/, '').toLowerCase();
  return [
    `--reuid=${identity.uid}`,
    `--regid=${identity.gid}`,
    `--groups=${identity.groups.join(',')}`,
    '--inh-caps=-all',
    '--ambient-caps=-all',
    `--bounding-set=${['-all', ...identity.afterExec.bounding.map((c) => `+${lower(c)}`)].join(',')}`,
    ...(identity.noNewPrivs ? ['--no-new-privs'] : []),
  ];
}

/**
 * kubelet's FsUserFrom: the one runAsUser (from the spec, not the image) shared by every
 * container, or undefined. A projected service-account token is then owned by it, 0600.
 */
export function fsUserOf(pod: V1Pod): number | undefined {
  const all = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  let fsUser: number | undefined;
  for (const c of all) {
    const runAsUser = c.securityContext?.runAsUser ?? pod.spec?.securityContext?.runAsUser;
    if (runAsUser === undefined || (fsUser !== undefined && fsUser !== runAsUser)) return undefined;
    fsUser = runAsUser;
  }
  return fsUser;
}
