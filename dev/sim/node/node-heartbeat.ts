/**
 * A node's heartbeats, as a kubelet sends them: the node Lease in kube-node-lease
 * renewed every `leaseRenewMs`, and the node status (Ready condition with a fresh
 * lastHeartbeatTime, volumesInUse) posted every `statusMs` and at once on request.
 * The real node-lifecycle controller of kube-controller-manager marks the node
 * NotReady (Unknown) once both stop for its grace period.
 *
 * Each request has a deadline shorter than the period, so a hung API server never
 * stacks requests. pause()/resume() stop and restart both (crash, freeze, partition).
 */
import { k8s, statusOf, withDeadline } from '../../../lib/kube-client.ts';
import { nodeConditions, nodeLeaseObject } from './node-object.ts';

export interface NodeHeartbeatOptions {
  kubeConfig: k8s.KubeConfig;
  nodeName: string;
  nodeUid: string;
  leaseRenewMs: number;
  leaseDurationSeconds: number;
  statusMs: number;
  volumesInUse(): string[];
  log(msg: string, extra?: Record<string, unknown>): void;
}

const STRATEGIC = k8s.setHeaderOptions(
  'Content-Type',
  k8s.PatchStrategy.StrategicMergePatch,
  withDeadline(4_000),
);

export class NodeHeartbeat {
  private leaseTimer: NodeJS.Timeout | undefined;
  private statusTimer: NodeJS.Timeout | undefined;
  private lease: k8s.V1Lease | undefined;
  private running = false;
  private readySince = new Date();
  private readonly coordination: k8s.CoordinationV1Api;
  private readonly core: k8s.CoreV1Api;
  private lastFailureLogged = 0;

  constructor(private readonly opts: NodeHeartbeatOptions) {
    this.coordination = opts.kubeConfig.makeApiClient(k8s.CoordinationV1Api);
    this.core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
  }

  resume(): void {
    if (this.running) return;
    this.running = true;
    this.readySince = new Date();
    const leaseLoop = async () => {
      if (!this.running) return;
      await this.renewLease();
      if (this.running) this.leaseTimer = setTimeout(leaseLoop, this.opts.leaseRenewMs);
    };
    const statusLoop = async () => {
      if (!this.running) return;
      await this.postStatus();
      if (this.running) this.statusTimer = setTimeout(statusLoop, this.opts.statusMs);
    };
    void leaseLoop();
    void statusLoop();
  }

  pause(): void {
    this.running = false;
    clearTimeout(this.leaseTimer);
    clearTimeout(this.statusTimer);
  }

  private failed(what: string, err: unknown): void {
    // One line per 10 s at most: an outage is expected in fault scenarios.
    if (performance.now() - this.lastFailureLogged < 10_000) return;
    this.lastFailureLogged = performance.now();
    this.opts.log(`${what} failed`, { status: statusOf(err), error: String(err) });
  }

  private async renewLease(): Promise<void> {
    const now = new Date();
    const fresh = nodeLeaseObject(this.opts.nodeName, this.opts.nodeUid, this.opts.leaseDurationSeconds, now);
    try {
      if (!this.lease) {
        try {
          this.lease = await this.coordination.createNamespacedLease(
            { namespace: 'kube-node-lease', body: fresh },
            withDeadline(4_000),
          );
          return;
        } catch (err) {
          if (statusOf(err) !== 409) throw err;
          this.lease = await this.coordination.readNamespacedLease(
            { namespace: 'kube-node-lease', name: this.opts.nodeName },
            withDeadline(4_000),
          );
        }
      }
      const body: k8s.V1Lease = { ...this.lease, spec: { ...this.lease.spec, ...fresh.spec } };
      this.lease = await this.coordination.replaceNamespacedLease(
        { namespace: 'kube-node-lease', name: this.opts.nodeName, body },
        withDeadline(4_000),
      );
    } catch (err) {
      this.lease = undefined; // read again next time (conflict, or the API moved on)
      this.failed('renewing the node lease', err);
    }
  }

  /** Posts Ready and volumesInUse now (also used on heal and when volumes change). */
  async postStatus(): Promise<void> {
    if (!this.running) return;
    const body = {
      status: {
        conditions: nodeConditions(new Date(), this.readySince),
        volumesInUse: this.opts.volumesInUse(),
      },
    };
    try {
      await this.core.patchNodeStatus({ name: this.opts.nodeName, body }, STRATEGIC);
    } catch (err) {
      this.failed('posting the node status', err);
    }
  }
}
