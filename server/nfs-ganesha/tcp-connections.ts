/**
 * The NFS clients connected now (pure): ESTABLISHED TCP connections whose local port is
 * the NFS port, counted in the kernel's /proc/net/tcp and /proc/net/tcp6 tables (of the
 * network namespace of the reader: in a pod, the pod's, which ganesha shares).
 *
 * Why the kernel's table and not ganesha's `ShowClients` (org.ganesha.nfsd.clientmgr):
 * ganesha keeps a client record (by address) after the client disconnected, until it is
 * reaped, so it answers "known", not "connected"; and behind kube-proxy's masquerade
 * every client on one node shares an address, so one record stands for several clients.
 * A connection is what serves a client now. NB: a client with several connections
 * (Linux `nconnect=N`, session trunking) counts N; a listening socket (state 0A) never
 * counts, nor a connection closing (TIME_WAIT and the like).
 *
 * Format (Linux proc_net_tcp(5)): a header line, then one line a socket:
 * `sl local_address rem_address st …`, the addresses `HEXIP:HEXPORT`, the state hex
 * (01 ESTABLISHED).
 */

const ESTABLISHED = '01';

/** ESTABLISHED connections to local `port` in one /proc/net/tcp or tcp6 text. */
export function countEstablished(table: string, port: number): number {
  let count = 0;
  for (const line of table.split('\n').slice(1)) {
    const fields = line.trim().split(/\s+/);
    const local = fields[1];
    if (local === undefined || fields[3] !== ESTABLISHED) continue;
    const colon = local.lastIndexOf(':');
    if (colon > 0 && Number.parseInt(local.slice(colon + 1), 16) === port) count++;
  }
  return count;
}
