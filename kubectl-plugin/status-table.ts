/**
 * `kubectl leasehold status` (pure): one row a share, sorted by namespace and name.
 *
 * HOLDER and NODE come from the share's Lease (holderIdentity and the
 * leasehold.dev/holder-node annotation its agent writes: lib/lease-record.ts), not from
 * status.pod, which the manager writes later; SERVED is why-verdict.ts's verdict;
 * LAST FAILOVER and TOOK come from status.lastFailover (TOOK: detection to the new
 * holder's acquisition, on the managers' wall clocks; `running` while it is not done).
 * Ages are as kubectl prints them (its HumanDuration), from `now` (the caller's clock:
 * for display only, nothing is decided on it).
 */
import { claimOf, type ShareSnapshot, shareKey } from './share-snapshot.ts';
import { failoverOrigin, failoverSeconds } from './timeline-lines.ts';
import { servingOf } from './why-verdict.ts';

const HEADER = [
  'NAMESPACE',
  'NAME',
  'CLAIM',
  'PHASE',
  'SERVED',
  'HOLDER',
  'NODE',
  'CONDITIONS',
  'LAST FAILOVER',
  'TOOK',
];

export function statusLines(shares: readonly ShareSnapshot[], now: Date, scope: string): string[] {
  if (shares.length === 0) return [`No ShareManagers ${scope}.`];
  const rows = [...shares]
    .sort((a, b) => shareKey(a.sm).localeCompare(shareKey(b.sm)))
    .map((s) => statusRow(s, now));
  return columns([HEADER, ...rows]);
}

function statusRow(s: ShareSnapshot, now: Date): string[] {
  const { sm, lease } = s;
  const lf = sm.status?.lastFailover;
  const origin = lf ? failoverOrigin(lf) : undefined;
  const took = lf ? failoverSeconds(lf) : undefined;
  const holderPod = s.pods.find((p) => lease?.holder && p.metadata?.name === lease.holder);
  return [
    sm.metadata.namespace ?? '',
    sm.metadata.name ?? '',
    claimOf(sm) ?? '-',
    sm.status?.state ?? '-',
    servingOf(s).served ? 'yes' : 'no',
    lease ? `${lease.holder || '(free)'}${lease.delinquentSince ? ' (delinquent)' : ''}` : '(no lease)',
    lease?.holderNode || holderPod?.spec?.nodeName || '-',
    conditionsText(sm.status?.conditions),
    lf
      ? `${origin ? `${humanDuration(now.getTime() - origin.getTime())} ago` : 'at ?'} from ${lf.lostNode || '(unknown)'}`
      : '-',
    lf ? (took !== undefined ? `${took.toFixed(2)} s` : 'running') : '-',
  ];
}

/** `Type=True`, and `Type=False(Reason)` where a reason says why it is False; '-' for none. */
export function conditionsText(
  conditions: ReadonlyArray<{ type: string; status: string; reason?: string }> | undefined,
): string {
  if (!conditions || conditions.length === 0) return '-';
  return conditions
    .map((c) => `${c.type}=${c.status}${c.status !== 'True' && c.reason ? `(${c.reason})` : ''}`)
    .join(',');
}

/** kubectl's HumanDuration: 45s, 3m12s, 95m, 5h4m, 30h, 3d4h, 40d, 2y30d. */
export function humanDuration(ms: number): string {
  const seconds = Math.floor(ms / 1000);
  if (seconds < -1) return '<invalid>';
  if (seconds < 0) return '0s';
  if (seconds < 120) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 10) return seconds % 60 === 0 ? `${minutes}m` : `${minutes}m${seconds % 60}s`;
  if (minutes < 180) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 8) return minutes % 60 === 0 ? `${hours}h` : `${hours}h${minutes % 60}m`;
  if (hours < 48) return `${hours}h`;
  const days = Math.floor(hours / 24);
  if (hours < 192) return hours % 24 === 0 ? `${days}d` : `${days}d${hours % 24}h`;
  if (days < 365 * 2) return `${days}d`;
  const years = Math.floor(days / 365);
  return days < 365 * 8 ? `${years}y${days % 365}d` : `${years}y`;
}

/** Rows as aligned columns, two spaces apart, the last column unpadded (as kubectl get prints). */
export function columns(rows: readonly (readonly string[])[]): string[] {
  const widths: number[] = [];
  for (const row of rows)
    for (const [i, cell] of row.entries()) widths[i] = Math.max(widths[i] ?? 0, cell.length);
  return rows.map((row) =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd(),
  );
}
