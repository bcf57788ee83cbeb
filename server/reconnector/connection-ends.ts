/**
 * The node's side of ending a stale connection (the shell around stale-connections.ts):
 * its conntrack table read and its entries deleted with `conntrack` (conntrack-tools),
 * a socket of the node's own network namespace destroyed with `ss -K` (iproute2; the
 * kernel's SOCK_DESTROY, CONFIG_INET_DIAG_DESTROY), any other client tickled with the
 * native `tickle` beside this file (native/tickle.c says how).
 *
 * Order for one connection: the conntrack entry is deleted first, so that what the
 * client sends next is translated anew by kube-proxy (to the replacement); then the
 * socket is destroyed or the client tickled.
 *
 * Needs CAP_NET_ADMIN (conntrack, SOCK_DESTROY) and CAP_NET_RAW (the tickle), in the
 * node's network namespace (hostNetwork). Every call has a deadline and resolves to an
 * outcome naming the connection; none throws.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  type ConnectionToEnd,
  type ConntrackEntry,
  neighbourFromArp,
  parseConntrackLine,
} from './stale-connections.ts';

const CALL_DEADLINE_MS = 5_000;

/**
 * The native tickle: the image's one native build (server/nfs-ganesha/native/build.sh)
 * puts it beside the NFS server's entrypoint, in the same image.
 */
export const TICKLE_PATH = join(dirname(fileURLToPath(import.meta.url)), '..', 'nfs-ganesha', 'tickle');

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(file: string, args: readonly string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: CALL_DEADLINE_MS, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolve({ code, stdout, stderr: stderr || (err && code === -1 ? err.message : '') });
    });
  });
}

export class ConnectionEndError extends Error {
  constructor(
    readonly operation: string,
    detail: string,
  ) {
    super(`${operation}: ${detail}`);
    this.name = 'ConnectionEndError';
  }
}

/** TCP entries whose reply comes from `replySrc` (a gone address). conntrack exits 1 when none match. */
export async function conntrackEntriesFrom(replySrc: string): Promise<ConntrackEntry[]> {
  const r = await run('conntrack', ['-L', '-p', 'tcp', '--reply-src', replySrc]);
  if (r.code !== 0 && r.code !== 1)
    throw new ConnectionEndError(
      `conntrack -L --reply-src ${replySrc}`,
      `exit ${r.code}: ${r.stderr.trim()}`,
    );
  return r.stdout.split('\n').flatMap((line) => parseConntrackLine(line) ?? []);
}

/** This node's own addresses (the reconnector runs in its network namespace). */
export function localAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) out.add(a.address);
  return out;
}

export type EndOutcome = { ok: true; detail: string } | { ok: false; detail: string };

const describe = (e: ConntrackEntry) =>
  `${e.src}:${e.sport} -> ${e.dst}:${e.dport} (answered from ${e.replySrc})`;

/** Deletes the entry, then ends the connection as `end.how` says. */
export async function endConnection(end: ConnectionToEnd): Promise<EndOutcome> {
  const e = end.entry;
  const del = await run('conntrack', [
    '-D',
    '-p',
    'tcp',
    '--orig-src',
    e.src,
    '--orig-dst',
    e.dst,
    '--sport',
    String(e.sport),
    '--dport',
    String(e.dport),
  ]);
  // 1: already gone (the client or another scan ended it first): go on, the socket may still be there.
  if (del.code !== 0 && del.code !== 1)
    return { ok: false, detail: `${describe(e)}: conntrack -D exit ${del.code}: ${del.stderr.trim()}` };
  if (end.how === 'destroy-socket') {
    const ss = await run('ss', [
      '-K',
      '-t',
      'src',
      e.src,
      'dst',
      e.dst,
      'sport',
      '=',
      String(e.sport),
      'dport',
      '=',
      String(e.dport),
    ]);
    if (ss.code !== 0)
      return { ok: false, detail: `${describe(e)}: ss -K exit ${ss.code}: ${ss.stderr.trim()}` };
    return { ok: true, detail: `${describe(e)}: socket destroyed` };
  }
  const arp = await readFile('/proc/net/arp', 'utf8').catch(() => '');
  const neighbour = neighbourFromArp(arp, e.src);
  if (!neighbour) return { ok: false, detail: `${describe(e)}: no complete neighbour entry for ${e.src}` };
  const t = await run(TICKLE_PATH, [
    neighbour.device,
    neighbour.mac,
    e.dst,
    String(e.dport),
    e.src,
    String(e.sport),
  ]);
  if (t.code !== 0) return { ok: false, detail: `${describe(e)}: tickle exit ${t.code}: ${t.stderr.trim()}` };
  return { ok: true, detail: `${describe(e)}: tickled via ${neighbour.device}` };
}
