/**
 * The witness's shell: the manager's POST /witness/promise and /witness/clearance, over
 * the rules of witness-rules.ts. The state lives in memory only (the rules say why a
 * restart is safe). The leases it knows come from the manager's own Lease informer (a
 * list after this process started, then its watch); every event the API server sends,
 * on any informer, counts as an answer of the API.
 *
 * A promise is asked when a holder cannot reach the API. If this witness has heard from
 * the API within `apiLostAfterMs`, it refuses at once; otherwise it reads the Lease
 * itself (a quorum GET, cut at `apiLostAfterMs`): an answer means the API is reachable
 * from here (refused, and the view refreshed); a failure means it is not, and the rules
 * decide. One read at a time serves every request that arrives meanwhile, and a failed
 * read stands for `apiLostAfterMs` (measured at 1,000 shares without it: every request
 * waited for a read that timed out, round trip p50 967 ms, bench/witness-cost).
 *
 * Not guaranteed: that the caller is the pod it names. Any pod that reaches this port can
 * ask; a false promise request only delays a replacement by a promise, a false clearance
 * only makes the named holder fence at T during an outage (today's behaviour without
 * witnesses). docs/design.md, "Serving through an API outage".
 */
import type { Clock } from '../../lib/clock.ts';
import type { JsonAnswer } from '../../lib/http-endpoints.ts';
import type { LeaseRecord } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import type { ManagerMetrics } from '../manager-metrics.ts';
import {
  apiAnswered,
  apiReachable,
  applyWitnessChange,
  decideClearance,
  decidePromise,
  type LeaseView,
  leaseGone,
  startWitness,
  type WitnessSettings,
  type WitnessState,
} from './witness-rules.ts';

export const WITNESS_PROMISE_PATH = '/witness/promise';
export const WITNESS_CLEARANCE_PATH = '/witness/clearance';

export interface WitnessDeps {
  clock: Clock;
  settings: WitnessSettings;
  /** A quorum read of one Lease, cut at `deadlineMs`; undefined when it does not exist. */
  readLease: (namespace: string, name: string, deadlineMs: number) => Promise<LeaseRecord | undefined>;
  log: Logger;
  metrics: ManagerMetrics;
  /**
   * A holder was refused because this witness reaches the API (its node is cut off from
   * the API alone, and it fences): said once per lease and holder.
   */
  onCutOffAlone?: (lease: string, holder: string) => void;
}

export class WitnessServer {
  private readonly state: WitnessState;
  private probe: Promise<void> | undefined;
  /** When the last read of a Lease failed: no new read for apiLostAfterMs after it. */
  private probeFailedAtMs = Number.NEGATIVE_INFINITY;
  /** `${lease} ${holder}` already said cut off (bounded: the oldest go first). */
  private readonly saidCutOff = new Set<string>();

  constructor(private readonly deps: WitnessDeps) {
    this.state = startWitness(deps.clock.now());
  }

  /** The API answered (any informer event). */
  heardFromApi(): void {
    apiAnswered(this.state, this.deps.clock.now());
  }

  /** A share Lease as the informer (or a read) saw it. */
  leaseSeen(lease: LeaseRecord): void {
    apiAnswered(this.state, this.deps.clock.now(), new Map([[key(lease), viewOf(lease)]]));
  }

  leaseDeleted(namespace: string, name: string): void {
    apiAnswered(this.state, this.deps.clock.now());
    leaseGone(this.state, `${namespace}/${name}`);
  }

  routes(): Record<string, (body: unknown) => Promise<JsonAnswer>> {
    return {
      [WITNESS_PROMISE_PATH]: (body) => this.promise(body),
      [WITNESS_CLEARANCE_PATH]: (body) => this.clearance(body),
    };
  }

  private async promise(body: unknown): Promise<JsonAnswer> {
    const request = parsePromiseRequest(body);
    if (typeof request === 'string') return this.bad('promise', request);
    const now = this.deps.clock.now();
    if (
      !apiReachable(this.state, now, this.deps.settings) &&
      now - this.probeFailedAtMs >= this.deps.settings.apiLostAfterMs
    )
      await this.readLease(request.lease);
    const decided = decidePromise(this.state, request, this.deps.clock.now(), this.deps.settings);
    applyWitnessChange(this.state, decided.change);
    const { answer } = decided;
    this.count('promise', answer.kind === 'promised' ? 'promised' : `refused_${answer.reason}`);
    if (answer.kind === 'refused' && answer.reason === 'api-reachable')
      this.cutOffAlone(request.lease, request.holder);
    if (answer.kind === 'promised')
      this.deps.log.debug({ lease: request.lease, holder: request.holder }, 'promise given');
    return { status: 200, body: answer };
  }

  private async clearance(body: unknown): Promise<JsonAnswer> {
    const request = parseClearanceRequest(body);
    if (typeof request === 'string') return this.bad('clearance', request);
    const decided = decideClearance(this.state, request, this.deps.clock.now(), this.deps.settings);
    applyWitnessChange(this.state, decided.change);
    this.count('clearance', decided.answer.kind);
    if (decided.answer.kind === 'cleared')
      this.deps.log.info(
        { lease: request.lease, holder: request.previousHolder },
        'replacement cleared: no promise to the previous holder any more',
      );
    return { status: 200, body: decided.answer };
  }

  private cutOffAlone(lease: string, holder: string): void {
    const key = `${lease} ${holder}`;
    if (this.saidCutOff.has(key)) return;
    this.saidCutOff.add(key);
    if (this.saidCutOff.size > 10_000)
      this.saidCutOff.delete(this.saidCutOff.values().next().value as string);
    this.deps.log.warn(
      { lease, holder },
      'a holder cannot reach the API while this witness can: its node is cut off alone and it fences',
    );
    this.deps.onCutOffAlone?.(lease, holder);
  }

  /** One quorum read at a time; its answer (or its failure) is what the rules then see. */
  private readLease(lease: string): Promise<void> {
    if (this.probe) return this.probe;
    const [namespace, name] = lease.split('/') as [string, string];
    this.probe = this.deps
      .readLease(namespace, name, this.deps.settings.apiLostAfterMs)
      .then(
        (record) => (record ? this.leaseSeen(record) : this.leaseDeleted(namespace, name)),
        () => {
          this.probeFailedAtMs = this.deps.clock.now(); // unreachable: the rules decide on what we knew
        },
      )
      .finally(() => {
        this.probe = undefined;
      });
    return this.probe;
  }

  private bad(request: 'promise' | 'clearance', problem: string): JsonAnswer {
    this.count(request, 'bad_request');
    return { status: 400, body: { error: problem } };
  }

  private count(request: string, answer: string): void {
    this.deps.metrics.witnessAnswers.inc({ request, answer });
  }
}

function key(lease: { namespace: string; name: string }): string {
  return `${lease.namespace}/${lease.name}`;
}

function viewOf(lease: LeaseRecord): LeaseView {
  return { holder: lease.holder, delinquent: lease.delinquentSince !== undefined };
}

const LEASE_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?\/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$/;

function field(body: unknown, name: string): unknown {
  return typeof body === 'object' && body !== null ? (body as Record<string, unknown>)[name] : undefined;
}

function leaseOf(body: unknown): string | { problem: string } {
  const lease = field(body, 'lease');
  return typeof lease === 'string' && LEASE_NAME.test(lease)
    ? lease
    : { problem: `lease=${JSON.stringify(lease)} must be "namespace/name" of a Lease` };
}

function podOf(body: unknown, name: string): string | { problem: string } {
  const pod = field(body, name);
  return typeof pod === 'string' && pod.length > 0 && pod.length <= 253
    ? pod
    : { problem: `${name}=${JSON.stringify(pod)} must be a pod name` };
}

function parsePromiseRequest(body: unknown) {
  const lease = leaseOf(body);
  if (typeof lease !== 'string') return lease.problem;
  const holder = podOf(body, 'holder');
  if (typeof holder !== 'string') return holder.problem;
  const validForMs = field(body, 'validForMs');
  const marginMs = field(body, 'marginMs');
  if (typeof validForMs !== 'number' || !Number.isFinite(validForMs) || validForMs <= 0)
    return `validForMs=${JSON.stringify(validForMs)} must be a number of milliseconds above 0`;
  if (typeof marginMs !== 'number' || !Number.isFinite(marginMs) || marginMs < 0)
    return `marginMs=${JSON.stringify(marginMs)} must be a number of milliseconds, 0 or more`;
  return { lease, holder, validForMs, marginMs };
}

function parseClearanceRequest(body: unknown) {
  const lease = leaseOf(body);
  if (typeof lease !== 'string') return lease.problem;
  const previousHolder = podOf(body, 'previousHolder');
  if (typeof previousHolder !== 'string') return previousHolder.problem;
  return { lease, previousHolder };
}
