/**
 * ganesha's grace periods from its log lines (pure). ganesha 4.3 logs at EVENT level
 * (src/SAL/nfs4_recovery.c): `NFS Server Now IN GRACE, duration <s>` when a grace period
 * starts (at every start, and on a DBus `grace` request) and `NFS Server Now NOT IN
 * GRACE` when it ends. The entrypoint passes every line through (ganesha-process.ts), so
 * counting them costs nothing and misses no period, however short (a scrape of ganesha's
 * `get_grace`, which the in-grace gauge reads, would miss one that ended between two).
 *
 * NB: with LEASEHOLD_NFS_LOG_LEVEL above EVENT (WARN, CRIT, …) ganesha does not log them
 * and the count stays 0; the in-grace gauge does not depend on the level.
 */

export type GraceEvent = { kind: 'started'; durationS: number } | { kind: 'ended' };

const STARTED = /NFS Server Now IN GRACE, duration (\d+)/;
const ENDED = /NFS Server Now NOT IN GRACE/;

/** The grace event one ganesha log line reports, if any. */
export function graceEventOf(line: string): GraceEvent | undefined {
  const started = STARTED.exec(line);
  if (started) return { kind: 'started', durationS: Number(started[1]) };
  return ENDED.test(line) ? { kind: 'ended' } : undefined;
}
