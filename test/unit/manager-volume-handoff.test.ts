/**
 * The volume handoff decision (manager/failover/volume-handoff.ts): every branch of decideHandoff
 * with injected monotonic times, the unique CSI volume name, and the JSON patch that
 * removes exactly one entry (applied here to a volumesInUse list, as the API would).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  csiUniqueVolumeName,
  decideHandoff,
  describeHandoff,
  type HandoffInput,
  releaseInUsePatch,
  unmountCheckAt,
} from '../../manager/failover/volume-handoff.ts';

const OURS = csiUniqueVolumeName('csi.leasehold.dev', 'pv-a');
const OTHER = csiUniqueVolumeName('csi.leasehold.dev', 'pv-other');

/** A node that went silent: holder last renewed at 10 s (our clock), node heartbeat at 9 s. */
function input(overrides: Partial<HandoffInput> = {}): HandoffInput {
  return {
    mode: 'volumes-in-use',
    lostNode: 'sim-1',
    pv: { name: 'pv-a', csi: { driver: 'csi.leasehold.dev', volumeHandle: 'pv-a' }, multiAttach: false },
    volumesInUse: [OTHER, OURS],
    attachments: ['csi-123'],
    newerPodOnNode: undefined,
    heartbeatChangedAt: 9_000,
    holderSilentSince: 10_000,
    renewDeadlineMs: 4_000,
    ...overrides,
  };
}

/** RFC 6902 test+remove on a list, as the API server applies it. */
function apply(list: string[], patch: object[]): string[] | 'testFailed' {
  const out = [...list];
  for (const op of patch as { op: string; path: string; value?: string }[]) {
    const index = Number(op.path.split('/').pop());
    if (op.op === 'test' && out[index] !== op.value) return 'testFailed';
    if (op.op === 'remove') out.splice(index, 1);
  }
  return out;
}

describe('decideHandoff: volumes-in-use (the default)', () => {
  it('names the CSI volume as the kubelet and the controller do', () => {
    assert.equal(OURS, 'kubernetes.io/csi/csi.leasehold.dev^pv-a');
  });

  it('releases exactly our entry of a silent node, at its index', () => {
    assert.deepEqual(decideHandoff(input()), {
      kind: 'releaseInUse',
      uniqueName: OURS,
      index: 1,
      waitDetached: false,
    });
  });

  it("the patch removes that one entry and leaves the node's other volumes", () => {
    const d = decideHandoff(input());
    assert.equal(d.kind, 'releaseInUse');
    if (d.kind !== 'releaseInUse') return;
    assert.deepEqual(apply([OTHER, OURS], releaseInUsePatch(d.uniqueName, d.index)), [OTHER]);
  });

  it('the patch fails (never removes another volume) when the list moved since the read', () => {
    const d = decideHandoff(input());
    if (d.kind !== 'releaseInUse') assert.fail('expected releaseInUse');
    assert.equal(apply([OURS, OTHER], releaseInUsePatch(d.uniqueName, d.index)), 'testFailed');
    assert.equal(apply([OTHER], releaseInUsePatch(d.uniqueName, d.index)), 'testFailed');
  });

  it("leaves it to the kubelet when the node heartbeat was seen after the holder's renew deadline", () => {
    const d = decideHandoff(input({ heartbeatChangedAt: 14_001 }));
    assert.equal(d.kind, 'leaveToKubelet');
    assert.equal((d as { kubeletAlive?: boolean }).kubeletAlive, true, 'the unmount check watches it');
    const notInUse = decideHandoff(input({ volumesInUse: [OTHER] }));
    assert.equal(notInUse.kind, 'leaveToKubelet');
    assert.equal(
      (notInUse as { kubeletAlive?: boolean }).kubeletAlive,
      false,
      'nothing for the check to watch',
    );
  });

  it('the unmount check: a live kubelet that still lists the volume is overruled; once detached there, nothing', () => {
    const overdue = decideHandoff(input({ heartbeatChangedAt: 14_001, unmountOverdue: true }));
    assert.deepEqual(overdue, { kind: 'releaseInUse', uniqueName: OURS, index: 1, waitDetached: false });
    const unmounted = decideHandoff(
      input({ heartbeatChangedAt: 14_001, unmountOverdue: true, volumesInUse: [OTHER] }),
    );
    assert.equal(unmounted.kind, 'leaveToKubelet', 'the kubelet did clear it: the controller detaches');
    const detached = decideHandoff(
      input({ heartbeatChangedAt: 14_001, unmountOverdue: true, attachments: [] }),
    );
    assert.equal(
      detached.kind,
      'nothing',
      'the kubelet re-lists a volume already detached: not ours to touch',
    );
  });

  it('unmountCheckAt: the timeout after the force-delete, then 10 s apart, 3 times; 0 turns it off', () => {
    assert.equal(unmountCheckAt(5_000, 30_000, 0), 35_000);
    assert.equal(unmountCheckAt(5_000, 30_000, 1), 45_000);
    assert.equal(unmountCheckAt(5_000, 30_000, 2), 55_000);
    assert.equal(unmountCheckAt(5_000, 30_000, 3), undefined, 'attempts spent');
    assert.equal(unmountCheckAt(5_000, 0, 0), undefined, 'LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT=0');
  });

  it("a heartbeat seen before the holder's renew deadline is no evidence of life", () => {
    assert.equal(decideHandoff(input({ heartbeatChangedAt: 14_000 })).kind, 'releaseInUse');
    assert.equal(decideHandoff(input({ heartbeatChangedAt: 12_000 })).kind, 'releaseInUse');
  });

  it("without the holder's silence time (after a takeover) or any heartbeat seen, releases", () => {
    assert.equal(
      decideHandoff(input({ holderSilentSince: undefined, heartbeatChangedAt: 99_000 })).kind,
      'releaseInUse',
    );
    assert.equal(decideHandoff(input({ heartbeatChangedAt: undefined })).kind, 'releaseInUse');
  });

  it('a multi-attach PV waits for the old attachment to be gone', () => {
    const pv = {
      name: 'pv-a',
      csi: { driver: 'csi.leasehold.dev', volumeHandle: 'pv-a' },
      multiAttach: true,
    };
    assert.deepEqual(decideHandoff(input({ pv })), {
      kind: 'releaseInUse',
      uniqueName: OURS,
      index: 1,
      waitDetached: true,
    });
  });

  it('a multi-attach PV still attached there is waited for even when the step does nothing itself (mode none, the Node gone)', () => {
    const pv = {
      name: 'pv-a',
      csi: { driver: 'csi.leasehold.dev', volumeHandle: 'pv-a' },
      multiAttach: true,
    };
    for (const over of [{ mode: 'none' as const }, { volumesInUse: undefined }]) {
      const d = decideHandoff(input({ pv, ...over }));
      assert.equal(d.kind, 'nothing', JSON.stringify(over));
      assert.equal(
        d.waitDetached,
        true,
        `the replacement waits for the old attachment: ${JSON.stringify(over)}`,
      );
      assert.match(d.kind === 'nothing' ? d.reason : '', /allows multi-attach/);
      // Nothing attached there any more: nothing to wait for.
      assert.notEqual(decideHandoff(input({ pv, attachments: [], ...over })).waitDetached, true);
    }
    // A single-attach PV: the controller orders detach before attach itself.
    assert.notEqual(decideHandoff(input({ mode: 'none' })).waitDetached, true);
  });

  it('not in use there but attached: the controller detaches it by itself', () => {
    assert.equal(decideHandoff(input({ volumesInUse: [OTHER] })).kind, 'leaveToKubelet');
  });

  it('not in use and not attached: nothing', () => {
    assert.equal(decideHandoff(input({ volumesInUse: [OTHER], attachments: [] })).kind, 'nothing');
  });

  it('a node object that is gone: nothing to patch', () => {
    assert.equal(decideHandoff(input({ volumesInUse: undefined })).kind, 'nothing');
  });

  it('a non-CSI PV falls back to deleting its VolumeAttachments', () => {
    const d = decideHandoff(input({ pv: { name: 'pv-a', csi: undefined, multiAttach: false } }));
    assert.equal(d.kind, 'deleteAttachments');
    assert.equal(
      decideHandoff(input({ pv: { name: 'pv-a', csi: undefined, multiAttach: false }, attachments: [] }))
        .kind,
      'nothing',
    );
  });
});

describe('decideHandoff: what every mode refuses', () => {
  for (const mode of ['volumes-in-use', 'volume-attachment'] as const) {
    it(`${mode}: a newer pod of the share manager on that node keeps its volume`, () => {
      assert.equal(decideHandoff(input({ mode, newerPodOnNode: 'share-a-x' })).kind, 'nothing');
    });
    it(`${mode}: no lost node, no bound PV: nothing`, () => {
      assert.equal(decideHandoff(input({ mode, lostNode: '' })).kind, 'nothing');
      assert.equal(decideHandoff(input({ mode, pv: undefined })).kind, 'nothing');
    });
  }

  it('volume-attachment deletes the attachments on the lost node, whatever the heartbeat', () => {
    assert.deepEqual(decideHandoff(input({ mode: 'volume-attachment', heartbeatChangedAt: 99_000 })), {
      kind: 'deleteAttachments',
      names: ['csi-123'],
      reason: 'mode volume-attachment',
      waitDetached: false,
    });
    assert.equal(decideHandoff(input({ mode: 'volume-attachment', attachments: [] })).kind, 'nothing');
  });

  it('none does nothing', () => {
    assert.equal(decideHandoff(input({ mode: 'none' })).kind, 'nothing');
  });
});

describe('describeHandoff', () => {
  it('says what was done, naming the node and the volume', () => {
    const text = describeHandoff(decideHandoff(input()), 'sim-1', 'pv-a');
    assert.match(
      text,
      /removed kubernetes\.io\/csi\/csi\.leasehold\.dev\^pv-a \(PV pv-a\) from node sim-1 status\.volumesInUse/,
    );
    assert.match(
      describeHandoff(decideHandoff(input({ mode: 'volume-attachment' })), 'sim-1', 'pv-a'),
      /deleted VolumeAttachment csi-123 on node sim-1/,
    );
  });
});
