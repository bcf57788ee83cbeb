/**
 * Linux capability names by bit number (capabilities(7), up to CAP_CHECKPOINT_RESTORE =
 * 40, the kernel's cap_last_cap here), containerd's default set, and conversion to and
 * from the hex masks of /proc/<pid>/status. Names are the kernel's, with the CAP_ prefix,
 * as in an OCI spec. Pure.
 */
/** Linux capabilities by bit number (capabilities(7)); CAP_CHECKPOINT_RESTORE is 40. */
export const CAPABILITIES: readonly string[] = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_DAC_READ_SEARCH',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_LINUX_IMMUTABLE',
  'CAP_NET_BIND_SERVICE',
  'CAP_NET_BROADCAST',
  'CAP_NET_ADMIN',
  'CAP_NET_RAW',
  'CAP_IPC_LOCK',
  'CAP_IPC_OWNER',
  'CAP_SYS_MODULE',
  'CAP_SYS_RAWIO',
  'CAP_SYS_CHROOT',
  'CAP_SYS_PTRACE',
  'CAP_SYS_PACCT',
  'CAP_SYS_ADMIN',
  'CAP_SYS_BOOT',
  'CAP_SYS_NICE',
  'CAP_SYS_RESOURCE',
  'CAP_SYS_TIME',
  'CAP_SYS_TTY_CONFIG',
  'CAP_MKNOD',
  'CAP_LEASE',
  'CAP_AUDIT_WRITE',
  'CAP_AUDIT_CONTROL',
  'CAP_SETFCAP',
  'CAP_MAC_OVERRIDE',
  'CAP_MAC_ADMIN',
  'CAP_SYSLOG',
  'CAP_WAKE_ALARM',
  'CAP_BLOCK_SUSPEND',
  'CAP_AUDIT_READ',
  'CAP_PERFMON',
  'CAP_BPF',
  'CAP_CHECKPOINT_RESTORE',
];

/** containerd's default set (pkg/oci/spec.go defaultUnixCaps), in its order. */
export const CONTAINERD_DEFAULT_CAPS: readonly string[] = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_NET_RAW',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
];

/** A capability mask as /proc/<pid>/status shows it (hex) -> names, by bit order. */
export function capsFromMask(hex: string): string[] {
  const mask = BigInt(`0x${hex}`);
  return CAPABILITIES.filter((_, bit) => (mask >> BigInt(bit)) & 1n);
}

export function capsToMask(caps: readonly string[]): string {
  let mask = 0n;
  for (const cap of caps) {
    const bit = CAPABILITIES.indexOf(cap);
    if (bit >= 0) mask |= 1n << BigInt(bit);
  }
  return mask.toString(16).padStart(16, '0');
}
