/**
 * lib/watch-backoff.ts: the informer's re-watch pause, decided without I/O. The point
 * of the rules: the delay grown while the API server was down must not be paid again
 * for each of its first answers after a restart (503 before its CRD paths are
 * installed, 403 before its RBAC cache is ready), while a server that keeps answering
 * with errors, or stays down, is still asked at most once per `maxMs`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { DEFAULT_WATCH_TIMEOUT, Informer, watchTimeoutProblems } from '../../lib/informer.ts';
import {
  DEFAULT_WATCH_BACKOFF,
  initialWatchBackoff,
  jitteredPauseMs,
  nextWatchBackoff,
  type WatchOutcome,
  watchBackoffProblems,
  watchOutcome,
} from '../../lib/watch-backoff.ts';

const policy = { initialMs: 200, maxMs: 10_000 };

/** The delays (before jitter) after each outcome in turn, from the start. */
function delays(outcomes: WatchOutcome[]): number[] {
  let b = initialWatchBackoff(policy);
  return outcomes.map((o) => {
    b = nextWatchBackoff(b, o, policy);
    return b.delayMs;
  });
}

describe('watch backoff', () => {
  it('doubles while the server is unreachable, up to maxMs, and stays there', () => {
    assert.deepEqual(
      delays(Array<WatchOutcome>(9).fill('unreachable')),
      [400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000, 10_000],
    );
  });

  it('starts over at the initial delay after data', () => {
    assert.deepEqual(
      delays(['unreachable', 'unreachable', 'unreachable', 'delivered']),
      [400, 800, 1600, 200],
    );
  });

  it("the server's first answer after it was unreachable starts over; further answers double again", () => {
    const outage = Array<WatchOutcome>(8).fill('unreachable');
    const after = delays([...outage, 'answered', 'answered', 'answered', 'delivered']).slice(outage.length);
    assert.deepEqual(after, [200, 400, 800, 200]);
  });

  it('a server that keeps answering with errors is still asked at most once per maxMs (no hot loop)', () => {
    const d = delays(['delivered', ...Array<WatchOutcome>(12).fill('answered')]);
    assert.equal(d.at(-1), policy.maxMs);
    for (const [i, ms] of d.entries())
      if (i > 0) assert.ok(ms >= (d[i - 1] as number), `never shrinks: ${d}`);
  });

  it('answers that alternate with outages restart at the initial delay only once per outage', () => {
    // refused, 503, refused, 503 ...: each 503 starts over, each refusal doubles from there.
    assert.deepEqual(
      delays(['unreachable', 'answered', 'unreachable', 'answered', 'unreachable', 'unreachable']),
      [400, 200, 400, 200, 400, 800],
    );
  });

  it('after a long outage, three early 503s cost 1.4 s before jitter, not three times maxMs', () => {
    const outage = Array<WatchOutcome>(20).fill('unreachable');
    const after = delays([...outage, 'answered', 'answered', 'answered']).slice(outage.length);
    const total = after.reduce((a, b) => a + b, 0);
    assert.equal(total, 200 + 400 + 800);
    // The rule it replaces (answers kept the grown delay) would have cost 3 x 10 s.
    assert.ok(total < policy.maxMs);
  });

  it('classifies each end of a watch or list', () => {
    const cases: [Parameters<typeof watchOutcome>[0], WatchOutcome][] = [
      [{ reason: 'ended', delivered: true }, 'delivered'],
      [{ reason: 'error', delivered: true }, 'delivered'], // the API server died mid-stream after data
      [{ reason: 'gone', delivered: false }, 'delivered'], // 410: re-list at once
      [{ reason: 'ended', delivered: false }, 'answered'], // opened (200) and ended empty
      [{ reason: 'error', delivered: false, status: 503 }, 'answered'],
      [{ reason: 'error', delivered: false, status: 403 }, 'answered'],
      [{ reason: 'error', delivered: false }, 'unreachable'], // refused, reset, list deadline
      [{ reason: 'quiet', delivered: false }, 'unreachable'], // half-open connection
    ];
    for (const [end, want] of cases) assert.equal(watchOutcome(end), want, JSON.stringify(end));
  });

  it('jitters the pause in [delay/2, delay)', () => {
    assert.equal(jitteredPauseMs(1000, 0), 500);
    assert.equal(jitteredPauseMs(1000, 0.5), 750);
    assert.ok(jitteredPauseMs(1000, 0.999_999) < 1000);
  });

  it('rejects a bad policy, naming the field and the rule', () => {
    assert.deepEqual(watchBackoffProblems(DEFAULT_WATCH_BACKOFF), []);
    assert.match(
      watchBackoffProblems({ initialMs: 0, maxMs: 100 }).join(),
      /backoff\.initialMs: 0 must be a positive/,
    );
    assert.match(
      watchBackoffProblems({ initialMs: 500, maxMs: 100 }).join(),
      /backoff\.maxMs: 100 must be >= /,
    );
    assert.throws(
      () =>
        new Informer({
          resource: 'leases',
          kubeConfig: new KubeConfig(),
          path: '/apis/coordination.k8s.io/v1/leases',
          backoff: { initialMs: 500, maxMs: 100 },
          onEvent: () => {},
        }),
      /informer of leases: backoff\.maxMs: 100 must be >= backoff\.initialMs \(500\)/,
    );
  });

  it('rejects a bad watch timeout, naming the field and the rule', () => {
    assert.deepEqual(watchTimeoutProblems(DEFAULT_WATCH_TIMEOUT), []);
    assert.deepEqual(watchTimeoutProblems({ minSeconds: 2, maxSeconds: 3 }), []);
    assert.match(
      watchTimeoutProblems({ minSeconds: 0, maxSeconds: 3 }).join(),
      /watchTimeout\.minSeconds: 0 must be a whole number of seconds >= 1/,
    );
    assert.match(
      watchTimeoutProblems({ minSeconds: 5, maxSeconds: 5 }).join(),
      /watchTimeout\.maxSeconds: 5 must be a whole number of seconds > watchTimeout\.minSeconds \(5\)/,
    );
    assert.throws(
      () =>
        new Informer({
          resource: 'leases',
          kubeConfig: new KubeConfig(),
          path: '/apis/coordination.k8s.io/v1/leases',
          watchTimeout: { minSeconds: 1.5, maxSeconds: 3 },
          onEvent: () => {},
        }),
      /informer of leases: watchTimeout\.minSeconds: 1\.5 must be/,
    );
  });
});
