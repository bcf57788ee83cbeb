/**
 * The kernel client's init, as a pure function of its settings: the shell script the
 * UML kernel runs as PID 1 (`init=`), and the command lines the host sends it.
 *
 * The guest's root is the host's, read-only (hostfs): every program it runs is the
 * host's (sh, ip, mount.nfs from nfs-common, the testbed's lh-kload); its writable
 * places are tmpfs mounts of its own (/run). The script brings up `eth0` (the TAP in a
 * real node's network namespace, machine.ts) with the client's address and a default
 * route to the node, names the machine (the NFSv4 client's identity string carries the
 * host name: two clients with one name would be one client to the server), loads the
 * NFS client modules where the kernel has them as modules (Debian's 6.1), prints
 * `@ready` and then runs the host's commands, one per console line:
 *   lh_run ID 'CMD'    runs CMD, prints each output line as `@out ID <line>`, then `@done ID <rc>`
 *   lh_start TAG 'CMD' runs CMD in the background, its output straight to the console
 *                       (lh-kload's lines carry their tag), its pid kept under TAG
 *   lh_stop TAG        SIGTERM to TAG's process (lh-kload prints `TAG exit`)
 *   lh_halt            powers the machine off (sysrq o): UML's process exits
 * Guarantees: a command is one console line (quoteShell keeps any text one word);
 * `@done ID` comes after every `@out ID` line. Not guaranteed: anything about a command
 * that blocks (a hard NFS mount to a dead server blocks; lh_run then answers late).
 */
import { LeaseholdError } from '../../lib/errors.ts';

export interface GuestInitOptions {
  /** The guest's host name (also its NFSv4 client identity). */
  hostname: string;
  /** The guest's `eth0` address and the node's end of the TAP (its gateway), /30. */
  address: string;
  gateway: string;
  /** `modprobe -d` directory for a kernel whose NFS client is modules; unset when built in. */
  moduleDir?: string;
}

const HOSTNAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** Single-quotes `text` for sh: one word whatever it holds (no newline: one console line). */
export function quoteShell(text: string): string {
  if (text.includes('\n'))
    throw new LeaseholdError(
      'E_KCLIENT_COMMAND',
      `a guest command must be one line: ${JSON.stringify(text)}`,
    );
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

export function renderGuestInit(opts: GuestInitOptions): string {
  if (!HOSTNAME.test(opts.hostname))
    throw new LeaseholdError('E_KCLIENT_INIT', `guest host name '${opts.hostname}' must be a DNS label`);
  for (const [name, ip] of [
    ['address', opts.address],
    ['gateway', opts.gateway],
  ] as const)
    if (!IPV4.test(ip) || ip.split('.').some((o) => Number(o) > 255))
      throw new LeaseholdError('E_KCLIENT_INIT', `guest ${name} '${ip}' must be an IPv4 address`);
  if (opts.moduleDir !== undefined && (!opts.moduleDir.startsWith('/') || /\s/.test(opts.moduleDir)))
    throw new LeaseholdError(
      'E_KCLIENT_INIT',
      `module dir '${opts.moduleDir}' must be an absolute path without spaces`,
    );
  return [
    '#!/bin/sh',
    '# Rendered by leasehold dev/kernel-client/guest-init.ts: PID 1 of a UML kernel client.',
    'mount -t proc proc /proc',
    'mount -t sysfs sys /sys',
    'mount -t tmpfs -o mode=755 run /run',
    'mkdir -p /run/lh/pids /run/mnt',
    `echo ${opts.hostname} > /proc/sys/kernel/hostname`,
    ...(opts.moduleDir ? [`modprobe -d ${opts.moduleDir} nfsv4 && modprobe -d ${opts.moduleDir} nfsv3`] : []),
    'ip link set lo up',
    `ip addr add ${opts.address}/30 dev eth0`,
    'ip link set eth0 up',
    `ip route add default via ${opts.gateway}`,
    'stty -echo 2>/dev/null',
    'lh_run() { id=$1; shift; out=$(eval "$*" 2>&1); rc=$?; [ -n "$out" ] && printf \'%s\\n\' "$out" | sed "s/^/@out $id /"; echo "@done $id $rc"; }',
    'lh_start() { tag=$1; shift; setsid sh -c "$*" </dev/null >/dev/console 2>&1 & echo $! > /run/lh/pids/$tag; }',
    'lh_stop() { kill -TERM "$(cat /run/lh/pids/$1)" 2>/dev/null; }',
    'lh_halt() { sync; echo o > /proc/sysrq-trigger; sleep 30; }',
    'echo "@ready $(uname -r)"',
    'while IFS= read -r line; do eval "$line"; done',
    'lh_halt',
    '',
  ].join('\n');
}

/** The console line that runs `command` as request `id` (answered by `@done id rc`). */
export function runLine(id: number, command: string): string {
  return `lh_run ${id} ${quoteShell(command)}\n`;
}

/** The console line that starts `command` in the background under `tag`. */
export function startLine(tag: string, command: string): string {
  if (!/^[a-z][a-z0-9-]*$/.test(tag))
    throw new LeaseholdError('E_KCLIENT_COMMAND', `workload tag '${tag}' must match [a-z][a-z0-9-]*`);
  return `lh_start ${tag} ${quoteShell(command)}\n`;
}

export function stopLine(tag: string): string {
  return `lh_stop ${tag}\n`;
}

export const HALT_LINE = 'lh_halt\n';
