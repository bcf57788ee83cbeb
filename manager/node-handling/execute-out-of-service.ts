/**
 * The I/O of the out-of-service taint (thin: the decision is decide-out-of-service.ts): one
 * merge patch on the Node carrying its metadata.resourceVersion (a CAS), and an Event on
 * the Node (through events.ts). 409 is the outcome `conflict` (the Node moved: decide
 * again on the fresh object, never retry blindly), 404 `gone`; other failures throw
 * KubeApiError naming the node. Events are best effort: a failure is logged, never thrown.
 */
import type { V1Node } from '@kubernetes/client-node';
import { KubeApiError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import type { EventRecorder } from '../events.ts';
import { addTaintPatch, removeTaintPatch } from './decide-out-of-service.ts';

export type TaintWriteOutcome = 'written' | 'conflict' | 'gone';
export type OutOfServiceEventReason = 'OutOfServiceTaintAdded' | 'OutOfServiceTaintRemoved';

export class OutOfServiceExecutor {
  private readonly core: k8s.CoreV1Api;

  constructor(
    kc: k8s.KubeConfig,
    private readonly identity: string,
    private readonly events: EventRecorder,
    private readonly deadlineMs: number,
  ) {
    this.core = kc.makeApiClient(k8s.CoreV1Api);
  }

  addTaint(node: V1Node): Promise<TaintWriteOutcome> {
    return this.patch(node, addTaintPatch(node, this.identity), 'adding the out-of-service taint to');
  }

  removeTaint(node: V1Node): Promise<TaintWriteOutcome> {
    return this.patch(node, removeTaintPatch(node), 'removing the out-of-service taint from');
  }

  private async patch(node: V1Node, body: object, operation: string): Promise<TaintWriteOutcome> {
    const name = node.metadata?.name ?? '';
    try {
      await this.core.patchNode(
        { name, body },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch, withDeadline(this.deadlineMs)),
      );
      return 'written';
    } catch (err) {
      const status = statusOf(err);
      if (status === 409) return 'conflict';
      if (status === 404) return 'gone';
      throw new KubeApiError(`${operation} node ${name}`, status, { cause: err });
    }
  }

  recordEvent(node: V1Node, reason: OutOfServiceEventReason, message: string): Promise<void> {
    return this.events.recordAbout(
      {
        apiVersion: 'v1',
        kind: 'Node',
        name: node.metadata?.name ?? '',
        namespace: undefined,
        uid: node.metadata?.uid,
      },
      reason === 'OutOfServiceTaintAdded' ? 'Warning' : 'Normal',
      reason,
      message,
    );
  }
}
