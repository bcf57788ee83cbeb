/**
 * The narrow port to the Lease API: get, create, and update by compare-and-swap.
 * Each call is one HTTP request with a hard deadline; a conflict (409, someone wrote
 * first) is an outcome, not an exception, because callers must handle it. Any other
 * failure throws KubeApiError naming the lease.
 */
import * as k8s from '@kubernetes/client-node';
import { kubeCall, statusOf, withDeadline } from './kube-client.ts';
import { fromWire, type LeaseRecord, leaseKey, toWire } from './lease-record.ts';

export type WriteOutcome = { kind: 'written'; lease: LeaseRecord } | { kind: 'conflict' };

export interface LeaseStore {
  get(namespace: string, name: string, deadlineMs: number): Promise<LeaseRecord | undefined>;
  create(record: LeaseRecord, deadlineMs: number): Promise<WriteOutcome>;
  /** Writes `record` only if the stored resourceVersion still equals `record.resourceVersion`. */
  update(record: LeaseRecord, deadlineMs: number): Promise<WriteOutcome>;
}

export class KubeLeaseStore implements LeaseStore {
  private readonly api: k8s.CoordinationV1Api;
  constructor(kc: k8s.KubeConfig) {
    this.api = kc.makeApiClient(k8s.CoordinationV1Api);
  }

  async get(namespace: string, name: string, deadlineMs: number): Promise<LeaseRecord | undefined> {
    try {
      return fromWire(await this.api.readNamespacedLease({ namespace, name }, withDeadline(deadlineMs)));
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      return kubeCall(`reading lease ${namespace}/${name}`, () => Promise.reject(err));
    }
  }

  async create(record: LeaseRecord, deadlineMs: number): Promise<WriteOutcome> {
    const body = toWire({ ...record, resourceVersion: '' });
    return this.write(`creating lease ${leaseKey(record)}`, () =>
      this.api.createNamespacedLease({ namespace: record.namespace, body }, withDeadline(deadlineMs)),
    );
  }

  async update(record: LeaseRecord, deadlineMs: number): Promise<WriteOutcome> {
    const body = toWire(record);
    return this.write(`updating lease ${leaseKey(record)}`, () =>
      this.api.replaceNamespacedLease(
        { namespace: record.namespace, name: record.name, body },
        withDeadline(deadlineMs),
      ),
    );
  }

  private async write(operation: string, call: () => Promise<k8s.V1Lease>): Promise<WriteOutcome> {
    try {
      return { kind: 'written', lease: fromWire(await call()) };
    } catch (err) {
      if (statusOf(err) === 409) return { kind: 'conflict' };
      return kubeCall(operation, () => Promise.reject(err));
    }
  }
}
