import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { failureReason } from '../../agent/agent-metrics.ts';
import { processMatches } from '../../agent/fence-targets.ts';
import { INITIAL_SERVER_CHECK_STATE, nextServerCheckState } from '../../agent/server-check.ts';
import { KubeApiError } from '../../lib/errors.ts';

describe('fence process matching rule', () => {
  it('matches comm exactly (cut to 15 characters by the kernel)', () => {
    assert.ok(processMatches('nfsd', 'nfsd', []));
    assert.ok(processMatches('ganesha-nfsd-server', 'ganesha-nfsd-se', []));
    assert.ok(!processMatches('nfs', 'nfsd', []));
  });
  it('matches the basename of any argv element, with or without extension', () => {
    assert.ok(processMatches('share-server', 'node', ['node', '/app/share-server.js', '--port', '2049']));
    assert.ok(processMatches('share-server', 'MainThread', ['/usr/local/bin/share-server']));
    assert.ok(processMatches('share-server.js', 'node', ['node', 'share-server.js']));
  });
  it('does not match on substrings or directories', () => {
    assert.ok(!processMatches('share', 'node', ['node', '/app/share-server.js']));
    assert.ok(!processMatches('app', 'node', ['node', '/app/share-server.js']));
    assert.ok(!processMatches('server', 'sh', ['sh', '-c', 'echo server']));
  });
});

describe('server check policy', () => {
  const fail = { ok: false as const, detail: 'refused' };
  const ok = { ok: true as const };
  it('does not count failures before the server has passed once (still starting)', () => {
    let state = INITIAL_SERVER_CHECK_STATE;
    for (let i = 0; i < 10; i++) {
      const next = nextServerCheckState(state, fail, 3);
      assert.equal(next.fence, false);
      state = next.state;
    }
    assert.equal(state.consecutiveFailures, 0);
  });
  it('fences after N consecutive failures; a success resets the count', () => {
    let state = nextServerCheckState(INITIAL_SERVER_CHECK_STATE, ok, 3).state;
    state = nextServerCheckState(state, fail, 3).state;
    state = nextServerCheckState(state, fail, 3).state;
    state = nextServerCheckState(state, ok, 3).state;
    assert.equal(state.consecutiveFailures, 0);
    state = nextServerCheckState(state, fail, 3).state;
    state = nextServerCheckState(state, fail, 3).state;
    assert.deepEqual(nextServerCheckState(state, fail, 3), {
      state: { seenHealthy: true, consecutiveFailures: 3 },
      fence: true,
    });
  });
});

describe('failure reasons for metrics', () => {
  it('classifies API errors by status, conflicts, timeouts and unreachable', () => {
    assert.equal(failureReason(new KubeApiError('updating lease ns/a', 503)), 'http_503');
    assert.equal(failureReason(new KubeApiError('updating lease ns/a', 409)), 'conflict');
    const timeout = new DOMException('The operation was aborted due to timeout', 'TimeoutError');
    assert.equal(
      failureReason(new KubeApiError('updating lease ns/a', undefined, { cause: timeout })),
      'timeout',
    );
    // lib statusOf() reads a DOMException's code (23 = TIMEOUT_ERR) as a status: still a timeout.
    assert.equal(failureReason(new KubeApiError('updating lease ns/a', 23, { cause: timeout })), 'timeout');
    const refused = new Error('connect ECONNREFUSED 127.0.0.1:6443');
    assert.equal(
      failureReason(new KubeApiError('updating lease ns/a', undefined, { cause: refused })),
      'unreachable',
    );
  });
});
