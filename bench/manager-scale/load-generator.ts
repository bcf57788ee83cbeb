/**
 * One process renewing N Leases (each every `renewMs`, phases spread evenly) by CAS,
 * the way N agents would, so that the manager sees N agents' worth of watch traffic.
 * `stop(names)` ends some leases' renewals (their holders "die"); the time the last
 * renewal of each was sent and returned is kept for the detection-lag figures.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { type LeaseRecord, newLeaseRecord } from '../../lib/lease-record.ts';
import { KubeLeaseStore } from '../../lib/lease-store.ts';
import { reuseConnections } from '../../lib/reuse-connections.ts';

export interface RenewalRecord {
  lastSentAt: number;
  lastReturnedAt: number;
  renewals: number;
  failures: number;
  /** Longest time between two successful renewals returning: > D means really stale. */
  maxGapMs: number;
}

export class LoadGenerator {
  private readonly store: KubeLeaseStore;
  private readonly stopped = new Set<string>();
  private running = true;
  private loops: Promise<void>[] = [];
  readonly records = new Map<string, RenewalRecord>();

  constructor(
    kc: KubeConfig,
    private readonly namespace: string,
    readonly names: string[],
    private readonly renewMs: number,
    private readonly durationSeconds: number,
  ) {
    // NB: without connection reuse every renewal would be a new TLS handshake (see lib/reuse-connections.ts).
    this.store = new KubeLeaseStore(reuseConnections(kc));
  }

  async start(): Promise<void> {
    // Create (or take) every lease first, a few at a time.
    const leases = new Map<string, LeaseRecord>();
    for (let i = 0; i < this.names.length; i += 20) {
      await Promise.all(
        this.names.slice(i, i + 20).map(async (name) => leases.set(name, await this.acquire(name))),
      );
    }
    this.loops = this.names.map((name, i) =>
      this.loop(name, leases.get(name) as LeaseRecord, (i * this.renewMs) / this.names.length),
    );
  }

  stop(names: string[]): void {
    for (const n of names) this.stopped.add(n);
  }

  async close(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
  }

  private async acquire(name: string): Promise<LeaseRecord> {
    const existing = await this.store.get(this.namespace, name, 5000);
    const base = existing ?? (await this.createBlank(name));
    const now = new Date();
    const out = await this.store.update(
      {
        ...base,
        holder: `${name}-pod`,
        holderNode: 'bench-node',
        acquireTime: now,
        renewTime: now,
        transitions: base.transitions + 1,
        durationSeconds: this.durationSeconds,
      },
      5000,
    );
    if (out.kind !== 'written') throw new Error(`acquiring ${name}: conflict`);
    this.records.set(name, {
      lastSentAt: Date.now(),
      lastReturnedAt: Date.now(),
      renewals: 0,
      failures: 0,
      maxGapMs: 0,
    });
    return out.lease;
  }

  private async createBlank(name: string): Promise<LeaseRecord> {
    const out = await this.store.create(
      newLeaseRecord(this.namespace, name, this.durationSeconds, { 'leasehold.dev/share-manager': name }),
      5000,
    );
    if (out.kind !== 'written') throw new Error(`creating ${name}: conflict`);
    return out.lease;
  }

  private async loop(name: string, first: LeaseRecord, offsetMs: number): Promise<void> {
    let lease = first;
    await sleep(offsetMs);
    const record = this.records.get(name) as RenewalRecord;
    let next = performance.now();
    while (this.running && !this.stopped.has(name)) {
      const sentAt = Date.now();
      try {
        // Like an agent with T = 4 s: a request is cut at the renew deadline.
        const out = await this.store.update({ ...lease, renewTime: new Date() }, 4000);
        if (out.kind === 'written') {
          lease = out.lease;
          const returnedAt = Date.now();
          if (record.renewals > 0)
            record.maxGapMs = Math.max(record.maxGapMs, returnedAt - record.lastReturnedAt);
          record.lastSentAt = sentAt;
          record.lastReturnedAt = returnedAt;
          record.renewals += 1;
        } else {
          record.failures += 1;
          lease = (await this.store.get(this.namespace, name, 4000)) ?? lease;
        }
      } catch {
        record.failures += 1;
      }
      next += this.renewMs;
      const wait = next - performance.now();
      if (wait > 0) await sleep(wait);
      else next = performance.now();
    }
  }
}
