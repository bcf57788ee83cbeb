/**
 * What `kubectl leasehold` prints, from snapshots (the pure views of kubectl-plugin/):
 * the status table, the failover timeline in the demo's format (lib/failover-timeline.ts),
 * the served verdict and `why`'s explanation with its agent log excerpt. The objects are
 * as the manager writes them (status.lastFailover from failover-report.ts, the
 * StorageFencing condition, core/v1 Events) and the Lease as lib/lease-record.ts reads it.
 *   node --import tsx --test test/unit/kubectl-plugin-views.test.ts
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { logExcerpt } from '../../kubectl-plugin/log-excerpt.ts';
import type { ShareSnapshot } from '../../kubectl-plugin/share-snapshot.ts';
import { conditionsText, humanDuration, statusLines } from '../../kubectl-plugin/status-table.ts';
import { failoverSeconds, timelineLines } from '../../kubectl-plugin/timeline-lines.ts';
import { agentLogPlan, explainingPod, servingOf, whyLines } from '../../kubectl-plugin/why-verdict.ts';
import { formatTimeline } from '../../lib/failover-timeline.ts';
import { fromWire, type LeaseRecord } from '../../lib/lease-record.ts';
import type { LastFailover, ShareManager } from '../../manager/share-model/share-manager-spec.ts';

const NOW = new Date('2026-12-07T12:10:00.000Z');

const FAILOVER: LastFailover = {
  reason: 'LeaseExpired',
  lostNode: 'node-1',
  lostPod: 'vol-a-old',
  by: 'manager-x',
  detectedAt: '2026-12-07T12:00:04.080Z',
  markedAt: '2026-12-07T12:00:04.140Z',
  podDeletedAt: '2026-12-07T12:00:04.180Z',
  detachedAt: '2026-12-07T12:00:04.870Z',
  replacementCreatedAt: '2026-12-07T12:00:05.000Z',
  completedAt: '2026-12-07T12:00:06.200Z',
  replacementPod: 'vol-a-new',
  volumeHandoff: 'removed kubernetes.io/csi/x^vol-a from node node-1 status.volumesInUse',
};

/** FAILOVER as a failover under way writes it: the steps not reached yet have no field. */
function withoutFields(...fields: Array<keyof LastFailover>): LastFailover {
  const record: Partial<LastFailover> = { ...FAILOVER };
  for (const f of fields) delete record[f];
  return record as LastFailover;
}

function share(name: string, status: ShareManager['status'], extra: Partial<ShareManager['spec']> = {}) {
  return {
    metadata: { namespace: 'apps', name },
    spec: { volume: { pvc: `data-${name}` }, ...extra },
    status,
  } as ShareManager;
}

function lease(name: string, holder: string, node: string, delinquent?: string): LeaseRecord {
  return fromWire({
    metadata: {
      namespace: 'apps',
      name,
      annotations: {
        'leasehold.dev/holder-node': node,
        ...(delinquent ? { 'leasehold.dev/delinquent': delinquent } : {}),
      },
    },
    spec: { holderIdentity: holder, leaseDurationSeconds: 3 },
  });
}

function pod(
  name: string,
  node: string | undefined,
  phase = 'Running',
  extra: Partial<V1Pod['status']> = {},
): V1Pod {
  return {
    metadata: { namespace: 'apps', name, creationTimestamp: new Date('2026-12-07T12:00:00Z') },
    spec: { containers: [], ...(node ? { nodeName: node } : {}) },
    status: { phase, ...extra },
  };
}

function event(
  reason: string,
  type: string,
  at: string,
  message: string,
  kind = 'ShareManager',
  name = 'vol-a',
): CoreV1Event {
  return {
    metadata: { name: `${name}.${reason}` },
    involvedObject: { kind, name, namespace: 'apps' },
    reason,
    type,
    message,
    lastTimestamp: new Date(at),
  };
}

const served: ShareSnapshot = {
  sm: share('vol-a', {
    state: 'Running',
    lastFailover: FAILOVER,
    conditions: [
      { type: 'Fencing', status: 'True', reason: 'FencePod', message: 'the agent stops every process' },
      { type: 'StorageFencing', status: 'True', reason: 'StorageFences', message: 'detach fences' },
    ],
  }),
  lease: lease('vol-a', 'vol-a-new', 'node-2'),
  pods: [pod('vol-a-new', 'node-2')],
};

const awaiting: ShareSnapshot = {
  sm: share('vol-b', {
    state: 'FailingOver',
    conditions: [
      {
        type: 'StorageFencing',
        status: 'False',
        reason: 'AwaitingNodeDown',
        message: 'PV pv-b is not CSI; not failing over until node node-3 is known to be down',
      },
    ],
  }),
  lease: lease('vol-b', 'vol-b-1', 'node-3'),
  pods: [pod('vol-b-1', 'node-3')],
};

describe('the timeline format (lib/failover-timeline.ts), shared with the demo', () => {
  test('one line a step, time to the hundredth, ? for a step not reached', () => {
    assert.equal(
      formatTimeline([
        { step: 'stale lease detected', seconds: 4.08, source: 'status.lastFailover' },
        { step: 'new agent acquired the lease', seconds: undefined, source: 'status.lastFailover' },
      ]),
      '     4.08 s  stale lease detected                                       (status.lastFailover)\n' +
        '        ?    new agent acquired the lease                               (status.lastFailover)',
    );
  });
});

describe('timeline SHARE', () => {
  test('the recorded steps since the detection, the outcome, the handoff and the events during it', () => {
    // Within one second, in the order written (resourceVersion), whatever the list's order.
    const ordered = (e: CoreV1Event, version: string) => ({
      ...e,
      metadata: { ...e.metadata, resourceVersion: version },
    });
    const events = [
      ordered(
        event('LeaseExpired', 'Warning', '2026-12-07T12:00:04Z', 'lease of pod vol-a-old unchanged for 3s'),
        '120',
      ),
      ordered(event('AwaitingNodeDown', 'Warning', '2026-12-07T12:00:04Z', 'waiting for node-1'), '99'),
      event(
        'FailoverCompleted',
        'Normal',
        '2026-12-07T12:00:06Z',
        'pod vol-a-new holds the lease: total 2.120s',
      ),
      event('Unschedulable', 'Warning', '2026-12-07T11:00:00Z', 'an hour before: not this failover'),
      event('ServiceRepaired', 'Warning', '2026-12-07T12:05:00Z', 'minutes after: not this failover'),
    ];
    assert.deepEqual(timelineLines(served.sm, events), [
      'Timeline of the failover of apps/vol-a (seconds since the stale lease was detected, 2026-12-07T12:00:04.080Z; run by manager manager-x):',
      [
        '     0.00 s  stale lease detected                                       (status.lastFailover)',
        '     0.06 s  lease marked delinquent                                    (status.lastFailover)',
        '     0.10 s  pod vol-a-old force-deleted                                (status.lastFailover)',
        '     0.79 s  volume released on node-1 (handoff done or detached)       (status.lastFailover)',
        '     0.92 s  replacement vol-a-new created                              (status.lastFailover)',
        '     2.12 s  new agent acquired the lease                               (status.lastFailover)',
      ].join('\n'),
      'LeaseExpired: pod vol-a-old on node node-1 lost the lease; vol-a-new acquired it 2.12 s after the detection',
      'volume handoff: removed kubernetes.io/csi/x^vol-a from node node-1 status.volumesInUse',
      'Events on apps/vol-a during the failover (times to the second, as Events keep them):',
      '  2026-12-07T12:00:04Z  Warning  AwaitingNodeDown   waiting for node-1',
      '  2026-12-07T12:00:04Z  Warning  LeaseExpired       lease of pod vol-a-old unchanged for 3s',
      '  2026-12-07T12:00:06Z  Normal   FailoverCompleted  pod vol-a-new holds the lease: total 2.120s',
    ]);
  });

  test('a failover in progress: ? from the first step not reached, and which it is', () => {
    const running = withoutFields('replacementCreatedAt', 'completedAt', 'replacementPod');
    const lines = timelineLines(share('vol-a', { state: 'FailingOver', lastFailover: running }), []);
    assert.match(
      lines[1] ?? '',
      /\n {8}\? {4}replacement pod created +\(status.lastFailover\)\n {8}\? {4}new agent/,
    );
    assert.equal(
      lines[2],
      'LeaseExpired: pod vol-a-old on node node-1 lost the lease; in progress, next step not reached: replacement pod created',
    );
    assert.equal(lines.at(-1), '  (none)');
    assert.equal(failoverSeconds(running), undefined);
  });

  test('never failed over: said, no timeline', () => {
    assert.deepEqual(timelineLines(share('vol-c', { state: 'Running' }), []), [
      'apps/vol-c has no recorded failover (no status.lastFailover): it has not failed over since it was created.',
    ]);
  });
});

describe('status', () => {
  test('one row a share: holder and node from the Lease, served, conditions, last failover and its duration', () => {
    const error: ShareSnapshot = {
      sm: share('vol-c', { state: 'Error', message: 'spec.lease: renew deadline must exceed the interval' }),
      lease: undefined,
      pods: [],
    };
    const provisioned: ShareSnapshot = {
      ...served,
      sm: {
        ...share('pvc-1234', { state: 'Starting' }),
        metadata: {
          namespace: 'leasehold-system',
          name: 'pvc-1234',
          annotations: { 'leasehold.dev/provisioned-claim': 'apps/team-data' },
        },
      },
      lease: fromWire({ metadata: { namespace: 'leasehold-system', name: 'pvc-1234' }, spec: {} }),
      pods: [],
    };
    // Cells split where kubectl-style padding (2 spaces or more) separates them.
    const rows = statusLines([error, awaiting, provisioned, served], NOW, 'in any namespace').map((l) =>
      l.split(/ {2,}/).join(' | '),
    );
    assert.deepEqual(rows, [
      'NAMESPACE | NAME | CLAIM | PHASE | SERVED | HOLDER | NODE | CONDITIONS | LAST FAILOVER | TOOK',
      'apps | vol-a | - | Running | yes | vol-a-new | node-2 | Fencing=True,StorageFencing=True | 9m55s ago from node-1 | 2.12 s',
      'apps | vol-b | - | FailingOver | no | vol-b-1 | node-3 | StorageFencing=False(AwaitingNodeDown) | - | -',
      'apps | vol-c | - | Error | no | (no lease) | - | - | - | -',
      'leasehold-system | pvc-1234 | apps/team-data | Starting | no | (free) | - | - | - | -',
    ]);
    assert.deepEqual(statusLines([], NOW, 'in namespace apps'), ['No ShareManagers in namespace apps.']);
  });

  test('a delinquent holder is marked so; conditions and ages as kubectl words them', () => {
    const marked = { ...awaiting, lease: lease('vol-b', 'vol-b-1', 'node-3', '2026-12-07T12:09:00Z') };
    assert.match(statusLines([marked], NOW, '')[1] ?? '', / vol-b-1 \(delinquent\) /);
    assert.equal(conditionsText([{ type: 'Scheduled', status: 'False' }]), 'Scheduled=False');
    assert.equal(conditionsText(undefined), '-');
    const cases: Array<[number, string]> = [
      [-5000, '<invalid>'],
      [45_000, '45s'],
      [192_000, '3m12s'],
      [300_000, '5m'],
      [95 * 60_000, '95m'],
      [(5 * 60 + 4) * 60_000, '5h4m'],
      [30 * 3600_000, '30h'],
      [(3 * 24 + 4) * 3600_000, '3d4h'],
      [40 * 24 * 3600_000, '40d'],
      [(2 * 365 + 30) * 24 * 3600_000, '2y30d'],
    ];
    for (const [ms, text] of cases) assert.equal(humanDuration(ms), text, `${ms} ms`);
  });
});

describe('served or not, and why', () => {
  test('served: the holder pod runs and no failover runs; said plainly, with the False conditions as caveats', () => {
    assert.deepEqual(servingOf(served), { served: true, pod: 'vol-a-new', node: 'node-2' });
    const caveat: ShareSnapshot = {
      ...served,
      sm: {
        ...served.sm,
        spec: { ...served.sm.spec, consumer: { claimName: 'site' } },
        status: {
          ...served.sm.status,
          conditions: [
            {
              type: 'Fencing',
              status: 'False',
              reason: 'FenceDisabled',
              message: 'spec.fence.action is none',
            },
          ],
        },
      },
    };
    assert.deepEqual(whyLines({ ...caveat, events: [], agentLog: undefined }), {
      served: true,
      lines: [
        'apps/vol-a is served: pod vol-a-new on node node-2 holds the lease (status Running); clients mount it through claim apps/site.',
        '  condition  Fencing=False (FenceDisabled): spec.fence.action is none',
      ],
    });
  });

  test('each broken link, the first one named', () => {
    const reason = (s: ShareSnapshot) => {
      const v = servingOf(s);
      return v.served ? 'served' : v.reason;
    };
    const with_ = (status: ShareManager['status'], rest: Partial<ShareSnapshot> = {}) => ({
      ...served,
      sm: share('vol-a', status),
      ...rest,
    });
    assert.equal(reason(with_({ state: 'Stopped' })), 'the ShareManager is being deleted (status Stopped)');
    assert.equal(
      reason(with_({ state: 'Error', message: 'spec.fence.timeout=9s: too long' })),
      'its spec is rejected (status Error): spec.fence.timeout=9s: too long',
    );
    assert.match(reason(with_(undefined)), /^no manager has reconciled it yet/);
    assert.equal(
      reason(
        with_(
          { state: 'FailingOver' },
          { lease: lease('vol-a', 'vol-a-new', 'node-2', '2026-12-07T12:09:00Z') },
        ),
      ),
      'failing over: the lease of pod vol-a-new on node node-2 was declared dead at 2026-12-07T12:09:00Z',
    );
    assert.equal(
      reason(awaiting),
      'its failover waits for evidence that node node-3 is down (StorageFencing=False, AwaitingNodeDown: its storage cannot fence that node)',
    );
    assert.equal(
      reason(with_({ state: 'Running' }, { lease: undefined })),
      'its Lease apps/vol-a does not exist (a manager creates it with the share)',
    );
    assert.equal(
      reason(with_({ state: 'Pending' }, { lease: lease('vol-a', '', ''), pods: [] })),
      'no pod holds its lease and none exists (a manager creates one)',
    );
    const unschedulable = pod('vol-a-x', undefined, 'Pending', {
      conditions: [
        {
          type: 'PodScheduled',
          status: 'False',
          reason: 'Unschedulable',
          message: '0/3 nodes are available',
        },
      ],
    });
    assert.equal(
      reason(with_({ state: 'Pending' }, { lease: lease('vol-a', '', ''), pods: [unschedulable] })),
      'its pod vol-a-x cannot be scheduled: 0/3 nodes are available',
    );
    assert.equal(
      reason(
        with_({ state: 'Starting' }, { lease: lease('vol-a', '', ''), pods: [pod('vol-a-x', 'node-2')] }),
      ),
      'its pod vol-a-x on node node-2 (phase Running) has not acquired the lease',
    );
    assert.equal(
      reason(with_({ state: 'Running' }, { pods: [] })),
      'its Lease names pod vol-a-new, which does not exist',
    );
    assert.equal(
      reason(with_({ state: 'Running' }, { pods: [pod('vol-a-new', 'node-2', 'Failed')] })),
      'its holder pod vol-a-new is Failed',
    );
    const unready = pod('vol-a-new', 'node-2', 'Running', {
      conditions: [{ type: 'Ready', status: 'False', message: 'containers with unready status: [server]' }],
    });
    const userServer = {
      ...served,
      sm: share('vol-a', { state: 'Running' }, { server: { image: 'x' } }),
      pods: [unready],
    };
    assert.match(
      reason(userServer),
      /^its holder pod vol-a-new is not Ready, so its Service sends it nothing: containers/,
    );
    // The shipped NFS server's Service lists unready pods: readiness is not a broken link there.
    assert.equal(reason({ ...userServer, sm: share('vol-a', { state: 'Running' }) }), 'served');
  });

  test('not served: the condition, the failover progress, the latest Warning events, the agent log lines', () => {
    const events = [
      event(
        'FailoverCompleted',
        'Normal',
        '2026-12-07T12:00:06Z',
        'normal events are not listed',
        'ShareManager',
        'vol-b',
      ),
      ...Array.from({ length: 6 }, (_, i) =>
        event(
          'FailoverStepFailing',
          'Warning',
          `2026-12-07T12:0${i}:00Z`,
          `failure ${i}`,
          'ShareManager',
          'vol-b',
        ),
      ),
      event('FailedMount', 'Warning', '2026-12-07T12:09:30Z', 'MountVolume.SetUp failed', 'Pod', 'vol-b-1'),
    ];
    const log = [
      '{"level":"info","time":"2026-12-07T12:09:00.000Z","component":"agent","pid":7,"msg":"renewed"}',
      '{"level":"warn","time":"2026-12-07T12:09:01.000Z","component":"agent","pid":7,"reason":"timeout","attempt":2,"msg":"renew failed"}',
      '{"level":"error","time":"2026-12-07T12:09:02.000Z","component":"agent","pid":7,"err":{"type":"Error","message":"socket hang up","stack":"..."},"msg":"fenced: deadline-passed"}',
      '{"level":"info","time":"2026-12-07T12:09:03.000Z","component":"agent","pid":7,"msg":"exiting"}',
      '',
    ];
    const previous = { ...FAILOVER, lostPod: 'vol-b-0', lostNode: 'node-9' };
    const input = {
      ...awaiting,
      sm: share('vol-b', { ...awaiting.sm.status, lastFailover: previous }),
      events,
      agentLog: { pod: 'vol-b-1', lines: log },
    };
    const { served: isServed, lines } = whyLines(input);
    assert.equal(isServed, false);
    assert.deepEqual(lines, [
      'apps/vol-b is NOT served: its failover waits for evidence that node node-3 is down (StorageFencing=False, AwaitingNodeDown: its storage cannot fence that node)',
      '  condition  StorageFencing=False (AwaitingNodeDown): PV pv-b is not CSI; not failing over until node node-3 is known to be down',
      "  failover   no step taken yet (status.lastFailover is the previous failover's, completed at 2026-12-07T12:00:06.200Z)",
      '  event      2026-12-07T12:02:00Z FailoverStepFailing on ShareManager vol-b: failure 2',
      '  event      2026-12-07T12:03:00Z FailoverStepFailing on ShareManager vol-b: failure 3',
      '  event      2026-12-07T12:04:00Z FailoverStepFailing on ShareManager vol-b: failure 4',
      '  event      2026-12-07T12:05:00Z FailoverStepFailing on ShareManager vol-b: failure 5',
      '  event      2026-12-07T12:09:30Z FailedMount on Pod vol-b-1: MountVolume.SetUp failed',
      '  agent log  pod vol-b-1: 2026-12-07T12:09:01.000Z warn renew failed reason=timeout attempt=2',
      '  agent log  pod vol-b-1: 2026-12-07T12:09:02.000Z error fenced: deadline-passed err="socket hang up"',
      'What to do: docs/operations.md, "Troubleshooting", has each case.',
    ]);
  });

  test('a failover under way: the first recorded step not reached; an unreadable log or none said', () => {
    const running = withoutFields('detachedAt', 'replacementCreatedAt', 'completedAt', 'replacementPod');
    const snapshot = {
      ...served,
      sm: share('vol-a', { state: 'FailingOver', lastFailover: running }),
      lease: lease('vol-a', 'vol-a-old', 'node-1', '2026-12-07T12:00:04.140Z'),
      pods: [],
    };
    const lines = whyLines({
      ...snapshot,
      events: [],
      agentLog: { pod: 'vol-a-old', error: 'HTTP 500: no preferred addresses found' },
    }).lines;
    assert.ok(
      lines.includes(
        '  failover   LeaseExpired detected at 2026-12-07T12:00:04.080Z by manager-x: pod vol-a-old on node node-1; next step not reached: volume released on node-1 (handoff done or detached)',
      ),
      lines.join('\n'),
    );
    assert.ok(lines.includes('  event      no Warning event on the ShareManager or its pods'));
    assert.ok(
      lines.includes('  agent log  pod vol-a-old: not readable: HTTP 500: no preferred addresses found'),
    );
    const none = whyLines({ ...snapshot, events: [], agentLog: undefined }).lines;
    assert.ok(none.includes('  agent log  no pod, so no agent log to read'));
  });

  test('whose log: the holder, else the newest live pod, else the newest', () => {
    const at = (name: string, created: string, deleting = false): V1Pod => ({
      metadata: {
        name,
        creationTimestamp: new Date(created),
        ...(deleting ? { deletionTimestamp: new Date(created) } : {}),
      },
    });
    const pods = [
      at('p-new', '2026-12-07T12:02:00Z', true),
      at('p-old', '2026-12-07T12:00:00Z'),
      at('p-mid', '2026-12-07T12:01:00Z'),
    ];
    const name = (s: Partial<ShareSnapshot>) => explainingPod({ ...served, ...s })?.metadata?.name;
    assert.equal(name({ pods, lease: lease('vol-a', 'p-old', 'n') }), 'p-old');
    assert.equal(name({ pods, lease: lease('vol-a', '', '') }), 'p-mid');
    assert.equal(name({ pods: [pods[0] as V1Pod], lease: undefined }), 'p-new');
    assert.equal(name({ pods: [], lease: undefined }), undefined);
    // The log is read only from a pod with a node: one never scheduled ran no container.
    assert.deepEqual(agentLogPlan({ ...served, pods, lease: lease('vol-a', '', '') }), {
      known: { pod: 'p-mid', error: 'it has no node yet, so no container has run' },
    });
    assert.deepEqual(agentLogPlan(served), { read: 'vol-a-new' });
    assert.deepEqual(agentLogPlan({ ...served, pods: [] }), { known: undefined });
  });
});

describe('the agent log excerpt', () => {
  test('the latest warn/error lines, else the latest lines; plain lines as they are; long lines cut', () => {
    const info = (msg: string) => JSON.stringify({ level: 'info', time: 't', msg });
    assert.deepEqual(logExcerpt([info('a'), info('b'), info('c'), info('d')], 2), ['t info c', 't info d']);
    assert.deepEqual(logExcerpt(['plain text line', '  ', '{"not":"closed"'], 3), [
      'plain text line',
      '{"not":"closed"',
    ]);
    const long = logExcerpt([JSON.stringify({ level: 50, time: 't', msg: 'x'.repeat(1000) })]);
    assert.equal(long[0]?.length, 400);
    assert.ok(long[0]?.endsWith('…'));
    assert.deepEqual(
      logExcerpt([JSON.stringify({ level: 'warn', msg: 'm', lease: 'apps/vol-a', detail: { a: 1 } })]),
      ['warn m lease=apps/vol-a detail={"a":1}'],
    );
  });
});
