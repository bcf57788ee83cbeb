/**
 * The pod, settings and lease both renewal-round test files (agent-renew-round*.test.ts)
 * start from: D 6 s, the round begun 2 s after the last proof, hedging at 500 ms (and off).
 */
import {
  type RoundAnswer,
  type RoundSettings,
  type RoundState,
  recordAnswer,
} from '../../agent/renew-round.ts';
import { type LeaseRecord, newLeaseRecord } from '../../lib/lease-record.ts';

export const ME = { podName: 'sm-vol-1-abcde', nodeName: 'node-a' };
export const SETTINGS: RoundSettings = { hedgeDelayMs: 500, retryPeriodMs: 500, requestTimeoutMs: 2_000 };
export const OFF: RoundSettings = { hedgeDelayMs: 0, retryPeriodMs: 500, requestTimeoutMs: 1_000 };
export const WALL0 = Date.UTC(2026, 0, 1);

/** Our lease, last renewed 2 s before WALL0, at resourceVersion 100. */
export function base(fields: Partial<LeaseRecord> = {}): LeaseRecord {
  return {
    ...newLeaseRecord('ns', 'vol-1', 6),
    holder: ME.podName,
    holderNode: ME.nodeName,
    resourceVersion: '100',
    renewTime: new Date(WALL0 - 2_000),
    ...fields,
  };
}

export const answer = (state: RoundState, id: number, a: RoundAnswer): RoundState =>
  recordAnswer(state, id, a, ME);
