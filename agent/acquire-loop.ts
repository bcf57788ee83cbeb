/**
 * Acquisition: read the Lease, decide (lease-decision.ts), write by CAS, until held.
 * Creates the Lease when absent (labelled leasehold.dev/share-manager=<name>); the create
 * is itself the acquisition. A lost race (409) only sends it back to reading.
 *
 * Guarantees: returns `acquired` only after a write naming this pod succeeded, with the
 * monotonic time that write was SENT (the renew deadline counts from there). Every
 * request carries a deadline. While someone else holds the lease it re-reads every retry
 * period, so a holder that stops renewing is taken over D after this agent last saw its
 * resourceVersion change (never by comparing remote timestamps).
 * Logs one line per state change (waiting for a holder, reads failing, acquired).
 * The first time another pod holds it, onOtherHolder may stop this pod's own server: an
 * agent restarted in place (OOM-killed, crashed) can find its server still running while
 * another pod holds the lease, and nothing may prove that server's right to serve.
 */
import type { Clock } from '../lib/clock.ts';
import { sleep } from '../lib/clock.ts';
import { LABEL_SHARE_MANAGER, type LeaseRecord, newLeaseRecord } from '../lib/lease-record.ts';
import type { LeaseStore, WriteOutcome } from '../lib/lease-store.ts';
import type { Logger } from '../lib/logger.ts';
import type { AgentConfig } from './config.ts';
import { acquiredRecord, decideAcquire, type Identity, type Observation, observe } from './lease-decision.ts';

export type AcquireOutcome =
  | {
      kind: 'acquired';
      lease: LeaseRecord;
      sentAtMs: number;
      how: 'created' | 'free' | 'self' | 'delinquent' | 'expired';
      /**
       * Taken from a holder that did not release it (`delinquent`, `expired`) and counted
       * witness promises: its replacement's server waits for clearances (witness-promises.ts).
       */
      previous?: { holder: string; witnesses: string[]; serveWithoutApiMs: number | undefined };
    }
  | { kind: 'refused'; reason: 'self-delinquent'; lease: LeaseRecord }
  /** LEASEHOLD_ACQUIRE_TIMEOUT passed; `holder` is the last other holder seen ('' if none). */
  | { kind: 'timed-out'; holder: string }
  /** onOtherHolder stopped a server of this pod that ran while another pod held the lease. */
  | { kind: 'fenced'; holder: string }
  | { kind: 'stopped' };

export interface AcquireDeps {
  config: AgentConfig;
  store: LeaseStore;
  clock: Clock;
  log: Logger;
  /** Aborted on SIGTERM/SIGINT. */
  stop: AbortSignal;
  /**
   * Called once, the first time another pod is found holding the lease; true when it
   * stopped a server of this pod that was running (acquisition ends: `fenced`).
   */
  onOtherHolder?: (holder: string) => Promise<boolean>;
}

export async function acquireLease(deps: AcquireDeps): Promise<AcquireOutcome> {
  const { config, store, clock, log, stop } = deps;
  const { namespace, leaseName } = config;
  const { leaseDurationMs, retryPeriodMs, requestTimeoutMs } = config.timings;
  const me: Identity = { podName: config.podName, nodeName: config.nodeName };
  const witnesses = {
    names: config.witnesses.endpoints.map((e) => e.name),
    serveWithoutApiMs: config.witnesses.serveWithoutApiMs,
  };
  const startedAtMs = clock.now();
  let observation: Observation | undefined;
  let waitingFor = '';
  let askedOtherHolder = false;
  let failing = false;

  const pause = async (): Promise<boolean> => {
    try {
      await sleep(retryPeriodMs, stop);
      return true;
    } catch {
      return false; // stopped
    }
  };

  while (!stop.aborted) {
    let lease: LeaseRecord | undefined;
    let outcome: WriteOutcome | undefined;
    let sentAtMs = 0;
    try {
      lease = await store.get(namespace, leaseName, requestTimeoutMs);
      if (stop.aborted) break; // a planned stop during the read: do not start holding now
      const nowMs = clock.now();
      if (lease !== undefined) observation = observe(observation, lease, nowMs);
      const action = decideAcquire(lease, observation, me, leaseDurationMs, nowMs, config.takeExpired);
      if (failing) log.info('lease reads recovered');
      failing = false;
      if (action.kind === 'refuse')
        return { kind: 'refused', reason: action.reason, lease: lease as LeaseRecord };
      if (action.kind === 'wait') {
        if (action.holder !== waitingFor) {
          log.info(
            { holder: action.holder, takeExpired: config.takeExpired },
            config.takeExpired
              ? 'lease held by another pod; waiting until it is free, delinquent or silent'
              : 'lease held by another pod; waiting until it is free or delinquent (a silent holder is left to the failover)',
          );
          const first = waitingFor === '' && !askedOtherHolder;
          waitingFor = action.holder;
          if (first && deps.onOtherHolder) {
            askedOtherHolder = true;
            if (await deps.onOtherHolder(action.holder)) return { kind: 'fenced', holder: action.holder };
          }
        }
        if (config.acquireTimeoutMs > 0 && nowMs - startedAtMs >= config.acquireTimeoutMs) {
          return { kind: 'timed-out', holder: action.holder };
        }
        if (!(await pause())) break;
        continue;
      }
      sentAtMs = clock.now();
      const wallNow = clock.wallNow();
      if (action.kind === 'create') {
        const blank = newLeaseRecord(namespace, leaseName, Math.ceil(leaseDurationMs / 1000), {
          [LABEL_SHARE_MANAGER]: leaseName,
        });
        outcome = await store.create(
          acquiredRecord(blank, me, leaseDurationMs, wallNow, witnesses),
          requestTimeoutMs,
        );
      } else {
        outcome = await store.update(
          acquiredRecord(lease as LeaseRecord, me, leaseDurationMs, wallNow, witnesses),
          requestTimeoutMs,
        );
      }
      if (outcome.kind === 'written') {
        const how = action.kind === 'create' ? 'created' : action.reason;
        const before = lease as LeaseRecord;
        const tookOver = (how === 'delinquent' || how === 'expired') && (before.witnesses ?? []).length > 0;
        return {
          kind: 'acquired',
          lease: outcome.lease,
          sentAtMs,
          how,
          ...(tookOver
            ? {
                previous: {
                  holder: before.holder,
                  witnesses: before.witnesses ?? [],
                  serveWithoutApiMs: before.serveWithoutApiMs,
                },
              }
            : {}),
        };
      }
      log.debug('lost a race for the lease (409); reading again');
    } catch (err) {
      if (!failing)
        log.warn({ err: String(err) }, 'reading or writing the lease failed; retrying every retry period');
      failing = true;
      if (config.acquireTimeoutMs > 0 && clock.now() - startedAtMs >= config.acquireTimeoutMs) {
        return { kind: 'timed-out', holder: waitingFor };
      }
      if (!(await pause())) break;
    }
  }
  return { kind: 'stopped' };
}
