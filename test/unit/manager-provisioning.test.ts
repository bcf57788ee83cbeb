import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import { PROVISIONER_NAME, parseClassParameters } from '../../manager/provisioning/class-parameters.ts';
import {
  decideProvisioning,
  type ProvisionAction,
  type ProvisionSnapshot,
} from '../../manager/provisioning/decide-provisioning.ts';
import {
  ANNOTATION_PROVISIONED_BY,
  ANNOTATION_SELECTED_NODE,
  ANNOTATION_STORAGE_PROVISIONER,
  FINALIZER_PROVISIONED,
  LABEL_PROVISIONED_FOR,
} from '../../manager/provisioning/provisioned-objects.ts';
import { decideLeadership } from '../../manager/provisioning/provisioner-leadership.ts';
import { exportStatus } from '../../manager/share-model/nfs-server-preset.ts';
import type { ShareManager } from '../../manager/share-model/share-manager-spec.ts';

const defaults = { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 };
const context = { defaultNamespace: 'leasehold', onlyNamespace: undefined, defaults };
const UID = '0b7c6a2e-1111-2222-3333-444455556666';
const NAME = `pvc-${UID}`;

function parse(parameters: Record<string, string>) {
  return parseClassParameters('rwx', parameters, context);
}

function claim(
  over: Partial<V1PersistentVolumeClaim['spec']> & { annotations?: Record<string, string> } = {},
) {
  const { annotations, ...spec } = over;
  return {
    metadata: {
      name: 'shared',
      namespace: 'apps',
      uid: UID,
      annotations: { [ANNOTATION_STORAGE_PROVISIONER]: PROVISIONER_NAME, ...annotations },
    },
    spec: {
      accessModes: ['ReadWriteMany'],
      storageClassName: 'rwx',
      resources: { requests: { storage: '2Gi' } },
      ...spec,
    },
  } satisfies V1PersistentVolumeClaim;
}

function storageClass(over: Partial<V1StorageClass> = {}): V1StorageClass {
  return { metadata: { name: 'rwx', resourceVersion: '1' }, provisioner: PROVISIONER_NAME, ...over };
}

function snapshot(over: Partial<ProvisionSnapshot> = {}): ProvisionSnapshot {
  const sc = over.storageClass ?? storageClass();
  return {
    uid: UID,
    claim: claim(),
    storageClass: sc,
    settings: parseClassParameters('rwx', sc.parameters, context),
    share: undefined,
    backing: undefined,
    volume: undefined,
    ...over,
  };
}

const ours = { labels: { [LABEL_PROVISIONED_FOR]: UID } };
const backing: V1PersistentVolumeClaim = {
  metadata: { name: NAME, namespace: 'leasehold', uid: 'b-uid', ...ours },
};
function share(status: ShareManager['status'] = {}): ShareManager {
  return {
    metadata: { name: NAME, namespace: 'leasehold', uid: 's-uid', ...ours },
    spec: { volume: { pvc: NAME } },
    status,
  };
}
const exported = exportStatus('10.96.0.44', '/export');

function kinds(actions: ProvisionAction[]): string[] {
  return actions.map((a) => (a.kind === 'event' ? `event:${a.reason}` : a.kind));
}

describe('StorageClass parameters', () => {
  it('defaults: the default class, the provisioner namespace, the server defaults', () => {
    const parsed = parse({});
    assert.ok(parsed.ok);
    assert.deepEqual(parsed.settings, {
      backingStorageClass: undefined,
      backingNamespace: 'leasehold',
      share: {},
    });
  });

  it('every parameter lands in its ShareManager field', () => {
    const parsed = parse({
      backingStorageClass: 'fast-rwo',
      backingNamespace: 'storage',
      nfsVersions: '4.1, 4.2',
      nfsClients: '10.0.0.0/8,192.168.1.7',
      squash: 'root_squash',
      nfsGracePeriod: '20s',
      nfsLeaseLifetime: '15s',
      nodeSelector: 'disk=ssd, zone=a',
      tolerations: '[{"key":"storage","operator":"Exists","effect":"NoSchedule"}]',
      leaseDuration: '10s',
      renewInterval: '3s',
      renewDeadline: '6s',
      retryPeriod: '1s',
    });
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
    assert.equal(parsed.settings.backingStorageClass, 'fast-rwo');
    assert.equal(parsed.settings.backingNamespace, 'storage');
    assert.deepEqual(parsed.settings.share, {
      nfs: {
        versions: ['4.1', '4.2'],
        clients: ['10.0.0.0/8', '192.168.1.7'],
        squash: 'root_squash',
        gracePeriod: '20s',
        leaseLifetime: '15s',
      },
      scheduling: {
        nodeSelector: { disk: 'ssd', zone: 'a' },
        tolerations: [{ key: 'storage', operator: 'Exists', effect: 'NoSchedule' }],
      },
      lease: { duration: '10s', renewInterval: '3s', renewDeadline: '6s', retryPeriod: '1s' },
    });
  });

  it('ids, export root, placement and resources land in their fields', () => {
    const parsed = parse({
      anonymousUid: '1000',
      anonymousGid: '1000',
      exportUid: '1000',
      exportGid: '2000',
      exportMode: '2775',
      priorityClassName: 'storage-critical',
      affinity: '{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[]}}',
      serverMemoryRequest: '64Mi',
      serverMemoryLimit: '1Gi',
      serverCpuRequest: '100m',
      agentMemoryRequest: '48Mi',
    });
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
    assert.deepEqual(parsed.settings.share.nfs, {
      anonymousUid: 1000,
      anonymousGid: 1000,
      exportUid: 1000,
      exportGid: 2000,
      exportMode: '2775',
    });
    assert.equal(parsed.settings.share.scheduling?.priorityClassName, 'storage-critical');
    assert.deepEqual(parsed.settings.share.scheduling?.affinity, {
      podAntiAffinity: { preferredDuringSchedulingIgnoredDuringExecution: [] },
    });
    assert.deepEqual(parsed.settings.share.resources, {
      server: { requests: { memory: '64Mi', cpu: '100m' }, limits: { memory: '1Gi' } },
      agent: { requests: { memory: '48Mi' } },
    });
    for (const [parameters, pattern] of [
      [{ exportUid: '-1' }, /exportUid="-1": must be a numeric id/],
      [{ exportMode: '999' }, /parameter exportMode \(spec\.nfs\.exportMode="999"/],
      [{ serverMemoryLimit: '1 GB' }, /serverMemoryLimit="1 GB": must be a quantity/],
      [{ affinity: '[]' }, /affinity="\[\]": must be a JSON object/],
      [{ priorityClassName: 'High' }, /priorityClassName="High": must be a PriorityClass name/],
    ] as const) {
      const bad = parse(parameters as Record<string, string>);
      assert.ok(!bad.ok, JSON.stringify(parameters));
      assert.match(bad.message, pattern);
    }
  });

  it('an unknown parameter is named, with the known ones', () => {
    const parsed = parse({ nfsVersion: '4.1' });
    assert.ok(!parsed.ok);
    assert.match(
      parsed.message,
      /^StorageClass rwx: nfsVersion: unknown parameter \(known: backingStorageClass, /,
    );
  });

  it('a bad value names the parameter and the rule, in terms of the parameter', () => {
    for (const [parameters, pattern] of [
      [{ leaseDuration: '3s' }, /lease duration 3s > renew deadline 4s/],
      [
        { leaseDuration: 'soon' },
        /parameter leaseDuration \(spec\.lease\.duration="soon": must be a duration/,
      ],
      [{ nfsVersions: '5' }, /parameter nfsVersions \(spec\.nfs\.versions/],
      [{ squash: 'some' }, /parameter squash \(spec\.nfs\.squash/],
      [{ tolerations: '{"key":"a"}' }, /tolerations="\{\\"key\\":\\"a\\"\}": must be a JSON array/],
      [{ nodeSelector: 'ssd' }, /nodeSelector="ssd": "ssd" is not key=value/],
      [{ backingNamespace: 'Bad_NS' }, /backingNamespace="Bad_NS": must be a namespace name/],
      [{ backingStorageClass: 'no spaces' }, /backingStorageClass="no spaces": must be a StorageClass name/],
    ] as const) {
      const parsed = parse(parameters as Record<string, string>);
      assert.ok(!parsed.ok, JSON.stringify(parameters));
      assert.match(parsed.message, pattern, JSON.stringify(parameters));
    }
  });

  it('a backing namespace the manager does not watch is refused', () => {
    const parsed = parseClassParameters(
      'rwx',
      { backingNamespace: 'other' },
      { ...context, onlyNamespace: 'leasehold' },
    );
    assert.ok(!parsed.ok);
    assert.match(parsed.message, /manager watches only namespace "leasehold"/);
  });
});

describe('provisioning decisions', () => {
  it('a claim of the class: backing claim (event Provisioning), then the ShareManager, then the PV', () => {
    const first = decideProvisioning(snapshot());
    assert.deepEqual(kinds(first), ['event:Provisioning', 'createBackingClaim']);
    const body = first[1] as Extract<ProvisionAction, { kind: 'createBackingClaim' }>;
    assert.equal(body.body.metadata?.name, NAME);
    assert.equal(body.body.metadata?.namespace, 'leasehold');
    assert.equal(body.body.spec?.storageClassName, undefined, 'the default class');
    assert.deepEqual(body.body.spec?.resources?.requests, { storage: '2Gi' });
    assert.deepEqual(body.body.spec?.accessModes, ['ReadWriteOnce']);

    const second = decideProvisioning(snapshot({ backing }));
    assert.deepEqual(kinds(second), ['createShare']);
    const sm = (second[0] as Extract<ProvisionAction, { kind: 'createShare' }>).body;
    assert.deepEqual(sm.spec.volume, { pvc: NAME, mountPath: '/export' });
    assert.equal(sm.metadata.labels?.[LABEL_PROVISIONED_FOR], UID);

    assert.deepEqual(kinds(decideProvisioning(snapshot({ backing, share: share() }))), ['wait']);

    const third = decideProvisioning(snapshot({ backing, share: share({ export: exported }) }));
    assert.deepEqual(kinds(third), ['createVolume', 'event:ProvisioningSucceeded']);
    const pv = (third[0] as Extract<ProvisionAction, { kind: 'createVolume' }>).body;
    assert.equal(pv.metadata?.name, NAME);
    assert.equal(pv.metadata?.annotations?.[ANNOTATION_PROVISIONED_BY], PROVISIONER_NAME);
    assert.deepEqual(pv.metadata?.finalizers, [FINALIZER_PROVISIONED]);
    assert.deepEqual(pv.spec?.nfs, { server: '10.96.0.44', path: '/export' });
    assert.deepEqual(pv.spec?.mountOptions, exported.mountOptions.split(','));
    assert.equal(pv.spec?.persistentVolumeReclaimPolicy, 'Delete');
    assert.equal(pv.spec?.storageClassName, 'rwx');
    assert.deepEqual(pv.spec?.capacity, { storage: '2Gi' });
    assert.deepEqual(pv.spec?.claimRef, {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      namespace: 'apps',
      name: 'shared',
      uid: UID,
    });
  });

  it("the class's mount options, reclaim policy and backing class are used", () => {
    const sc = storageClass({
      reclaimPolicy: 'Retain',
      mountOptions: ['nfsvers=4.2', 'hard'],
      parameters: { backingStorageClass: 'fast' },
    });
    const first = decideProvisioning(snapshot({ storageClass: sc }));
    assert.equal(
      (first[1] as Extract<ProvisionAction, { kind: 'createBackingClaim' }>).body.spec?.storageClassName,
      'fast',
    );
    const actions = decideProvisioning(
      snapshot({ storageClass: sc, backing, share: share({ export: exported }) }),
    );
    const pv = (actions[0] as Extract<ProvisionAction, { kind: 'createVolume' }>).body;
    assert.deepEqual(pv.spec?.mountOptions, ['nfsvers=4.2', 'hard']);
    assert.equal(pv.spec?.persistentVolumeReclaimPolicy, 'Retain');
    assert.equal(pv.metadata?.finalizers, undefined, 'Retain: no finalizer (nothing to delete)');
  });

  it("the class's allowed topologies are required of the server (ANDed with the affinity parameter); the selected node preferred", () => {
    const sc = storageClass({
      volumeBindingMode: 'WaitForFirstConsumer',
      allowedTopologies: [
        { matchLabelExpressions: [{ key: 'topology.kubernetes.io/zone', values: ['a', 'b'] }] },
      ],
      parameters: {
        affinity: JSON.stringify({
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchExpressions: [{ key: 'disk', operator: 'In', values: ['ssd'] }] }],
            },
          },
        }),
      },
    });
    const selected = claim({ annotations: { [ANNOTATION_SELECTED_NODE]: 'node-7' } });
    const actions = decideProvisioning(snapshot({ storageClass: sc, claim: selected, backing }));
    const body = (actions[0] as Extract<ProvisionAction, { kind: 'createShare' }>).body;
    assert.deepEqual(body.spec.scheduling?.affinity?.nodeAffinity, {
      requiredDuringSchedulingIgnoredDuringExecution: {
        nodeSelectorTerms: [
          {
            matchExpressions: [
              { key: 'disk', operator: 'In', values: ['ssd'] },
              { key: 'topology.kubernetes.io/zone', operator: 'In', values: ['a', 'b'] },
            ],
          },
        ],
      },
      preferredDuringSchedulingIgnoredDuringExecution: [
        {
          weight: 50,
          preference: { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-7'] }] },
        },
      ],
    });
  });

  it('nothing for claims of others, bound claims, or WaitForFirstConsumer before a node is selected', () => {
    assert.deepEqual(
      decideProvisioning(
        snapshot({
          claim: claim({ annotations: { [ANNOTATION_STORAGE_PROVISIONER]: 'other.example/csi' } }),
        }),
      ),
      [],
    );
    assert.deepEqual(decideProvisioning(snapshot({ claim: claim({ volumeName: 'pv-1' }) })), []);
    const wffc = storageClass({ volumeBindingMode: 'WaitForFirstConsumer' });
    assert.deepEqual(kinds(decideProvisioning(snapshot({ storageClass: wffc }))), ['wait']);
    assert.deepEqual(
      kinds(
        decideProvisioning(
          snapshot({
            storageClass: wffc,
            claim: claim({ annotations: { [ANNOTATION_SELECTED_NODE]: 'node-1' } }),
          }),
        ),
      ),
      ['event:Provisioning', 'createBackingClaim'],
    );
  });

  it('a refused claim or class: ProvisioningFailed naming it, nothing created', () => {
    const cases: [Partial<ProvisionSnapshot>, RegExp][] = [
      [{ claim: claim({ accessModes: ['ReadWriteOncePod'] }) }, /accessModes ReadWriteOncePod: not offered/],
      [{ claim: claim({ volumeMode: 'Block' }) }, /volumeMode Block/],
      [
        { claim: claim({ dataSource: { kind: 'VolumeSnapshot', name: 'snap', apiGroup: 'x' } }) },
        /dataSource VolumeSnapshot\/snap/,
      ],
      [{ storageClass: undefined, settings: undefined }, /StorageClass "rwx" not found/],
      [{ storageClass: storageClass({ parameters: { bogus: '1' } }) }, /bogus: unknown parameter/],
    ];
    for (const [over, pattern] of cases) {
      const s = snapshot(over);
      if (over.storageClass) s.settings = parseClassParameters('rwx', over.storageClass.parameters, context);
      const actions = decideProvisioning(s);
      assert.deepEqual(kinds(actions), ['event:ProvisioningFailed'], String(pattern));
      assert.match((actions[0] as Extract<ProvisionAction, { kind: 'event' }>).message, pattern);
    }
  });

  it('a ShareManager in state Error: reported, then taken down with its backing claim', () => {
    const refused = share({ state: 'Error', message: 'dry run: tolerations[0].effect: Unsupported value' });
    const actions = decideProvisioning(snapshot({ backing, share: refused }));
    assert.deepEqual(kinds(actions), ['event:ProvisioningFailed', 'deleteShare']);
    assert.match(
      (actions[0] as Extract<ProvisionAction, { kind: 'event' }>).message,
      /Unsupported value; removing what was made/,
    );
    assert.deepEqual(kinds(decideProvisioning(snapshot({ backing }))), ['createShare'], 'then tried again');
  });

  const bound: V1PersistentVolume = {
    metadata: { name: NAME, uid: 'pv-uid', finalizers: [FINALIZER_PROVISIONED], ...ours },
    spec: { persistentVolumeReclaimPolicy: 'Delete', claimRef: { uid: UID } },
    status: { phase: 'Bound' },
  };

  it('a bound PV: nothing; Released with Delete: ShareManager, then backing claim, then PV, in that order', () => {
    assert.deepEqual(decideProvisioning(snapshot({ backing, share: share(), volume: bound })), []);
    const released = { ...bound, status: { phase: 'Released' } };
    const gone = { claim: undefined };
    assert.deepEqual(
      kinds(decideProvisioning(snapshot({ ...gone, backing, share: share(), volume: released }))),
      ['deleteShare'],
    );
    const deleting = share();
    deleting.metadata.deletionTimestamp = new Date();
    assert.deepEqual(
      kinds(decideProvisioning(snapshot({ ...gone, backing, share: deleting, volume: released }))),
      ['wait'],
      'server still stopping',
    );
    assert.deepEqual(kinds(decideProvisioning(snapshot({ ...gone, backing, volume: released }))), [
      'deleteBackingClaim',
    ]);
    assert.deepEqual(decideProvisioning(snapshot({ ...gone, volume: released })), [
      { kind: 'deleteVolume', name: NAME, uid: 'pv-uid', removeFinalizer: true },
    ]);
  });

  it('Released with Retain: everything kept; a PV deleted by hand: torn down in order', () => {
    const retained = {
      ...bound,
      spec: { ...bound.spec, persistentVolumeReclaimPolicy: 'Retain' },
      status: { phase: 'Released' },
    };
    assert.deepEqual(
      decideProvisioning(snapshot({ claim: undefined, backing, share: share(), volume: retained })),
      [],
    );
    const byHand = { ...bound, metadata: { ...bound.metadata, deletionTimestamp: new Date() } };
    assert.deepEqual(kinds(decideProvisioning(snapshot({ backing, share: share(), volume: byHand }))), [
      'deleteShare',
    ]);
  });

  it('a claim deleted before its PV existed: what was made is removed', () => {
    assert.deepEqual(kinds(decideProvisioning(snapshot({ claim: undefined, backing, share: share() }))), [
      'deleteShare',
    ]);
    assert.deepEqual(kinds(decideProvisioning(snapshot({ claim: undefined, backing }))), [
      'deleteBackingClaim',
    ]);
    assert.deepEqual(decideProvisioning(snapshot({ claim: undefined })), []);
  });

  it('objects not labelled for this claim are never deleted', () => {
    const foreign = { ...share(), metadata: { ...share().metadata, labels: {} } };
    const foreignBacking = { metadata: { name: NAME, namespace: 'leasehold', uid: 'x' } };
    assert.deepEqual(
      decideProvisioning(snapshot({ claim: undefined, share: foreign, backing: foreignBacking })),
      [],
    );
  });
});

describe('provisioner leadership', () => {
  const D = 15_000;
  it('creates a missing Lease, renews its own, takes a free one', () => {
    assert.equal(decideLeadership('m1', undefined, undefined, 0, D), 'create');
    assert.equal(decideLeadership('m1', { holder: 'm1', resourceVersion: '5' }, undefined, 0, D), 'renew');
    assert.equal(decideLeadership('m1', { holder: '', resourceVersion: '5' }, undefined, 0, D), 'take');
  });

  it("takes another's only after its resourceVersion stood still for the duration by our clock", () => {
    const lease = { holder: 'm2', resourceVersion: '9' };
    assert.equal(
      decideLeadership('m1', lease, { resourceVersion: '9', at: 1000 }, 1000 + D - 1, D),
      'follow',
    );
    assert.equal(decideLeadership('m1', lease, { resourceVersion: '9', at: 1000 }, 1000 + D, D), 'take');
    assert.equal(
      decideLeadership('m1', lease, { resourceVersion: '8', at: 0 }, 1000 + D, D),
      'follow',
      'renewed since',
    );
  });
});

describe('expansion of a provisioned share', () => {
  const boundVolume = (capacity: string): V1PersistentVolume => ({
    metadata: { name: NAME, uid: 'pv-uid', ...ours },
    spec: {
      persistentVolumeReclaimPolicy: 'Delete',
      capacity: { storage: capacity },
      claimRef: { uid: UID },
    },
    status: { phase: 'Bound' },
  });
  const expanding = storageClass({ allowVolumeExpansion: true });
  const asking = (
    storage: string,
    status: V1PersistentVolumeClaim['status'] = { capacity: { storage: '2Gi' } },
  ) => ({
    ...claim({ volumeName: NAME, resources: { requests: { storage } } }),
    status,
  });
  const backingOf = (request: string, capacity?: string): V1PersistentVolumeClaim => ({
    metadata: backing.metadata,
    spec: { resources: { requests: { storage: request } } },
    status: capacity ? { capacity: { storage: capacity } } : {},
  });
  const step = (over: Partial<ProvisionSnapshot>) =>
    decideProvisioning(
      snapshot({ storageClass: expanding, share: share(), volume: boundVolume('2Gi'), ...over }),
    );

  it('backing claim first, then wait for its capacity (the file system grown), then the PV, then the claim', () => {
    assert.deepEqual(step({ claim: asking('5Gi'), backing: backingOf('2Gi', '2Gi') }), [
      { kind: 'expandBacking', namespace: 'leasehold', name: NAME, size: '5Gi' },
    ]);
    assert.deepEqual(kinds(step({ claim: asking('5Gi'), backing: backingOf('5Gi', '2Gi') })), ['wait']);
    assert.deepEqual(step({ claim: asking('5Gi'), backing: backingOf('5Gi', '5Gi') }), [
      { kind: 'expandVolume', name: NAME, size: '5Gi' },
    ]);
    assert.deepEqual(
      decideProvisioning(
        snapshot({
          storageClass: expanding,
          claim: asking('5Gi'),
          backing: backingOf('5Gi', '5Gi'),
          volume: boundVolume('5Gi'),
        }),
      ),
      [{ kind: 'claimResized', size: '5Gi' }],
    );
    const done = asking('5Gi', { capacity: { storage: '5Gi' } });
    assert.deepEqual(
      decideProvisioning(
        snapshot({
          storageClass: expanding,
          claim: done,
          backing: backingOf('5Gi', '5Gi'),
          volume: boundVolume('5Gi'),
        }),
      ),
      [],
    );
  });

  it('units compare by bytes; nothing without allowVolumeExpansion; a refusal is not retried for the same size', () => {
    assert.deepEqual(step({ claim: asking('2048Mi'), backing: backingOf('2Gi', '2Gi') }), []);
    assert.deepEqual(
      step({ claim: asking('5Gi'), backing: backingOf('2Gi', '2Gi'), storageClass: storageClass() }),
      [],
    );
    const refused = asking('5Gi', {
      capacity: { storage: '2Gi' },
      allocatedResources: { storage: '5Gi' },
      allocatedResourceStatuses: { storage: 'ControllerResizeInfeasible' },
    });
    assert.deepEqual(step({ claim: refused, backing: backingOf('2Gi', '2Gi') }), []);
    const askedMore = { ...refused, spec: { ...refused.spec, resources: { requests: { storage: '6Gi' } } } };
    assert.deepEqual(kinds(step({ claim: askedMore, backing: backingOf('2Gi', '2Gi') })), ['expandBacking']);
  });
});

describe('storage quantities', () => {
  it('reads what the API accepts, in bytes', async () => {
    const { storageBytes } = await import('../../manager/provisioning/storage-quantity.ts');
    assert.equal(storageBytes('1Gi'), 2 ** 30);
    assert.equal(storageBytes('1.5Gi'), 1.5 * 2 ** 30);
    assert.equal(storageBytes('500M'), 5e8);
    assert.equal(storageBytes('1e9'), 1e9);
    assert.equal(storageBytes('2048Mi'), 2 ** 31);
    assert.equal(storageBytes('10'), 10);
    for (const bad of ['', 'Gi', '1 Gi', '1GB', '-1Gi', 'lots'])
      assert.equal(storageBytes(bad), undefined, bad);
  });
});
