/**
 * ganesha 4.3's DBus statistics replies (pure): what each method answers, read from the
 * argument tree (dbus-reply.ts) into plain numbers. The shapes are ganesha V4.3's
 * (src/support/export_mgr.c export_stats_methods, src/support/server_stats.c,
 * src/MainNFSD/nfs_admin_thread.c), checked against the real ganesha in
 * test/integration/nfs-ganesha-metrics.test.ts:
 *  - `org.ganesha.nfsd.exportstats.GetNFSIO` (/org/ganesha/nfsd/ExportMgr): status b, message
 *    s, timestamp (tt), then `a(qs(tttttt)(tttttt))`: per export and protocol version that
 *    saw traffic, the READ and the WRITE struct (requested bytes, transferred bytes, ops,
 *    errors, latency in nanoseconds summed over the ops, queue wait (always 0)).
 *  - `GetGlobalOPS`: status, message, timestamp, then a struct of (name s, count t) pairs:
 *    NFSv3 calls and NFSv4.x COMPOUNDs (NFSv40, NFSv41, NFSv42), then NLM4, MNT, RQUOTA.
 *  - `GetFULLV4Stats` (needs Enable_FULLV4_Stats, ganesha-conf.ts): status, message,
 *    timestamp, `a(sttddd)` (operation, total, errors, mean/min/max latency in ms; a dummy
 *    entry named `None` when no operation was counted yet), a message.
 *  - `org.ganesha.nfsd.admin.get_grace` (/org/ganesha/nfsd/admin): in grace b, status b,
 *    message s.
 * Every reader returns an error value naming the method and what it found instead of a
 * guess: a reply of another shape (another ganesha version) is a failed scrape, not a
 * wrong number.
 */

import type { NfsVersion } from './config.ts';
import type { DbusValue, Parsed } from './dbus-reply.ts';

export type IoDirection = 'read' | 'write';

export interface IoStat {
  version: NfsVersion;
  direction: IoDirection;
  ops: number;
  errors: number;
  /** Bytes transferred (read or written). */
  bytes: number;
  latencySeconds: number;
}

export interface OpStat {
  op: string;
  total: number;
  errors: number;
  /** mean latency × total: ganesha gives the mean only (in ms, a double). */
  latencySeconds: number;
}

/** ganesha's protocol version names (server_stats.c) -> ours (config.ts). */
const VERSION_OF: Record<string, NfsVersion> = {
  NFSv3: '3',
  NFSv40: '4.0',
  NFSv41: '4.1',
  NFSv42: '4.2',
};

const fail = (method: string, what: string): { ok: false; error: string } => ({
  ok: false,
  error: `${method}: ${what}`,
});

/** The status (b) and message (s) every stats reply starts with; the rest after them. */
function afterStatus(method: string, args: DbusValue[]): Parsed<DbusValue[]> {
  const [status, message] = args;
  if (status?.kind !== 'boolean' || message?.kind !== 'string')
    return fail(method, `no status and message at the start of the reply`);
  if (!status.value) return fail(method, `ganesha answered ${JSON.stringify(message.value)}`);
  return { ok: true, value: args.slice(2) };
}

/** The entries (each a struct's items) of the array after status, message and timestamp. */
function entriesAfterTimestamp(method: string, args: DbusValue[], what: string): Parsed<DbusValue[][]> {
  const rest = afterStatus(method, args);
  if (!rest.ok) return rest;
  const [, list] = rest.value;
  if (list?.kind !== 'array') return fail(method, `no array of ${what} after the timestamp`);
  return { ok: true, value: list.items.map((entry) => (entry.kind === 'struct' ? entry.items : [])) };
}

function numbers(value: DbusValue | undefined, count: number): number[] | undefined {
  if (value?.kind !== 'struct' || value.items.length !== count) return undefined;
  const out = value.items.map((v) => (v.kind === 'number' ? v.value : Number.NaN));
  return out.some(Number.isNaN) ? undefined : out;
}

/** GetNFSIO: the READ and WRITE counters of export `exportId`, per version that saw traffic. */
export function nfsIoOf(args: DbusValue[], exportId: number): Parsed<IoStat[]> {
  const method = 'GetNFSIO';
  const entries = entriesAfterTimestamp(method, args, 'exports');
  if (!entries.ok) return entries;
  const out: IoStat[] = [];
  for (const [id, version, read, write] of entries.value) {
    if (id?.kind !== 'number' || version?.kind !== 'string')
      return fail(method, 'an entry without its export id and version');
    if (id.value !== exportId) continue;
    const ours = VERSION_OF[version.value];
    if (ours === undefined) continue;
    for (const [direction, value] of [
      ['read', read],
      ['write', write],
    ] as const) {
      const n = numbers(value, 6);
      if (!n) return fail(method, `the ${direction} counters of ${version.value} are not 6 integers`);
      const [, bytes, ops, errors, latencyNs] = n as [number, number, number, number, number];
      out.push({ version: ours, direction, ops, errors, bytes, latencySeconds: latencyNs / 1e9 });
    }
  }
  return { ok: true, value: out };
}

/** GetGlobalOPS: NFS requests (v3 calls, v4 COMPOUNDs) per version, server-wide. */
export function requestsOf(args: DbusValue[]): Parsed<Map<NfsVersion, number>> {
  const method = 'GetGlobalOPS';
  const rest = afterStatus(method, args);
  if (!rest.ok) return rest;
  const [, pairs] = rest.value;
  if (pairs?.kind !== 'struct' || pairs.items.length % 2 !== 0)
    return fail(method, 'no struct of (name, count) pairs after the timestamp');
  const out = new Map<NfsVersion, number>();
  for (let i = 0; i < pairs.items.length; i += 2) {
    const name = pairs.items[i];
    const count = pairs.items[i + 1];
    if (name?.kind !== 'string' || count?.kind !== 'number')
      return fail(method, `pair ${i / 2} is no (s, t)`);
    const version = VERSION_OF[name.value];
    if (version !== undefined) out.set(version, count.value);
  }
  return { ok: true, value: out };
}

/** GetFULLV4Stats: NFSv4 operations by name (all minor versions together), server-wide. */
export function v4OpsOf(args: DbusValue[]): Parsed<OpStat[]> {
  const method = 'GetFULLV4Stats';
  const entries = entriesAfterTimestamp(method, args, 'operations');
  if (!entries.ok) return entries;
  const out: OpStat[] = [];
  for (const [name, ...values] of entries.value) {
    const n = numbers({ kind: 'struct', items: values }, 5);
    if (name?.kind !== 'string' || !n) return fail(method, 'an entry is no (s, t, t, d, d, d)');
    const [total, errors, meanMs] = n as [number, number, number];
    // ganesha's placeholder while nothing was counted ("insert dummy stats to avoid dbus crash").
    if (name.value === 'None' && total === 0) continue;
    out.push({ op: name.value, total, errors, latencySeconds: (meanMs * total) / 1000 });
  }
  return { ok: true, value: out };
}

/** admin.get_grace: whether ganesha is in its grace period now. */
export function inGraceOf(args: DbusValue[]): Parsed<boolean> {
  const [inGrace, status, message] = args;
  if (inGrace?.kind !== 'boolean' || status?.kind !== 'boolean')
    return fail('get_grace', 'the reply is no (b, b, s)');
  if (!status.value)
    return fail(
      'get_grace',
      `ganesha answered ${JSON.stringify(message?.kind === 'string' ? message.value : '')}`,
    );
  return { ok: true, value: inGrace.value };
}
