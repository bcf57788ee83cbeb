/**
 * The agent's side of witness promises (lib/witness-protocol.ts; docs/design.md, "Serving
 * through an API outage"):
 *  - PromiseKeeper: while a renewal is overdue (R + hedge delay after the last proof), ask
 *    every witness for a promise every retry period; keep the latest of each. Its
 *    `deadlineMs(proof)` is the serving deadline the renew loop and /readyz use: the
 *    later of proof + T and the end of the q-th latest promise (each counted P from its
 *    request's SEND), never past proof + the cap when one is set.
 *  - awaitClearance: after taking the lease from a holder that did not release it, ask
 *    the previous holder's witnesses for clearances until a majority of its set cleared
 *    (or its cap passed since our acquisition); only then may the server start.
 *
 * Guarantees: a promise is credited only from an answer `promised` of a member of our
 * set, dated by the send of its request; no witnesses configured = the deadline is
 * proof + T exactly (today's rule).
 * Not guaranteed: that a witness answers; a lost answer is a promise not credited.
 */
import type { Clock } from '../lib/clock.ts';
import { sleep } from '../lib/clock.ts';
import type { Logger } from '../lib/logger.ts';
import { clearanceQuorum, type HeldPromise, servingDeadlineMs } from '../lib/witness-protocol.ts';
import type { AgentMetrics } from './agent-metrics.ts';
import type { AgentConfig } from './config.ts';
import { callWitness } from './witness-client.ts';

export const PROMISE_PATH = '/witness/promise';
export const CLEARANCE_PATH = '/witness/clearance';

type Call = typeof callWitness;

export interface WitnessDeps {
  config: AgentConfig;
  clock: Clock;
  log: Logger;
  metrics: AgentMetrics;
  call?: Call;
}

export class PromiseKeeper {
  private readonly latest = new Map<string, HeldPromise>();
  private readonly inFlight = new Set<string>();
  private readonly refusals = new Map<string, string>();
  private readonly names: string[];

  constructor(private readonly deps: WitnessDeps) {
    this.names = deps.config.witnesses.endpoints.map((e) => e.name);
  }

  get enabled(): boolean {
    return this.names.length > 0;
  }

  /** The serving deadline for a lease last proven by a renewal sent at `proofSentAtMs`. */
  deadlineMs(proofSentAtMs: number): number {
    const { renewDeadlineMs } = this.deps.config.timings;
    const byApi = proofSentAtMs + renewDeadlineMs;
    if (!this.enabled) return byApi;
    const end = servingDeadlineMs({
      apiProofSentAtMs: proofSentAtMs,
      renewDeadlineMs,
      promises: [...this.latest.values()],
      witnesses: this.names,
    });
    const cap = this.deps.config.witnesses.serveWithoutApiMs;
    return cap === undefined ? end : Math.min(end, Math.max(byApi, proofSentAtMs + cap));
  }

  /** Witnesses whose last answer refused a promise, with the reason (for the fence's log). */
  refusedBy(): Record<string, string> {
    return Object.fromEntries(this.refusals);
  }

  /** Asks while renewals are overdue, every retry period, until `stop`. */
  async run(proofSentAtMs: () => number, stop: AbortSignal): Promise<void> {
    if (!this.enabled) return;
    const { renewIntervalMs, hedgeDelayMs, retryPeriodMs } = this.deps.config.timings;
    const cap = this.deps.config.witnesses.serveWithoutApiMs;
    while (!stop.aborted) {
      const proof = proofSentAtMs();
      const now = this.deps.clock.now();
      const overdue = now - proof >= renewIntervalMs + hedgeDelayMs;
      if (overdue && (cap === undefined || now < proof + cap)) this.askAll();
      if (!overdue) this.refusals.clear();
      try {
        await sleep(retryPeriodMs, stop);
      } catch {
        return;
      }
    }
  }

  private askAll(): void {
    const { config, clock, log, metrics } = this.deps;
    const call = this.deps.call ?? callWitness;
    const { promiseMs } = config.witnesses;
    const marginMs = config.timings.leaseDurationMs - config.timings.renewDeadlineMs;
    for (const { name, url } of config.witnesses.endpoints) {
      if (this.inFlight.has(name)) continue;
      this.inFlight.add(name);
      const sentAtMs = clock.now();
      const body = {
        lease: `${config.namespace}/${config.leaseName}`,
        holder: config.podName,
        validForMs: promiseMs,
        marginMs,
      };
      call(name, url, PROMISE_PATH, body, promiseMs)
        .then((answer) => {
          const a = answer as { kind?: unknown; validForMs?: unknown; reason?: unknown };
          if (a.kind === 'promised' && typeof a.validForMs === 'number' && a.validForMs > 0) {
            const held = { witness: name, sentAtMs, validForMs: Math.min(a.validForMs, promiseMs) };
            const before = this.latest.get(name);
            if (!before || before.sentAtMs + before.validForMs < held.sentAtMs + held.validForMs)
              this.latest.set(name, held);
            this.refusals.delete(name);
            metrics.witnessAnswered('promise', 'promised');
            return;
          }
          const reason = typeof a.reason === 'string' ? a.reason : 'unknown';
          metrics.witnessAnswered('promise', `refused_${reason}`);
          if (this.refusals.get(name) !== reason)
            log.info({ witness: name, reason }, 'witness refused a promise');
          this.refusals.set(name, reason);
        })
        .catch((err: unknown) => {
          metrics.witnessAnswered('promise', 'failed');
          if (this.refusals.get(name) !== 'unreachable')
            log.info({ witness: name, err: String(err) }, 'witness did not answer a promise request');
          this.refusals.set(name, 'unreachable');
        })
        .finally(() => this.inFlight.delete(name));
    }
  }
}

export type ClearanceEnd = { kind: 'cleared'; by: string[] } | { kind: 'cap-passed' } | { kind: 'stopped' };

/**
 * Asks the previous holder's witnesses (names from its Lease, URLs from our own set) for
 * clearances every retry period, until a majority of its set cleared, its cap passed since
 * `acquiredSentAtMs`, or `stop`. A witness of its set we have no URL for cannot be asked:
 * logged once; the rest may still make the majority.
 */
export async function awaitClearance(
  deps: WitnessDeps,
  previous: { holder: string; witnesses: string[]; serveWithoutApiMs: number | undefined },
  acquiredSentAtMs: number,
  stop: AbortSignal,
): Promise<ClearanceEnd> {
  const { config, clock, log, metrics } = deps;
  const call = deps.call ?? callWitness;
  const urls = new Map(config.witnesses.endpoints.map((e) => [e.name, e.url]));
  const unknown = previous.witnesses.filter((w) => !urls.has(w));
  if (unknown.length > 0)
    log.warn(
      { witnesses: unknown },
      "witnesses of the previous holder's set are not in ours: they cannot be asked",
    );
  const cleared = new Set<string>();
  const inFlight = new Set<string>();
  const nextAskAt = new Map<string, number>();
  const waitSaid = new Map<string, unknown>();
  const body = { lease: `${config.namespace}/${config.leaseName}`, previousHolder: previous.holder };
  const { retryPeriodMs } = config.timings;
  while (!stop.aborted) {
    if (clearanceQuorum(cleared, previous.witnesses)) return { kind: 'cleared', by: [...cleared] };
    const cap = previous.serveWithoutApiMs;
    if (cap !== undefined && clock.now() >= acquiredSentAtMs + cap) return { kind: 'cap-passed' };
    for (const name of previous.witnesses) {
      const url = urls.get(name);
      if (url === undefined || cleared.has(name) || inFlight.has(name)) continue;
      if (clock.now() < (nextAskAt.get(name) ?? Number.NEGATIVE_INFINITY)) continue;
      nextAskAt.set(name, clock.now() + retryPeriodMs);
      inFlight.add(name);
      call(name, url, CLEARANCE_PATH, body, retryPeriodMs * 2)
        .then((answer) => {
          const a = answer as { kind?: unknown; reason?: unknown; retryInMs?: unknown };
          metrics.witnessAnswered('clearance', typeof a.kind === 'string' ? a.kind : 'unknown');
          if (a.kind === 'cleared') cleared.add(name);
          // Why the server waits: said once per witness and reason.
          else if (a.kind === 'wait' && waitSaid.get(name) !== a.reason) {
            waitSaid.set(name, a.reason);
            log.info({ witness: name, reason: a.reason, retryInMs: a.retryInMs }, 'clearance not given yet');
          }
        })
        .catch((err: unknown) => {
          metrics.witnessAnswered('clearance', 'failed');
          const reason = `no answer: ${err instanceof Error ? err.message : String(err)}`;
          if (waitSaid.get(name) !== reason) {
            waitSaid.set(name, reason);
            log.info({ witness: name, reason }, 'clearance not given yet');
          }
        })
        .finally(() => inFlight.delete(name));
    }
    try {
      await sleep(Math.min(retryPeriodMs, 100), stop);
    } catch {
      break;
    }
  }
  return { kind: 'stopped' };
}
