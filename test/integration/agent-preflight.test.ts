/**
 * The agent refuses to hold a lease it could not fence: with the `pod` fence outside a
 * pod's shared PID namespace (here: on the host, where it would signal the machine) or
 * without CAP_KILL (here: root with KILL removed from its capability bounding set, by
 * setpriv), it never acquires — so the server gated on /readyz never starts — and
 * /readyz, /healthz and one log line say why. The same agent with CAP_KILL acquires.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { useCluster } from '../support/cluster.ts';
import { agentEnv, cleanup, leaseApi, probe, readLease, spawnAgent, until } from './agent-harness.ts';

const cluster = useCluster({ scheduler: false, controllerManager: false });
after(cleanup);

async function refused(lease: string, env: Record<string, string>, wrapper: string[], why: RegExp) {
  const agent = spawnAgent(
    { ...agentEnv(lease, `${lease}-pod`, env), KUBECONFIG: cluster().kubeconfigPath },
    wrapper,
  );
  const started = await agent.waitForLog('agent started');
  const port = started.httpPort as number;
  const said = await until('the log line saying why', async () =>
    agent.lines.find((l) => String(l.msg).includes('not acquiring the lease')),
  );
  assert.match(String(said.msg), why);
  assert.equal(said.level, 'error', 'logged at error level');
  const ready = await probe(port, '/readyz');
  assert.equal(ready.status, 503);
  assert.match(ready.text, why);
  const health = await probe(port, '/healthz');
  assert.equal(health.status, 503);
  assert.match(health.text, why);
  // Long enough to have acquired several times over (an acquire takes ~10-100 ms).
  await new Promise((r) => setTimeout(r, 1_000));
  assert.equal(
    await readLease(leaseApi(cluster()), lease),
    undefined,
    'the lease was never created nor taken',
  );
  assert.equal(agent.lines.filter((l) => String(l.msg).includes('not acquiring')).length, 1, 'said once');
  agent.child.kill('SIGTERM');
  assert.equal((await agent.exited).code, 0);
}

describe('agent fence preflight', () => {
  it('the pod fence on a host (no pod PID namespace): never acquires, says why', async () => {
    await refused('pre-host', { LEASEHOLD_FENCE_ACTION: 'pod' }, [], /shareProcessNamespace/);
  });

  it('a signal fence without CAP_KILL: never acquires, says why', async () => {
    await refused(
      'pre-nokill',
      { LEASEHOLD_FENCE_ACTION: 'signal', LEASEHOLD_FENCE_PROCESS: 'share-server' },
      ['setpriv', '--inh-caps=-kill', '--bounding-set=-kill'],
      /needs CAP_KILL/,
    );
  });

  it('the same signal fence with CAP_KILL acquires (the check is not a blanket refusal)', async () => {
    const agent = spawnAgent({
      ...agentEnv('pre-kill', 'pre-kill-pod', {
        LEASEHOLD_FENCE_ACTION: 'signal',
        LEASEHOLD_FENCE_PROCESS: 'share-server',
      }),
      KUBECONFIG: cluster().kubeconfigPath,
    });
    const started = await agent.waitForLog('agent started');
    await agent.waitForLog('lease acquired');
    assert.equal((await probe(started.httpPort as number, '/readyz')).status, 200);
    assert.equal((await readLease(leaseApi(cluster()), 'pre-kill'))?.holder, 'pre-kill-pod');
    agent.child.kill('SIGTERM');
    assert.equal((await agent.exited).code, 0);
  });
});
