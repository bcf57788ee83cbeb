/**
 * Issue 27 item 8: every spec the agent or the shipped NFS server would refuse at start is
 * refused by the manager when it reads the ShareManager (status Error naming the field and
 * the rule), because the manager runs their own readers over the env it derives
 * (derived-config-check.ts). Each case below was accepted by the manager before and
 * refused only by the pod, at its start.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_STATUS_MESSAGE, summariseProblems } from '../../manager/reconciliation/decide-reconcile.ts';
import { resolveShare } from '../../manager/share-model/pod-spec.ts';
import type { ShareManager, ShareManagerSpec } from '../../manager/share-model/share-manager-spec.ts';

const settings = {
  defaults: { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 },
  agentImage: 'leasehold.dev/leasehold:dev',
  agentPort: 8081,
  agentServiceAccount: undefined,
  nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
  nonFencingStorage: 'require-node-down' as const,
};

const share = (spec: Partial<ShareManagerSpec>): ShareManager => ({
  metadata: { name: 'vol', namespace: 'ns', uid: 'u', generation: 1 },
  spec: { volume: { pvc: 'data' }, ...spec },
});
const userServer = { image: 'registry.example/server:1' };

const refused: [string, Partial<ShareManagerSpec>, RegExp][] = [
  [
    'a server check without a timeout when T - R = 1 s (the agent checks for 1 s by default)',
    { server: userServer, serverCheck: { target: 'tcp://127.0.0.1:80' }, lease: { renewInterval: '3s' } },
    /spec\.serverCheck\.timeout \(unset: the manager's default\).*the agent would refuse it.*LEASEHOLD_SERVER_CHECK_TIMEOUT=1s must be shorter/,
  ],
  [
    'retryPeriod under 10 ms',
    { lease: { retryPeriod: '5ms' } },
    /spec\.lease\.retryPeriod="5ms".*LEASEHOLD_RETRY_PERIOD/,
  ],
  ['renewInterval under 100 ms', { lease: { renewInterval: '50ms' } }, /spec\.lease\.renewInterval="50ms"/],
  ['a fence timeout under 10 ms', { fence: { timeout: '5ms', grace: '2ms' } }, /spec\.fence\.timeout="5ms"/],
  [
    'fence.signal SIGFOO',
    { fence: { signal: 'SIGFOO' } },
    /spec\.fence\.signal="SIGFOO".*LEASEHOLD_FENCE_SIGNAL/,
  ],
  [
    'a fence.process with "/"',
    { server: userServer, fence: { action: 'signal', process: '/usr/bin/x' } },
    /spec\.fence\.process="\/usr\/bin\/x".*no "\/"/,
  ],
  [
    'D over an hour',
    { lease: { duration: '7200s' } },
    /spec\.lease\.duration="7200s".*LEASEHOLD_LEASE_DURATION/,
  ],
  [
    "D - T under the server's tolerance floor (100 ms)",
    {
      lease: { duration: '4s', renewDeadline: '3950ms', renewInterval: '1s', retryPeriod: '500ms' },
      fence: { action: 'none' },
    },
    /spec\.lease\.duration minus spec\.lease\.renewDeadline.*shipped NFS server.*LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE/,
  ],
  [
    "D - T above the server's 600 s ceiling",
    { lease: { duration: '3600s', renewDeadline: '4s' } },
    /LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE/,
  ],
  [
    'a check timeout equal to T - R',
    { server: userServer, serverCheck: { target: 'tcp://127.0.0.1:80', timeout: '2s' } },
    /spec\.serverCheck\.timeout="2s".*must be shorter/,
  ],
  [
    'a check target without a port',
    { server: userServer, serverCheck: { target: 'tcp://127.0.0.1', timeout: '500ms' } },
    /spec\.serverCheck\.target="tcp:\/\/127\.0\.0\.1".*tcp:\/\/host:port/,
  ],
  [
    'fence.grace equal to fence.timeout',
    { fence: { grace: '1500ms', timeout: '1500ms' } },
    /spec\.fence\.grace=1500ms must be shorter than spec\.fence\.timeout.*SIGKILL/,
  ],
];

describe('one set of rules: the manager refuses what the agent or the server would', () => {
  for (const [what, spec, message] of refused) {
    it(what, () => {
      const resolved = resolveShare(share(spec), settings);
      assert.equal(resolved.ok, false, `accepted: ${JSON.stringify(spec)}`);
      assert.match(resolved.ok ? '' : resolved.message, message);
    });
  }

  for (const agentPort of [2049, 9587]) {
    it(`a manager whose agent port (LEASEHOLD_AGENT_PORT=${agentPort}) is one of the shipped server's: every default share refused, naming it`, () => {
      const resolved = resolveShare(share({}), { ...settings, agentPort });
      assert.equal(resolved.ok, false);
      assert.match(
        resolved.ok ? '' : resolved.message,
        new RegExp(`LEASEHOLD_NFS_LEASE_GATE_PORT=${agentPort}`),
      );
    });
  }

  it('the default spec and a user server with a sound check are accepted', () => {
    assert.equal(resolveShare(share({}), settings).ok, true);
    const own = resolveShare(
      share({ server: userServer, serverCheck: { target: 'tcp://127.0.0.1:80', timeout: '500ms' } }),
      settings,
    );
    assert.equal(own.ok, true, own.ok ? '' : own.message);
    const killAtOnce = resolveShare(share({ fence: { signal: 'SIGKILL', grace: '0s' } }), settings);
    assert.equal(killAtOnce.ok, true, killAtOnce.ok ? '' : killAtOnce.message);
  });
});

describe('a status that would be too large to write is summarised', () => {
  it('80,000 bad nfs.clients entries: status Error within the size limit, naming the first and the count', () => {
    const clients = Array.from({ length: 80_000 }, (_, i) => `bad client ${i}`);
    const resolved = resolveShare(share({ nfs: { clients } }), settings);
    assert.equal(resolved.ok, false);
    const message = summariseProblems(resolved.ok ? '' : resolved.message);
    assert.ok(message.length <= MAX_STATUS_MESSAGE, `${message.length} characters`);
    assert.match(message, /^spec\.nfs\.clients/);
    assert.match(message, /… and \d+ more problems? \(\d+ in all\)$/);
  });
  it('a short message is kept as it is', () => {
    assert.equal(summariseProblems('a; b'), 'a; b');
  });
});

describe('a mount path is exported as written, or refused', () => {
  for (const path of ['/a/../b', '/a/./b', '/a//b', '/a/b/', 'relative']) {
    it(`${path} is refused, naming it`, () => {
      const resolved = resolveShare(share({ volume: { pvc: 'data', mountPath: path } }), settings);
      assert.equal(resolved.ok, false);
      assert.match(
        resolved.ok ? '' : resolved.message,
        /spec\.volume\.mountPath=.*must be a normalised absolute path/,
      );
    });
  }
  it('"/a/../b": the message suggests "/b"', () => {
    const resolved = resolveShare(share({ volume: { pvc: 'data', mountPath: '/a/../b' } }), settings);
    assert.match(resolved.ok ? '' : resolved.message, /did you mean "\/b"\?/);
  });
});
