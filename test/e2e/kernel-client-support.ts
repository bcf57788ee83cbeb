/**
 * The Linux kernel NFS client as a scenario's witness (issue 25 item 4): a UML kernel
 * client (dev/kernel-client) on a real node, mounted with what the share publishes
 * (status.export: source and mountOptions) and running a user's workloads (writer with
 * fsync'd records, O_DIRECT reader, fcntl lock holder with I/O through its locked fd,
 * creator of new locked files), beside the libnfs writer (RealNfsClient) where a
 * scenario has one.
 *
 * The same shape as RealNfsClient: start, markFault right before the fault, waitResumed
 * from when the server came back, assertClientView. Asserted there: every workload
 * succeeded after the fault (so the lock holder's fd works: its lock was kept or
 * reclaimed, not lost), no ESTALE, every acknowledged record read back from the volume
 * byte for byte. Not asserted here: how long the client stalled (printed; the figures
 * are the bench's, bench/kernel-client/run.ts). Every client started is stopped by
 * useRealSystem's after hook too, so a failed scenario leaves no machine running.
 */
import assert from 'node:assert/strict';
import type { KernelName } from '../../dev/kernel-client/kernels.ts';
import { type KernelClient, startKernelClient } from '../../dev/kernel-client/machine.ts';
import {
  allResumed,
  consoleSince,
  eventsOf,
  filesOf,
  mountShare,
  RECORD_SIZE,
  stallLines,
  stallsOf,
  startUserWorkloads,
  tagOf,
  USER_WORKLOADS,
  type UserWorkload,
} from '../../dev/kernel-client/user-workloads.ts';
import { checkReadBack } from '../../dev/kernel-client/workload-analysis.ts';
import { readRealShareFile } from '../../dev/system/real-share.ts';
import { type RealSystem, SHARES_NAMESPACE } from '../../dev/system/real-system.ts';
import { shareStatus } from '../../dev/system/shares.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { k8s } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';

const open = new Set<RealKernelClient>();

/** Stops every kernel client still running (useRealSystem's after hook). */
export async function stopOpenKernelClients(): Promise<void> {
  for (const c of [...open]) await c.stop();
}

export class RealKernelClient {
  readonly faultsMs: number[] = [];
  private constructor(
    private readonly sys: RealSystem,
    readonly share: string,
    readonly kc: KernelClient,
  ) {}

  /**
   * Boots a `kernel` client named `name` on `node` (TAP index `index`, unique among the
   * node's clients), mounts the share as published and starts the workloads; resolves
   * once its writer has 5 acknowledged records.
   */
  static async start(
    sys: RealSystem,
    share: string,
    node: string,
    opts: { name: string; index: number; kernel?: KernelName },
  ): Promise<RealKernelClient> {
    const exported = await eventually(
      `${share}: status.export (source and mountOptions)`,
      async () => {
        const e = (await shareStatus(sys, share)).export;
        return e?.source && e.mountOptions ? { source: e.source, options: e.mountOptions } : undefined;
      },
      30_000,
      200,
    );
    const kc = await startKernelClient(sys.node(node), {
      name: opts.name,
      index: opts.index,
      kernel: opts.kernel ?? '6.12',
    });
    const client = new RealKernelClient(sys, share, kc);
    open.add(client);
    try {
      await mountShare(kc, exported.source, exported.options);
      await startUserWorkloads(kc);
      await kc.waitForLine((l) => l.startsWith(`${tagOf(kc.name, 'write')} ack 5`), 30_000);
    } catch (err) {
      await client.stop();
      throw err;
    }
    return client;
  }

  get label(): string {
    return `${this.kc.name} (Linux ${this.kc.kernel.name})`;
  }

  /** Marks a fault now (CLOCK_MONOTONIC, the console lines' clock): call right before it. */
  markFault(): number {
    const ms = monotonicMs();
    this.faultsMs.push(ms);
    return ms;
  }

  /** `kc`'s console since the last fault (or `sinceMonoMs`), for a message. */
  console(sinceMonoMs?: number): string {
    return consoleSince(this.kc, sinceMonoMs ?? this.faultsMs.at(-1) ?? 0);
  }

  /** Whether every workload succeeded after `sinceMonoMs` (CLOCK_MONOTONIC). */
  resumedSince(sinceMonoMs: number): boolean {
    return allResumed(this.kc, sinceMonoMs);
  }

  /** When each of the writer's acknowledged writes came (CLOCK_MONOTONIC ms), in order. */
  acksMs(): number[] {
    return eventsOf(this.kc, tagOf(this.kc.name, 'write'))
      .filter((e) => e.kind === 'ack')
      .map((e) => e.atMs);
  }

  /** The lock workload after `sinceMonoMs`: its first success, or that it has none (and its errors). */
  lockAfter(sinceMonoMs: number): string {
    const lock = stallsOf(this.kc, sinceMonoMs).lock;
    const first = lock.firstSuccessAfter?.atMs;
    return first !== undefined
      ? `worked again ${((first - sinceMonoMs) / 1000).toFixed(2)} s after the replacement served (its lock kept or reclaimed)`
      : `never worked again (${lock.outcome}; its lock lost)`;
  }

  /** When the writer's first acknowledged write after `sinceMonoMs` came, if one did. */
  firstWriteAfterMs(sinceMonoMs: number): number | undefined {
    return stallsOf(this.kc, sinceMonoMs).write.firstSuccessAfter?.atMs;
  }

  /**
   * Waits until every workload (or those of `workloads`) succeeded after `sinceMonoMs`
   * (default: the last fault).
   * NB: pass when the replacement served where the old server may answer after the mark.
   */
  async waitResumed(
    timeoutMs: number,
    sinceMonoMs?: number,
    workloads: readonly UserWorkload[] = USER_WORKLOADS,
  ): Promise<void> {
    const since = sinceMonoMs ?? this.faultsMs.at(-1) ?? 0;
    const stalls = () => stallsOf(this.kc, since);
    await eventually(
      `${this.share}: ${workloads.join(', ')} of ${this.label} succeeded again`,
      async () => (workloads.every((w) => stalls()[w].outcome === 'resumed') ? true : undefined),
      timeoutMs,
      250,
    ).catch(async (err: Error) => {
      const fault = this.faultsMs.at(-1) ?? since;
      throw new Error(
        `${err.message}; the share's routing now: ${await this.routing()}; its console since the fault:\n${consoleSince(this.kc, fault)}`,
      );
    });
  }

  /** The share's Service selector, EndpointSlices (who wrote each, its addresses) and pods, for a failure message. */
  private async routing(): Promise<string> {
    try {
      const svc = await this.sys.core.readNamespacedService({
        namespace: SHARES_NAMESPACE,
        name: this.share,
      });
      const slices = await this.sys.kc.makeApiClient(k8s.DiscoveryV1Api).listNamespacedEndpointSlice({
        namespace: SHARES_NAMESPACE,
        labelSelector: `kubernetes.io/service-name=${this.share}`,
      });
      const pods = await this.sys.core.listNamespacedPod({
        namespace: SHARES_NAMESPACE,
        labelSelector: `leasehold.dev/share-manager=${this.share}`,
      });
      return JSON.stringify({
        selector: svc.spec?.selector ?? null,
        slices: slices.items.map((sl) => [
          sl.metadata?.name,
          sl.metadata?.labels?.['endpointslice.kubernetes.io/managed-by'],
          (sl.endpoints ?? []).flatMap((e) => e.addresses),
        ]),
        pods: pods.items.map((p) => [
          p.metadata?.name,
          p.status?.phase,
          p.status?.podIP,
          Boolean(p.metadata?.deletionTimestamp),
        ]),
      });
    } catch (err) {
      return `(not read: ${(err as Error).message})`;
    }
  }

  /**
   * Asserts the user's view across every marked fault: no ESTALE, each workload
   * succeeded after the last fault (unless `requireResumed` is false, for a scenario
   * that prints instead why it may not), every acknowledged record on the volume. Prints each
   * workload's stall; returns the writer's (seconds from the first fault to its first
   * acknowledged write after `servedMonoMs`, NaN if none).
   */
  assertClientView(label: string, servedMonoMs: number, opts: { requireResumed?: boolean } = {}): number {
    const fault = this.faultsMs[0];
    assert.ok(fault !== undefined, `${this.label}: markFault before assertClientView`);
    const lines = stallLines(this.kc, fault, servedMonoMs);
    process.stderr.write(`${label}: ${this.share} from ${lines.join('; ')}\n`);
    for (const [w, stall] of Object.entries(stallsOf(this.kc, fault)))
      assert.equal(stall.staleSeen, false, `${this.label} ${w}: no ESTALE`);
    if (opts.requireResumed !== false)
      assert.ok(allResumed(this.kc, this.faultsMs.at(-1) ?? fault), `${this.label}: every workload resumed`);
    const acks = eventsOf(this.kc, tagOf(this.kc.name, 'write')).filter((e) => e.kind === 'ack');
    const readBack = checkReadBack(
      acks,
      readRealShareFile(this.sys, this.share, filesOf(this.kc.name).write),
      RECORD_SIZE,
    );
    assert.equal(
      readBack.outcome,
      'intact',
      `${this.label}: acknowledged records lost: ${JSON.stringify(readBack.lost)}`,
    );
    const first = this.firstWriteAfterMs(servedMonoMs);
    return first === undefined ? Number.NaN : (first - fault) / 1000;
  }

  async stop(): Promise<void> {
    if (!open.delete(this)) return;
    await this.kc.stop();
  }
}
