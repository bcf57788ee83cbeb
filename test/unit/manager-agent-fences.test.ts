/**
 * manager/detection/agent-fences.ts: which pod updates count as an agent's fence, on the
 * pod statuses a kubelet reports for a native-sidecar agent.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1ContainerState, V1Pod } from '@kubernetes/client-node';
import { agentFenced, fencedNow } from '../../manager/detection/agent-fences.ts';

function pod(
  agent: { state?: V1ContainerState; lastState?: V1ContainerState; name?: string },
  uid = 'u1',
): V1Pod {
  return {
    metadata: { name: 'vol-a-x1', namespace: 'ns', uid },
    status: {
      initContainerStatuses: [
        {
          name: agent.name ?? 'agent',
          image: 'leasehold',
          imageID: '',
          ready: false,
          restartCount: agent.lastState ? 1 : 0,
          ...(agent.state ? { state: agent.state } : {}),
          ...(agent.lastState ? { lastState: agent.lastState } : {}),
        },
      ],
    },
  };
}

const running = pod({ state: { running: {} } });
const exited = (exitCode: number): V1ContainerState => ({ terminated: { exitCode } });

describe('agentFenced', () => {
  it('is true for an agent ended with exit code 1, now or before the kubelet restarted it', () => {
    assert.equal(agentFenced(pod({ state: exited(1) })), true);
    assert.equal(agentFenced(pod({ state: { running: {} }, lastState: exited(1) })), true);
  });

  it('is false for a running agent, a released (0), misconfigured (2) or failed start (3), or another container', () => {
    assert.equal(agentFenced(running), false);
    for (const code of [0, 2, 3])
      assert.equal(agentFenced(pod({ state: exited(code) })), false, `exit ${code}`);
    assert.equal(agentFenced(pod({ state: exited(1), name: 'server' })), false);
    assert.equal(agentFenced({ metadata: { name: 'no-status' } }), false);
  });
});

describe('fencedNow', () => {
  it('counts the update that first shows the fence', () => {
    assert.equal(fencedNow(pod({ state: exited(1) }), running), true);
  });

  it('counts a pod once: a restarted agent that fences again is the same pod', () => {
    const first = pod({ state: exited(1) });
    const restartedAndFencedAgain = pod({ state: exited(1), lastState: exited(1) });
    assert.equal(fencedNow(restartedAndFencedAgain, first), false);
  });

  it('never counts a pod seen for the first time (its fence may predate this manager)', () => {
    assert.equal(fencedNow(pod({ state: exited(1) }), undefined), false);
  });

  it('never counts across pods: a previous object of another UID is no history', () => {
    assert.equal(fencedNow(pod({ state: exited(1) }, 'u2'), running), false);
  });
});
