import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseServerCheckTarget, readAgentConfig } from '../../agent/config.ts';
import { ConfigError } from '../../lib/errors.ts';

const BASE = {
  LEASEHOLD_LEASE_NAMESPACE: 'ns1',
  LEASEHOLD_LEASE_NAME: 'vol-1',
  LEASEHOLD_POD_NAME: 'vol-1-share-manager-abcde',
  LEASEHOLD_NODE_NAME: 'node-a',
};

/** The problems a ConfigError lists for `env`, or fails when the env is accepted. */
function problemsOf(env: Record<string, string>): readonly string[] {
  try {
    readAgentConfig({ ...BASE, ...env });
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected ConfigError, got ${String(err)}`);
    return err.problems;
  }
  assert.fail(`expected ${JSON.stringify(env)} to be rejected`);
}

function assertOneProblem(env: Record<string, string>, ...fragments: string[]): void {
  const problems = problemsOf(env);
  assert.equal(problems.length, 1, `expected one problem, got: ${problems.join(' | ')}`);
  for (const fragment of fragments)
    assert.ok(problems[0]?.includes(fragment), `"${problems[0]}" lacks "${fragment}"`);
}

describe('agent config', () => {
  it('applies the documented defaults', () => {
    const config = readAgentConfig(BASE);
    assert.deepEqual(config.timings, {
      leaseDurationMs: 6000,
      renewIntervalMs: 2000,
      renewDeadlineMs: 4000,
      retryPeriodMs: 500,
      // Hedging on: the request cap is the round's room T - R, the hedge after 500 ms.
      requestTimeoutMs: 2000,
      hedgeDelayMs: 500,
    });
    // No unfenced default: every process of the pod but the agent, SIGKILL after 750 ms,
    // the whole fence within 1.5 s (3/4 of D - T = 2 s).
    assert.deepEqual(config.fence, { action: 'pod', signal: 'SIGTERM', graceMs: 750, timeoutMs: 1500 });
    assert.equal(config.httpPort, 8081);
    assert.equal(config.logLevel, 'info');
    assert.equal(config.serverCheck, undefined);
    assert.equal(config.acquireTimeoutMs, 0);
  });

  it('names every missing required variable at once', () => {
    let problems: readonly string[] = [];
    try {
      readAgentConfig({});
    } catch (err) {
      problems = (err as ConfigError).problems;
    }
    for (const name of ['LEASE_NAMESPACE', 'LEASE_NAME', 'POD_NAME', 'NODE_NAME']) {
      assert.ok(
        problems.some((p) => p.startsWith(`LEASEHOLD_${name} is not set`)),
        `${name} missing from ${problems.join(' | ')}`,
      );
    }
  });

  it('rejects a bad object name with the value and the rule', () => {
    assertOneProblem(
      { LEASEHOLD_LEASE_NAME: 'Vol_1' },
      'LEASEHOLD_LEASE_NAME="Vol_1"',
      'Kubernetes object name',
    );
  });

  it('rejects an unparsable duration', () => {
    assertOneProblem({ LEASEHOLD_RENEW_INTERVAL: 'soon' }, 'LEASEHOLD_RENEW_INTERVAL="soon"', 'duration');
  });

  it('rule D > T', () => {
    assertOneProblem(
      { LEASEHOLD_LEASE_DURATION: '4s' },
      'LEASEHOLD_LEASE_DURATION=4s',
      'LEASEHOLD_RENEW_DEADLINE=4s',
      'D > T',
    );
  });

  it('rule T > R', () => {
    assertOneProblem(
      { LEASEHOLD_RENEW_INTERVAL: '4s' },
      'LEASEHOLD_RENEW_DEADLINE=4s',
      'LEASEHOLD_RENEW_INTERVAL=4s',
      'T > R',
    );
  });

  it('rule T - R >= retry period', () => {
    assertOneProblem(
      { LEASEHOLD_RENEW_INTERVAL: '3700ms' },
      'LEASEHOLD_RENEW_INTERVAL=3700ms',
      'LEASEHOLD_RETRY_PERIOD=500ms',
      'T - R >= retry period',
    );
    assert.equal(
      readAgentConfig({ ...BASE, LEASEHOLD_RENEW_INTERVAL: '3500ms' }).timings.renewIntervalMs,
      3500,
    );
  });

  it('hedging: defaults scale with T - R; off restores the 1 s cap; explicit values are kept', () => {
    const tight = readAgentConfig({ ...BASE, LEASEHOLD_RENEW_INTERVAL: '3200ms' }).timings;
    assert.deepEqual([tight.hedgeDelayMs, tight.requestTimeoutMs], [400, 800]);
    const off = readAgentConfig({ ...BASE, LEASEHOLD_HEDGE_DELAY: '0' }).timings;
    assert.deepEqual([off.hedgeDelayMs, off.requestTimeoutMs], [0, 1000]);
    const set = readAgentConfig({
      ...BASE,
      LEASEHOLD_HEDGE_DELAY: '300ms',
      LEASEHOLD_REQUEST_TIMEOUT: '1500ms',
    });
    assert.deepEqual([set.timings.hedgeDelayMs, set.timings.requestTimeoutMs], [300, 1500]);
  });

  it('rule hedge delay < request timeout', () => {
    assertOneProblem(
      { LEASEHOLD_REQUEST_TIMEOUT: '500ms' },
      'LEASEHOLD_HEDGE_DELAY=500ms',
      'LEASEHOLD_REQUEST_TIMEOUT=500ms',
      'hedge delay < request timeout',
    );
    assert.equal(
      readAgentConfig({ ...BASE, LEASEHOLD_REQUEST_TIMEOUT: '500ms', LEASEHOLD_HEDGE_DELAY: '0' }).timings
        .requestTimeoutMs,
      500,
    );
  });

  it('rule hedge delay < T - R', () => {
    assertOneProblem(
      { LEASEHOLD_HEDGE_DELAY: '2s', LEASEHOLD_REQUEST_TIMEOUT: '3s' },
      'LEASEHOLD_HEDGE_DELAY=2s',
      'LEASEHOLD_RENEW_DEADLINE=4s',
      'LEASEHOLD_RENEW_INTERVAL=2s',
      'hedge delay < T - R',
    );
  });

  it('rejects an unparsable hedge delay, naming it', () => {
    assertOneProblem({ LEASEHOLD_HEDGE_DELAY: 'fast' }, 'LEASEHOLD_HEDGE_DELAY="fast"', 'duration');
  });

  it('skips cross-field rules when a timing itself is invalid (no misleading second message)', () => {
    const problems = problemsOf({ LEASEHOLD_RENEW_DEADLINE: 'x', LEASEHOLD_LEASE_DURATION: '1s' });
    assert.equal(problems.length, 1);
    assert.ok(problems[0]?.startsWith('LEASEHOLD_RENEW_DEADLINE="x"'));
  });

  it('signal fence needs a process name; the signal must be known', () => {
    assertOneProblem(
      { LEASEHOLD_FENCE_ACTION: 'signal' },
      'LEASEHOLD_FENCE_PROCESS is not set',
      'FENCE_ACTION=signal',
    );
    assertOneProblem(
      {
        LEASEHOLD_FENCE_ACTION: 'signal',
        LEASEHOLD_FENCE_PROCESS: 'nfsd',
        LEASEHOLD_FENCE_SIGNAL: 'SIGNOPE',
      },
      'LEASEHOLD_FENCE_SIGNAL="SIGNOPE"',
      'must be one of',
    );
    const config = readAgentConfig({
      ...BASE,
      LEASEHOLD_FENCE_ACTION: 'signal',
      LEASEHOLD_FENCE_PROCESS: 'nfsd',
    });
    assert.deepEqual(config.fence, {
      action: 'signal',
      process: 'nfsd',
      signal: 'SIGTERM',
      graceMs: 750,
      timeoutMs: 1500,
    });
  });

  it('none is kept only when written explicitly', () => {
    assert.deepEqual(readAgentConfig({ ...BASE, LEASEHOLD_FENCE_ACTION: 'none' }).fence, { action: 'none' });
  });

  it('fence defaults scale with D - T, so any valid D > T has a valid fence', () => {
    const config = readAgentConfig({
      ...BASE,
      LEASEHOLD_LEASE_DURATION: '30s',
      LEASEHOLD_RENEW_DEADLINE: '10s',
    });
    assert.deepEqual(config.fence, { action: 'pod', signal: 'SIGTERM', graceMs: 7500, timeoutMs: 15000 });
  });

  it('the fence must end before any verdict: grace < timeout < D - T', () => {
    assertOneProblem({ LEASEHOLD_FENCE_TIMEOUT: '2s' }, 'LEASEHOLD_FENCE_TIMEOUT=2s', '(2s)', 'declare');
    assertOneProblem(
      { LEASEHOLD_FENCE_TIMEOUT: '1s', LEASEHOLD_FENCE_GRACE: '1s' },
      'LEASEHOLD_FENCE_GRACE=1s',
      'SIGKILL',
    );
    const config = readAgentConfig({
      ...BASE,
      LEASEHOLD_FENCE_TIMEOUT: '1900ms',
      LEASEHOLD_FENCE_GRACE: '0',
      LEASEHOLD_FENCE_SIGNAL: 'SIGKILL',
    });
    assert.deepEqual(config.fence, { action: 'pod', signal: 'SIGKILL', graceMs: 0, timeoutMs: 1900 });
  });

  it('refuses the renamed LEASEHOLD_FENCE_COMMAND_TIMEOUT instead of ignoring it', () => {
    assertOneProblem(
      {
        LEASEHOLD_FENCE_ACTION: 'command',
        LEASEHOLD_FENCE_COMMAND: 'true',
        LEASEHOLD_FENCE_COMMAND_TIMEOUT: '1s',
      },
      'LEASEHOLD_FENCE_COMMAND_TIMEOUT',
      'LEASEHOLD_FENCE_TIMEOUT',
    );
  });

  it('rejects an unknown fence action', () => {
    assertOneProblem({ LEASEHOLD_FENCE_ACTION: 'kill' }, 'LEASEHOLD_FENCE_ACTION="kill"', 'signal');
  });

  it('command fence needs a command and a timeout shorter than D - T', () => {
    assertOneProblem({ LEASEHOLD_FENCE_ACTION: 'command' }, 'LEASEHOLD_FENCE_COMMAND is not set');
    assertOneProblem(
      {
        LEASEHOLD_FENCE_ACTION: 'command',
        LEASEHOLD_FENCE_COMMAND: 'true',
        LEASEHOLD_FENCE_TIMEOUT: '2s',
      },
      'LEASEHOLD_FENCE_TIMEOUT=2s',
      '(2s)',
    );
  });

  it('validates the server check target and its timeout against T - R', () => {
    assertOneProblem(
      { LEASEHOLD_SERVER_CHECK: 'udp://x:1' },
      'LEASEHOLD_SERVER_CHECK="udp://x:1"',
      'tcp://host:port',
    );
    assertOneProblem(
      { LEASEHOLD_SERVER_CHECK: 'tcp://127.0.0.1:2049', LEASEHOLD_SERVER_CHECK_TIMEOUT: '2s' },
      'LEASEHOLD_SERVER_CHECK_TIMEOUT=2s',
    );
    assertOneProblem({ LEASEHOLD_SERVER_CHECK_FAILURES: '0' }, 'LEASEHOLD_SERVER_CHECK_FAILURES="0"');
  });

  it('rejects a bad port and a bad log level', () => {
    assertOneProblem({ LEASEHOLD_HTTP_PORT: '70000' }, 'LEASEHOLD_HTTP_PORT="70000"', '0 to 65535');
    assertOneProblem({ LEASEHOLD_LOG_LEVEL: 'loud' }, 'LEASEHOLD_LOG_LEVEL="loud"');
  });

  it('parses server check targets', () => {
    assert.deepEqual(parseServerCheckTarget('tcp://127.0.0.1:2049'), {
      kind: 'tcp',
      host: '127.0.0.1',
      port: 2049,
      text: 'tcp://127.0.0.1:2049',
    });
    assert.equal(parseServerCheckTarget('http://localhost:8080/healthz')?.kind, 'http');
    assert.equal(parseServerCheckTarget('tcp://host'), undefined);
    assert.equal(parseServerCheckTarget('tcp://host:1/path'), undefined);
    assert.equal(parseServerCheckTarget('nonsense'), undefined);
  });
});

describe('agent config: witnesses', () => {
  const THREE = 'a=http://10.0.0.1:8090,b=http://10.0.0.2:8090,c=http://w-c.ns.svc:8090';

  it('off by default; a set of three with P = T and no cap', () => {
    assert.deepEqual(readAgentConfig(BASE).witnesses, {
      endpoints: [],
      promiseMs: 4000,
      serveWithoutApiMs: undefined,
    });
    const on = readAgentConfig({ ...BASE, LEASEHOLD_WITNESSES: THREE, LEASEHOLD_SERVE_WITHOUT_API: '5m' });
    assert.deepEqual(
      on.witnesses.endpoints.map((e) => e.name),
      ['a', 'b', 'c'],
    );
    assert.equal(on.witnesses.endpoints[2]?.url, 'http://w-c.ns.svc:8090');
    assert.equal(on.witnesses.serveWithoutApiMs, 300_000);
  });

  it('refuses fewer than three, a name twice, a URL with a path, naming the entry', () => {
    assertOneProblem(
      { ...BASE, LEASEHOLD_WITNESSES: 'a=http://x:1,b=http://y:1' },
      'LEASEHOLD_WITNESSES',
      'at least 3',
    );
    assertOneProblem({ ...BASE, LEASEHOLD_WITNESSES: `${THREE},a=http://z:1` }, 'witness a is named twice');
    assertOneProblem(
      { ...BASE, LEASEHOLD_WITNESSES: 'a=http://x:1/p,b=http://y:1,c=http://z:1' },
      '"a=http://x:1/p"',
      'http://host:port',
    );
  });

  it('P at least two retry periods; a cap of 0 or at least T', () => {
    assertOneProblem(
      { ...BASE, LEASEHOLD_PROMISE_DURATION: '900ms' },
      'LEASEHOLD_PROMISE_DURATION=900ms',
      'twice',
    );
    assertOneProblem(
      { ...BASE, LEASEHOLD_SERVE_WITHOUT_API: '3s' },
      'LEASEHOLD_SERVE_WITHOUT_API=3s',
      'LEASEHOLD_RENEW_DEADLINE',
    );
  });
});
