/**
 * What a user's pods do on an RWX volume, run by a kernel client (machine.ts) on its
 * NFS mount: lh-kload's writer (numbered records, each acknowledged after fsync), reader
 * (O_DIRECT, so every read is the server's), lock holder (an fcntl write lock taken
 * before any fault, I/O through the locked fd every interval) and creator (a new file
 * per interval, write-locked before it is written: an OPEN with create and a new LOCK,
 * both of which a server in grace refuses), each under its own
 * tag; a second client's lock prober (F_SETLK on the holder's file: must always be
 * denied). Events are read from the client's console lines, stamped by the host as they
 * arrived (workload-lines.ts parses, workload-analysis.ts judges).
 *
 * Layout on the share: every client's files under `<mount>/<client name>/`, so clients
 * never share a file except the lock holder's, which the prober names.
 * Guarantees: mount() fails with the guest's own message; start() only after mount.
 * Not guaranteed: that a workload stops when told while its server is unreachable (a
 * hard mount's waits end only with the server's answer or SIGKILL; the machine's halt
 * ends them all).
 */
import { join } from 'node:path';
import { LeaseholdError } from '../../lib/errors.ts';
import { builtParts } from './kernels.ts';
import type { KernelClient } from './machine.ts';
import { checkReadBack, type ReadBack, type Stall, stallOf } from './workload-analysis.ts';
import { parseWorkloadLine, type WorkloadEvent } from './workload-lines.ts';

/** Where the guest mounts the share. */
export const GUEST_MOUNT = '/run/mnt';
export const RECORD_SIZE = 4096;

export const USER_WORKLOADS = ['write', 'read', 'lock', 'create'] as const;
export type UserWorkload = (typeof USER_WORKLOADS)[number];

export interface WorkloadFiles {
  /** Relative to the export's root (where the host reads them back from the volume). */
  write: string;
  lock: string;
  createDir: string;
}

export const filesOf = (client: string): WorkloadFiles => ({
  write: `${client}/write.bin`,
  lock: `${client}/lock.bin`,
  createDir: `${client}/created`,
});

export const tagOf = (client: string, workload: UserWorkload | 'probe' | 'verify') => `${client}-${workload}`;

/** Mounts `source` with `options` at GUEST_MOUNT (mount.nfs, as the kubelet would). */
export async function mountShare(
  kc: KernelClient,
  source: string,
  options: string,
  timeoutMs = 60_000,
): Promise<void> {
  await kc.run(`mount -t nfs -o ${options} ${source} ${GUEST_MOUNT}`, timeoutMs);
}

async function lhKload(): Promise<string> {
  return join(await builtParts(), 'lh-kload');
}

/** Starts the four user workloads of `kc`, every `intervalMs`; resolves once the lock is held. */
export async function startUserWorkloads(kc: KernelClient, intervalMs = 50): Promise<WorkloadFiles> {
  const bin = await lhKload();
  const files = filesOf(kc.name);
  const at = (rel: string) => `${GUEST_MOUNT}/${rel}`;
  await kc.run(`mkdir -p ${at(kc.name)}`);
  const from = kc.lines.length;
  kc.start(
    tagOf(kc.name, 'lock'),
    `${bin} lock ${tagOf(kc.name, 'lock')} ${at(files.lock)} ${intervalMs * 10}`,
  );
  await kc.waitForLine((t) => t === `${tagOf(kc.name, 'lock')} locked`, 30_000, from);
  kc.start(
    tagOf(kc.name, 'write'),
    `${bin} write ${tagOf(kc.name, 'write')} ${at(files.write)} ${intervalMs} ${RECORD_SIZE}`,
  );
  await kc.waitForLine((t) => t.startsWith(`${tagOf(kc.name, 'write')} ack `), 30_000, from);
  kc.start(
    tagOf(kc.name, 'read'),
    `${bin} read ${tagOf(kc.name, 'read')} ${at(files.write)} ${intervalMs * 2} ${RECORD_SIZE}`,
  );
  kc.start(
    tagOf(kc.name, 'create'),
    `${bin} create ${tagOf(kc.name, 'create')} ${at(files.createDir)} ${intervalMs * 4}`,
  );
  return files;
}

/** Starts `prober`'s F_SETLK attempts on `holder`'s lock file every `intervalMs`. */
export async function startLockProbe(
  prober: KernelClient,
  holder: string,
  intervalMs = 200,
): Promise<string> {
  const bin = await lhKload();
  const tag = tagOf(prober.name, 'probe');
  prober.start(tag, `${bin} probe ${tag} ${GUEST_MOUNT}/${filesOf(holder).lock} ${intervalMs}`);
  await prober.waitForLine((t) => t.startsWith(`${tag} denied `) || t.startsWith(`${tag} granted `), 30_000);
  return tag;
}

/**
 * Reads `writer`'s records 1..count through `reader`'s own mount (a second client sees
 * the first one's data); resolves with the verify event (verified or bad).
 */
export async function verifyFromOtherClient(
  reader: KernelClient,
  writer: string,
  count: number,
): Promise<WorkloadEvent> {
  const bin = await lhKload();
  const tag = tagOf(reader.name, 'verify');
  const from = reader.lines.length;
  await reader.run(
    `${bin} verify ${tag} ${GUEST_MOUNT}/${filesOf(writer).write} ${count} ${RECORD_SIZE} || true`,
    60_000,
  );
  const event = eventsOf(reader, tag, from).find((e) => e.kind === 'verified' || e.kind === 'bad');
  if (!event)
    throw new LeaseholdError(
      'E_KCLIENT_VERIFY',
      `${reader.name}: lh-kload verify printed neither verified nor bad`,
    );
  return event;
}

/** `tag`'s events from `kc`'s console lines (from line `fromIndex` on). */
export function eventsOf(kc: KernelClient, tag: string, fromIndex = 0): WorkloadEvent[] {
  const events: WorkloadEvent[] = [];
  for (const line of kc.lines.slice(fromIndex)) {
    // `@out ID ` prefixes a command's output (lh_run); the workload line follows it.
    const text = line.text.replace(/^@out \d+ /, '');
    const event = parseWorkloadLine(text, line.atMs);
    if (event?.tag === tag) events.push(event);
  }
  return events;
}

/**
 * True once every user workload of `kc` has succeeded after `sinceMs`. NB: pass the time
 * the replacement served, not the fault's: a call in flight at the fault may still
 * complete just after it (seen: an ack 10 ms after a crash), which is no resumption.
 */
export function allResumed(kc: KernelClient, sinceMs: number): boolean {
  return USER_WORKLOADS.every((w) => stallOf(eventsOf(kc, tagOf(kc.name, w)), sinceMs).outcome === 'resumed');
}

/** Each user workload's stall around `atMs` (stallOf), by workload. */
export function stallsOf(kc: KernelClient, atMs: number): Record<UserWorkload, Stall> {
  return Object.fromEntries(
    USER_WORKLOADS.map((w) => [w, stallOf(eventsOf(kc, tagOf(kc.name, w)), atMs)]),
  ) as Record<UserWorkload, Stall>;
}

/**
 * One line per workload: its first success after `sinceMs` (the replacement serving) in
 * seconds since `faultMs`, and its errors after the fault.
 */
export function stallLines(kc: KernelClient, faultMs: number, sinceMs: number): string[] {
  const fromFault = stallsOf(kc, faultMs);
  const fromServing = stallsOf(kc, sinceMs);
  return USER_WORKLOADS.map((w) => {
    const first = fromServing[w].firstSuccessAfter;
    const at = first === undefined ? 'never' : `+${((first.atMs - faultMs) / 1000).toFixed(2)} s`;
    const errors =
      fromFault[w].errorsAfter.map((g) => `${g.errno} x${g.count} (${g.ops.join('/')})`).join(', ') || 'none';
    return `${kc.name} (Linux ${kc.kernel.name}) ${w}: resumed ${at} after the fault; errors after it: ${errors}`;
  });
}

/**
 * `kc`'s console since `faultMs` without the workloads' success lines, in seconds since
 * it; a run of one repeated line (an error every interval) is one line with its count.
 */
export function consoleSince(kc: KernelClient, faultMs: number): string {
  const out: Array<{ from: number; to: number; text: string; n: number }> = [];
  for (const l of kc.lines) {
    if (l.atMs <= faultMs || / (ack|read|lockio|denied|created) \d+$/.test(l.text)) continue;
    const t = (l.atMs - faultMs) / 1000;
    const last = out.at(-1);
    if (last && last.text === l.text) {
      last.to = t;
      last.n++;
    } else out.push({ from: t, to: t, text: l.text, n: 1 });
  }
  return out
    .map((r) =>
      r.n === 1
        ? `  +${r.from.toFixed(2)} s ${r.text}`
        : `  +${r.from.toFixed(2)}..${r.to.toFixed(2)} s ${r.text} x${r.n}`,
    )
    .join('\n');
}

/**
 * `kc`'s acknowledged records against `content` (its write file read back from the
 * volume on the host) and through `other`'s own mount: the read-back (checkReadBack) and
 * the other client's verify event (verified, or bad naming the first bad record).
 */
export async function checkRecords(
  kc: KernelClient,
  other: KernelClient,
  content: Buffer,
): Promise<{ readBack: ReadBack; seen: WorkloadEvent }> {
  const acks = eventsOf(kc, tagOf(kc.name, 'write')).filter((e) => e.kind === 'ack');
  const readBack = checkReadBack(acks, content, RECORD_SIZE);
  return { readBack, seen: await verifyFromOtherClient(other, kc.name, readBack.acked) };
}
