/**
 * The NFS server's /metrics families (pure): one scrape's observations in, Prometheus
 * families out (written by lib/prom-text.ts). Names are under `leasehold_nfs_`; no share
 * label: one server serves one share, and the chart's PodMonitor adds `share` and `node`
 * to every series of the pod.
 *
 * Guarantees:
 *  - `leasehold_nfs_stats_up` is 1 only when every ganesha stats call of this scrape was
 *    answered and read; else 0, and every family read from ganesha is left out of the
 *    scrape (not a stale value shown as fresh: Prometheus marks the series stale).
 *  - the request and I/O families have a series for every enabled version and direction
 *    from the first good scrape on (0 until traffic), so `rate()` sees the first ops and
 *    the dashboard's label matchers always match; per-operation series appear with the
 *    operation's first use (ganesha lists only those).
 *  - latency counters are seconds summed over the ops, so
 *    `rate(…latency_seconds_total) / rate(…operations_total)` is the mean latency.
 *  - the connection and grace-period families come from the kernel and ganesha's log,
 *    not DBus: they stay when the stats cannot be read (connections are left out only
 *    when /proc/net/tcp cannot be read).
 */
import type { Family, Sample } from '../../lib/prom-text.ts';
import type { NfsVersion } from './config.ts';
import type { Parsed } from './dbus-reply.ts';
import type { IoDirection, IoStat, OpStat } from './ganesha-stats.ts';

export interface GaneshaStats {
  io: IoStat[];
  requests: Map<NfsVersion, number>;
  ops: OpStat[];
  inGrace: boolean;
}

export interface NfsObservations {
  /** The versions ganesha serves (config.ts): their series are there from the start. */
  versions: readonly NfsVersion[];
  stats: Parsed<GaneshaStats>;
  /** ESTABLISHED connections to the NFS port; undefined when /proc/net/tcp was unreadable. */
  connections: number | undefined;
  gracePeriodsStarted: number;
  /** How long this scrape's reads took. */
  scrapeSeconds: number;
}

const DIRECTIONS: readonly IoDirection[] = ['read', 'write'];

/** Counters by NFSv4 operation (GetFULLV4Stats): name after `leasehold_nfs_`, HELP, value. */
const OP_FAMILIES: readonly [string, string, (o: OpStat) => number][] = [
  ['operations_total', 'NFSv4 operations ganesha served, by operation (all minor versions)', (o) => o.total],
  ['operation_errors_total', 'NFSv4 operations that did not end NFS4_OK, by operation', (o) => o.errors],
  [
    'operation_latency_seconds_total',
    "Seconds NFSv4 operations took in ganesha, summed, by operation (from ganesha's mean)",
    (o) => o.latencySeconds,
  ],
];

/** Counters by version and direction (GetNFSIO). */
const IO_FAMILIES: readonly [string, string, (i: IoStat) => number][] = [
  [
    'io_operations_total',
    'READ and WRITE operations on the export, by protocol version and direction',
    (i) => i.ops,
  ],
  [
    'io_errors_total',
    'READ and WRITE operations on the export that failed, by protocol version and direction',
    (i) => i.errors,
  ],
  [
    'io_bytes_total',
    'Bytes read from and written to the export, by protocol version and direction',
    (i) => i.bytes,
  ],
  [
    'io_latency_seconds_total',
    'Seconds READ and WRITE operations took in ganesha, summed (rate over the operations rate: the mean latency)',
    (i) => i.latencySeconds,
  ],
];

export function nfsFamilies(o: NfsObservations): Family[] {
  const families: Family[] = [
    {
      name: 'leasehold_nfs_stats_up',
      help: "1 when this scrape read ganesha's statistics over its private DBus; 0 when it could not (the entrypoint logs why): the families read from ganesha are then left out",
      type: 'gauge',
      samples: [{ value: o.stats.ok ? 1 : 0 }],
    },
    {
      name: 'leasehold_nfs_stats_scrape_duration_seconds',
      help: "How long this scrape's reads of ganesha's statistics and /proc/net/tcp took",
      type: 'gauge',
      samples: [{ value: o.scrapeSeconds }],
    },
    {
      name: 'leasehold_nfs_grace_periods_total',
      help: 'Grace periods ganesha started (its log lines "NFS Server Now IN GRACE"), since the entrypoint started',
      type: 'counter',
      samples: [{ value: o.gracePeriodsStarted }],
    },
  ];
  if (o.connections !== undefined)
    families.push({
      name: 'leasehold_nfs_client_connections',
      help: 'ESTABLISHED TCP connections to the NFS port (the clients connected now; a client with nconnect=N counts N)',
      type: 'gauge',
      samples: [{ value: o.connections }],
    });
  if (o.stats.ok) families.push(...ganeshaFamilies(o.stats.value, o.versions));
  return families;
}

function ganeshaFamilies(s: GaneshaStats, versions: readonly NfsVersion[]): Family[] {
  const io = (pick: (i: IoStat) => number): Sample[] =>
    versions.flatMap((version) =>
      DIRECTIONS.map((direction) => {
        const found = s.io.find((i) => i.version === version && i.direction === direction);
        return { labels: { version, direction }, value: found ? pick(found) : 0 };
      }),
    );
  const byOp = (pick: (o: OpStat) => number): Sample[] =>
    s.ops.map((o) => ({ labels: { op: o.op }, value: pick(o) }));
  const family = (name: string, type: Family['type'], help: string, samples: Sample[]): Family => ({
    name: `leasehold_nfs_${name}`,
    help,
    type,
    samples,
  });
  return [
    family(
      'in_grace',
      'gauge',
      'Whether ganesha is in its NFSv4 grace period (new opens, locks, removes, renames and setattrs wait): 1 or 0',
      [{ value: s.inGrace ? 1 : 0 }],
    ),
    family(
      'requests_total',
      'counter',
      'NFS requests ganesha served, by protocol version (NFSv3 calls, NFSv4 COMPOUNDs)',
      versions.map((version) => ({ labels: { version }, value: s.requests.get(version) ?? 0 })),
    ),
    ...OP_FAMILIES.map(([name, help, pick]) => family(name, 'counter', help, byOp(pick))),
    ...IO_FAMILIES.map(([name, help, pick]) => family(name, 'counter', help, io(pick))),
  ];
}
