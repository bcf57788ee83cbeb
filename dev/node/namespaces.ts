/**
 * The node's own namespaces (pid, network, mount), like a kind node container's, made
 * by util-linux `unshare` and entered by `nsenter`. NB: not `ip netns exec`, which
 * remounts /sys and so hides the host's cgroup mounts from what runs inside.
 *
 * The first process (PID 1 of the node's pid namespace) sets the namespaces up and then
 * becomes the pause binary, which reaps orphans (containerd's shims) and holds the
 * namespaces. Everything the node runs is in its pid namespace, so killing PID 1 kills
 * it all, containers included (the kernel's rule for a pid namespace's init); unshare's
 * --kill-child and setpriv's --pdeathsig make that happen even when the process that
 * started the node dies by SIGKILL.
 *
 * Inside the mount namespace (private propagation: nothing leaks to the host):
 *  - a fresh /proc for the pid namespace, with per-node files bind-mounted over the
 *    /proc/sys keys the kubelet checks (config.ts KUBELET_SYSCTLS): the host's sysctls
 *    are neither read by the kubelet nor written;
 *  - per-node directories over /run, /var/lib and /var/log, where containerd's shims,
 *    the CNI cache and the kubelet's container-log links write at fixed paths;
 *  - the kubelet root bind-mounted onto itself as rshared (mount propagation for CSI).
 * Inside the network namespace (fabric-plan.ts): lo up holding the control plane's
 * address as a /32 (where the API relay listens), and the per-namespace sysctls
 * (forwarding, ARP only for an interface's own addresses). `eth0` is not made here:
 * the boot (node-boot.ts) puts the node on its cluster's fabric (fabric.ts), which
 * moves a veth end in as `eth0` with the node IP and the routes. The pod bridge cni0
 * is the CNI plugin's; kube-proxy's nftables table is made there too.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { KUBELET_SYSCTLS } from './config.ts';
import { nodeNetSetupLines } from './fabric-plan.ts';
import type { NodeLayout } from './layout.ts';

/** File name of a sysctl view in layout.sysctlDir. */
export const sysctlFile = (key: string) => key.replace(/\//g, '.');

const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The shell script PID 1 runs before it execs pause. */
export function namespaceSetupScript(layout: NodeLayout, pauseBin: string): string {
  const lines = [
    'set -eu',
    'mount -t proc proc /proc',
    ...Object.keys(KUBELET_SYSCTLS).map(
      (key) => `mount --bind ${sh(join(layout.sysctlDir, sysctlFile(key)))} /proc/sys/${key}`,
    ),
    `mount --bind ${sh(layout.hostDirs.run)} /run`,
    `mount --bind ${sh(layout.hostDirs.varLib)} /var/lib`,
    `mount --bind ${sh(layout.hostDirs.varLog)} /var/log`,
    `mount --bind ${sh(layout.kubeletRoot)} ${sh(layout.kubeletRoot)}`,
    `mount --make-rshared ${sh(layout.kubeletRoot)}`,
    ...nodeNetSetupLines(layout.controlPlaneIp),
    `: > ${sh(layout.readyFile)}`,
    `exec ${sh(pauseBin)}`,
  ];
  return `${lines.join('\n')}\n`;
}

/** unshare's argv (after `unshare`) for the node's PID 1. */
export function unshareArgs(layout: NodeLayout, pauseBin: string): string[] {
  return [
    '--pid',
    '--fork',
    '--kill-child=SIGKILL',
    '--net',
    '--mount',
    '--propagation',
    'private',
    '--',
    'sh',
    '-c',
    namespaceSetupScript(layout, pauseBin),
  ];
}

/** nsenter's argv prefix to run a command in the node's namespaces. */
export function nsenterArgs(pid1: number): string[] {
  return ['--target', String(pid1), '--pid', '--net', '--mount', '--'];
}

/** The pid (host view) of a direct child of `parent`, or undefined. */
export function childOf(parent: number): number | undefined {
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === parent) return Number(name);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}
