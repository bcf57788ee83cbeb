/**
 * Which NFS client connections on this node still lead to a share's lost server (pure).
 *
 * A kernel NFS client (v4.1+) leaves a connection to a dead server only when TCP gives
 * up on it: 10 s after its first unanswered send on Linux 6.12, 18 s on 6.1 (measured,
 * docs/benchmarks.md), while the replacement serves about 7 s after a node crash. The
 * reconnector ends those connections the moment the replacement answers, so the client
 * reconnects at once, through kube-proxy, to the replacement.
 *
 * A share's routing is its EndpointSlice (the manager's, one per share): the addresses
 * listed now, and the addresses listed before and gone since (remembered for a while).
 * A connection to end is a TCP conntrack entry of this node whose original destination
 * is one of the share's Service addresses and ports and whose reply comes from a gone
 * address: kube-proxy translated it to the lost pod, and would keep doing so for as long
 * as the entry lives.
 *
 * Guarantees: only entries that match the share's Service address, a Service port and a
 * gone address are ever named (an unrelated pod that reuses the lost pod's address is
 * reached at another destination, so it is never touched); an address listed now is
 * never gone. Each entry says how its connection is ended: a socket of this node's own
 * network namespace (the kubelet's NFS mounts) is destroyed in place; any other (a pod's
 * or a VM's, behind this node) is told by a tickle (connection-ends.ts).
 * Not guaranteed: IPv6 (the tickle is IPv4 only; IPv6 entries are left alone).
 */

/** One TCP entry of the node's conntrack table: the original direction and the reply's source. */
export interface ConntrackEntry {
  state: string;
  /** Original direction: the client's address and port, and where it sent (a Service address). */
  src: string;
  sport: number;
  dst: string;
  dport: number;
  /** Where the reply comes from: the pod kube-proxy translated the destination to. */
  replySrc: string;
  replySport: number;
}

/** A share's routing as this node knows it. */
export interface ShareRouting {
  /** Addresses in the share's EndpointSlice now. */
  listed: ReadonlySet<string>;
  /** Addresses listed before and not now, with when they were last seen listed (ms). */
  gone: ReadonlyMap<string, number>;
}

export const NO_ROUTING: ShareRouting = { listed: new Set(), gone: new Map() };

/** What a new view of the share's slice changes. */
export interface RoutingChange {
  routing: ShareRouting;
  /** Whether connections may now lead to a gone address while another one is listed: end them once it serves. */
  endStale: boolean;
}

/**
 * The routing after the slice lists `listed` at `nowMs`. Addresses gone for longer than
 * `rememberMs` are forgotten (a client that kept a connection that long has given up
 * on it by itself). An address listed again is no longer gone.
 */
export function observeListed(
  prev: ShareRouting,
  listed: readonly string[],
  nowMs: number,
  rememberMs: number,
): RoutingChange {
  const now = new Set(listed);
  const gone = new Map<string, number>();
  for (const [address, lastMs] of prev.gone)
    if (!now.has(address) && nowMs - lastMs <= rememberMs) gone.set(address, lastMs);
  for (const address of prev.listed) if (!now.has(address)) gone.set(address, nowMs);
  const changed = now.size !== prev.listed.size || [...now].some((a) => !prev.listed.has(a));
  return { routing: { listed: now, gone }, endStale: changed && now.size > 0 && gone.size > 0 };
}

/** The share's Service as clients reach it. */
export interface ServiceTarget {
  addresses: readonly string[];
  ports: readonly number[];
}

export type EndHow = 'destroy-socket' | 'tickle';

export interface ConnectionToEnd {
  entry: ConntrackEntry;
  how: EndHow;
}

/**
 * The entries to end: to the Service's address and a Service port, answered from a gone
 * address. `localAddresses` are this node's own: a client there is a socket of this
 * network namespace.
 */
export function connectionsToEnd(
  entries: readonly ConntrackEntry[],
  service: ServiceTarget,
  routing: ShareRouting,
  localAddresses: ReadonlySet<string>,
): ConnectionToEnd[] {
  return entries
    .filter(
      (e) =>
        service.addresses.includes(e.dst) &&
        service.ports.includes(e.dport) &&
        routing.gone.has(e.replySrc) &&
        !routing.listed.has(e.replySrc) &&
        isIPv4(e.src),
    )
    .map((entry) => ({ entry, how: localAddresses.has(entry.src) ? 'destroy-socket' : 'tickle' }));
}

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

function isIPv4(address: string): boolean {
  const m = IPV4.exec(address);
  return m?.slice(1).every((o) => Number(o) <= 255) === true;
}

/**
 * One line of `conntrack -L -p tcp` (the default output), or undefined for any other
 * line (the summary conntrack prints, UDP, a line it cannot read). Example:
 * `tcp 6 299 ESTABLISHED src=10.202.1.2 dst=10.0.0.152 sport=42280 dport=2049
 * src=10.244.1.3 dst=10.201.0.3 sport=2049 dport=12319 [ASSURED] mark=0 use=1`
 */
export function parseConntrackLine(line: string): ConntrackEntry | undefined {
  const words = line.trim().split(/\s+/);
  if (words[0] !== 'tcp') return undefined;
  const state = words[3] ?? '';
  const fields = (key: string) =>
    words.filter((w) => w.startsWith(`${key}=`)).map((w) => w.slice(key.length + 1));
  const [src, replySrc] = fields('src');
  const [dst] = fields('dst');
  const [sport, replySport] = fields('sport').map(Number);
  const [dport] = fields('dport').map(Number);
  if (
    src === undefined ||
    dst === undefined ||
    replySrc === undefined ||
    !isPort(sport) ||
    !isPort(dport) ||
    !isPort(replySport) ||
    !/^[A-Z_]+$/.test(state)
  )
    return undefined;
  return { state, src, sport, dst, dport, replySrc, replySport };
}

function isPort(n: number | undefined): n is number {
  return n !== undefined && Number.isInteger(n) && n > 0 && n < 65536;
}

/** The link-layer address of `ip` on `device` from /proc/net/arp's text, if complete. */
export function neighbourFromArp(arpText: string, ip: string): { device: string; mac: string } | undefined {
  for (const line of arpText.split('\n').slice(1)) {
    const [address, , flags, mac, , device] = line.trim().split(/\s+/);
    // Flags 0x2 = ATF_COM: the entry is complete (an incomplete one has mac 00:00:...).
    if (address === ip && device && mac && (Number.parseInt(flags ?? '0', 16) & 0x2) !== 0)
      return { device, mac };
  }
  return undefined;
}
