/**
 * The simulator's kube-proxy stand-in, pure parts: which endpoint a new connection to a
 * Service port gets (service-routing.ts) and what an established connection does when
 * its backend's node or sockets change (service-connection.ts, every state x event).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import {
  type ConnectionEvent,
  type ConnectionState,
  initialState,
  nextState,
} from '../../dev/sim/network/service-connection.ts';
import {
  candidateEndpoints,
  type PortEndpoint,
  portEndpoints,
  type ResolvedEndpoint,
  routeNewConnection,
} from '../../dev/sim/network/service-routing.ts';

type Conditions = { ready?: boolean; serving?: boolean; terminating?: boolean };

function slice(
  name: string,
  port: { name?: string; port: number; protocol?: string },
  endpoints: Array<{ ip: string; node?: string; pod?: string; conditions?: Conditions }>,
  addressType = 'IPv4',
): V1EndpointSlice {
  return {
    addressType,
    metadata: { name, namespace: 'ns' },
    ports: [port],
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      ...(e.conditions ? { conditions: e.conditions } : {}),
      ...(e.node ? { nodeName: e.node } : {}),
      ...(e.pod ? { targetRef: { kind: 'Pod', name: e.pod } } : {}),
    })),
  };
}

test('endpoints of a Service port: by port name and TCP, IPv4 only, one per address, API condition defaults', () => {
  const slices = [
    slice('s-b', { name: 'nfs', port: 2049 }, [{ ip: '10.244.0.2', node: 'n1', pod: 'nfs-a' }]),
    slice('s-a', { name: 'nfs', port: 2050 }, [
      { ip: '10.244.0.3', conditions: { ready: false, serving: true, terminating: true } },
    ]),
    slice('s-c', { name: 'nfs', port: 2049 }, [{ ip: '10.244.0.2' }]),
    slice('s-d', { name: 'metrics', port: 9000 }, [{ ip: '10.244.0.9' }]),
    slice('s-e', { name: 'nfs', port: 2049, protocol: 'UDP' }, [{ ip: '10.244.0.8' }]),
    slice('s-f', { name: 'nfs', port: 2049 }, [{ ip: 'fd00::1' }], 'IPv6'),
  ];
  assert.deepEqual(portEndpoints(slices, 'nfs'), [
    {
      address: '10.244.0.3',
      port: 2050,
      nodeName: undefined,
      pod: undefined,
      ready: false,
      serving: true,
      terminating: true,
    },
    {
      address: '10.244.0.2',
      port: 2049,
      nodeName: 'n1',
      pod: 'ns/nfs-a',
      ready: true,
      serving: true,
      terminating: false,
    },
  ]);
  assert.deepEqual(portEndpoints(slices, ''), [], 'an unnamed Service port matches only unnamed slice ports');
});

const ep = (address: string, c: Conditions = {}): PortEndpoint => ({
  address,
  port: 2049,
  nodeName: 'n1',
  pod: undefined,
  ready: c.ready ?? true,
  serving: c.serving ?? c.ready ?? true,
  terminating: c.terminating ?? false,
});

test('candidates: the ready endpoints; without any, the serving terminating ones (kube-proxy fallback)', () => {
  const ready = ep('10.0.0.1');
  const terminatingServing = ep('10.0.0.2', { ready: false, serving: true, terminating: true });
  const notServing = ep('10.0.0.3', { ready: false, serving: false, terminating: true });
  const notReady = ep('10.0.0.4', { ready: false, serving: false });
  assert.deepEqual(candidateEndpoints([ready, terminatingServing, notServing]), [ready]);
  assert.deepEqual(candidateEndpoints([terminatingServing, notServing, notReady]), [terminatingServing]);
  assert.deepEqual(candidateEndpoints([notServing, notReady]), []);
});

const up = (hostPort: number | undefined): ResolvedEndpoint => ({ nodeState: 'running', hostPort });

test('a new connection: rejected without candidates, else a uniform pick, silent on a down node, reset without a listener', () => {
  assert.deepEqual(
    routeNewConnection(
      [],
      () => 0,
      () => up(1),
    ),
    { kind: 'reject', why: 'the Service has no endpoints' },
  );
  const notReady = routeNewConnection(
    [ep('10.0.0.9', { ready: false, serving: false })],
    () => 0,
    () => up(1),
  );
  assert.equal(notReady.kind, 'reject');
  assert.match((notReady as { why: string }).why, /none of the Service's 1 endpoint/);

  const three = [ep('10.0.0.1'), ep('10.0.0.2'), ep('10.0.0.3')];
  const ports = new Map([
    ['10.0.0.1', 41001],
    ['10.0.0.2', 41002],
    ['10.0.0.3', 41003],
  ]);
  const pick = (r: number) =>
    routeNewConnection(
      three,
      () => r,
      (e) => up(ports.get(e.address)),
    );
  assert.deepEqual(
    [0, 0.34, 0.99].map((r) => (pick(r) as { hostPort: number }).hostPort),
    [41001, 41002, 41003],
  );

  for (const nodeState of ['crashed', 'frozen', 'partitioned', 'stopped'] as const) {
    const silent = routeNewConnection(
      [ep('10.0.0.1')],
      () => 0,
      () => ({ nodeState, hostPort: 41001 }),
    );
    assert.deepEqual(silent, { kind: 'silent', endpoint: ep('10.0.0.1'), why: `node n1 is ${nodeState}` });
  }
  const gone = routeNewConnection(
    [ep('10.0.0.1')],
    () => 0,
    () => up(undefined),
  );
  assert.equal(gone.kind, 'reject', 'a running node with nothing behind the address answers with RST');
});

const DOWN = ['crashed', 'frozen', 'partitioned'] as const;
const EVENTS: ConnectionEvent[] = [
  { kind: 'node', condition: 'running' },
  ...DOWN.map((condition) => ({ kind: 'node', condition }) as const),
  { kind: 'upstream', how: 'end' },
  { kind: 'upstream', how: 'reset' },
  { kind: 'client', how: 'end' },
  { kind: 'client', how: 'reset' },
];
const silentStates = (): ConnectionState[] =>
  DOWN.flatMap((cause) =>
    [undefined, 'end', 'reset'].flatMap((upstreamGone) =>
      [undefined, 'end', 'reset'].map(
        (clientGone) =>
          ({
            kind: 'silent',
            cause,
            upstreamGone,
            clientGone,
          }) as ConnectionState,
      ),
    ),
  );

test('while the backend node is down, nothing reaches either side, whatever happens (every silent state x event)', () => {
  for (const state of silentStates())
    for (const event of EVENTS) {
      if (event.kind === 'node' && event.condition === 'running') continue;
      const { state: next, actions } = nextState(state, event);
      assert.deepEqual(actions, [], `${JSON.stringify(state)} + ${JSON.stringify(event)}`);
      assert.equal(next.kind, 'silent');
    }
});

test('a passing connection: the backend node going down holds it; FIN and RST pass while the node runs', () => {
  const passing: ConnectionState = { kind: 'passing' };
  for (const condition of DOWN)
    assert.deepEqual(nextState(passing, { kind: 'node', condition }), {
      state: { kind: 'silent', cause: condition, upstreamGone: undefined, clientGone: undefined },
      actions: ['hold'],
    });
  assert.deepEqual(nextState(passing, { kind: 'upstream', how: 'end' }), {
    state: passing,
    actions: ['end-client'],
  });
  assert.deepEqual(nextState(passing, { kind: 'upstream', how: 'reset' }), {
    state: { kind: 'closed' },
    actions: ['reset-client'],
  });
  assert.deepEqual(nextState(passing, { kind: 'client', how: 'end' }), {
    state: passing,
    actions: ['end-upstream'],
  });
  assert.deepEqual(nextState(passing, { kind: 'client', how: 'reset' }), {
    state: { kind: 'closed' },
    actions: ['reset-upstream'],
  });
  assert.deepEqual(nextState(passing, { kind: 'node', condition: 'running' }), {
    state: passing,
    actions: [],
  });
  for (const event of EVENTS) assert.deepEqual(nextState({ kind: 'closed' }, event).actions, []);
});

test('the node back: a rebooted machine resets both sides; after a freeze or partition TCP carries on', () => {
  const heal: ConnectionEvent = { kind: 'node', condition: 'running' };
  const silent = (
    cause: (typeof DOWN)[number],
    upstreamGone?: 'end' | 'reset',
    clientGone?: 'end' | 'reset',
  ): ConnectionState => ({ kind: 'silent', cause, upstreamGone, clientGone });
  for (const upstreamGone of [undefined, 'end', 'reset'] as const)
    assert.deepEqual(nextState(silent('crashed', upstreamGone), heal), {
      state: { kind: 'closed' },
      actions: ['reset-client', 'reset-upstream'],
    });
  for (const cause of ['frozen', 'partitioned'] as const) {
    assert.deepEqual(nextState(silent(cause), heal), { state: { kind: 'passing' }, actions: ['resume'] });
    assert.deepEqual(nextState(silent(cause, 'end'), heal), {
      state: { kind: 'passing' },
      actions: ['resume', 'end-client'],
    });
    assert.deepEqual(nextState(silent(cause, undefined, 'end'), heal), {
      state: { kind: 'passing' },
      actions: ['resume', 'end-upstream'],
    });
    assert.deepEqual(nextState(silent(cause, 'reset'), heal), {
      state: { kind: 'closed' },
      actions: ['reset-client'],
    });
    assert.deepEqual(nextState(silent(cause, 'end', 'reset'), heal), {
      state: { kind: 'closed' },
      actions: ['reset-upstream'],
    });
    assert.deepEqual(nextState(silent(cause, 'reset', 'reset'), heal), {
      state: { kind: 'closed' },
      actions: [],
    });
  }
  // A crash while frozen still comes back rebooted.
  const crashedLater = nextState(silent('frozen'), { kind: 'node', condition: 'crashed' }).state;
  assert.deepEqual(nextState(crashedLater, heal).actions, ['reset-client', 'reset-upstream']);
  assert.deepEqual(initialState('running'), { kind: 'passing' });
  assert.deepEqual(initialState('frozen'), silent('frozen'));
});
