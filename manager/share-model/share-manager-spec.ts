/**
 * The ShareManager custom resource (leasehold.dev/v1alpha1) as the manager reads it,
 * and the pure check of what its OpenAPI schema cannot express.
 *
 * The CRD schema (charts/leasehold/crds/sharemanagers.leasehold.dev.yaml) rejects
 * missing fields, bad names, bad duration strings and out-of-range values at the API.
 * `resolveSpec` adds the cross-field timing rule (D > T > R, T - R >= retry) and the
 * fence bound (grace < timeout < D - T, lib/fence-timing.ts), with the manager's defaults
 * filled in, and returns a message naming the fields on failure: the reconciler then
 * sets status Error and touches nothing else. Without `spec.fence` the fence is `pod`
 * (every process of the pod but the agent); `none` is honoured only when written.
 * Without `spec.server` the shipped NFS server runs (nfs-server-preset.ts): its export
 * path (the mount path) and `spec.nfs` must pass the server's own rules, and without
 * `spec.serverCheck` the agent checks TCP 2049; `spec.nfs` with `spec.server` is an error.
 * `spec.consumer` (the share published as a PV + claim, decide-consumer.ts) likewise needs
 * the shipped server, and its claim must not be the backing claim.
 */
import { posix } from 'node:path';
import type {
  V1Affinity,
  V1EnvVar,
  V1ObjectMeta,
  V1ResourceRequirements,
  V1SecurityContext,
  V1Toleration,
} from '@kubernetes/client-node';
import { formatDuration, parseDuration } from '../../lib/env-config.ts';
import { defaultFenceTiming, fenceTimingProblems } from '../../lib/fence-timing.ts';
import { type LeaseTimings, timingProblem } from '../config.ts';
import { type ExportStatus, type NfsSettings, nfsServerCheck, nfsSpecProblems } from './nfs-server-preset.ts';

export const SM_GROUP = 'leasehold.dev';
export const SM_VERSION = 'v1alpha1';
export const SM_PLURAL = 'sharemanagers';
export const SM_KIND = 'ShareManager';

export const SM_STATES = ['Pending', 'Starting', 'Running', 'FailingOver', 'Error', 'Stopped'] as const;
export type ShareManagerState = (typeof SM_STATES)[number];

export interface ShareManagerSpec {
  volume: { pvc: string; mountPath?: string };
  /** Unset: the shipped NFS server (nfs-server-preset.ts). */
  server?: {
    image: string;
    args?: string[];
    command?: string[];
    ports?: { name?: string; containerPort: number; protocol?: string }[];
    env?: V1EnvVar[];
    securityContext?: V1SecurityContext;
  };
  /** Settings of the shipped NFS server (only without spec.server): nfs-server-preset.ts. */
  nfs?: NfsSettings;
  lease?: { duration?: string; renewInterval?: string; renewDeadline?: string; retryPeriod?: string };
  fence?: {
    action?: 'pod' | 'signal' | 'command' | 'none';
    process?: string;
    signal?: string;
    command?: string;
    grace?: string;
    timeout?: string;
  };
  serverCheck?: { target: string; timeout?: string; failures?: number };
  scheduling?: {
    nodeSelector?: Record<string, string>;
    tolerations?: V1Toleration[];
    /** The share pod's affinity; the failover's anti-affinity against a lost node is added (pod-spec.ts). */
    affinity?: V1Affinity;
    priorityClassName?: string;
  };
  /** Requests and limits of the two containers of the share pod. */
  resources?: { server?: V1ResourceRequirements; agent?: V1ResourceRequirements };
  serviceAccountName?: string;
  /** Publish the share as an RWX PV + claim (shipped NFS server only): decide-consumer.ts. */
  consumer?: { claimName: string };
}

export interface LastFailover {
  reason: string;
  lostNode: string;
  lostPod: string;
  by: string;
  detectedAt?: string;
  markedAt?: string;
  podDeletedAt?: string;
  detachedAt?: string;
  replacementCreatedAt?: string;
  completedAt?: string;
  replacementPod?: string;
  /** What the volume handoff did (manager/failover/volume-handoff.ts). */
  volumeHandoff?: string;
}

export interface ShareManagerStatus {
  state?: ShareManagerState;
  message?: string;
  node?: string;
  pod?: string;
  leaseHolder?: string;
  observedGeneration?: number;
  /** Arbitration of the next pod creation among managers (see decide-reconcile.ts). */
  podRequest?: { id: string; by: string };
  lastFailover?: LastFailover;
  /** How to mount the share (default NFS server only): nfs-server-preset.ts. */
  export?: ExportStatus;
  conditions?: {
    type: string;
    status: string;
    reason?: string;
    message?: string;
    lastTransitionTime?: string;
  }[];
}

export interface ShareManager {
  apiVersion?: string;
  kind?: string;
  metadata: V1ObjectMeta;
  spec: ShareManagerSpec;
  status?: ShareManagerStatus;
}

/** True when the ShareManager gets the shipped NFS server (no spec.server). */
export function usesNfsDefault(spec: ShareManagerSpec): boolean {
  return spec.server === undefined;
}

export type FenceAction = NonNullable<NonNullable<ShareManagerSpec['fence']>['action']>;

export type ResolvedSpec =
  | {
      ok: true;
      timings: LeaseTimings;
      mountPath: string;
      fenceAction: FenceAction;
      /** true: no spec.server, the shipped NFS server runs (nfs-server-preset.ts). */
      nfsDefault: boolean;
      /** spec.serverCheck, else the NFS preset for the default server, else none. */
      serverCheck: ShareManagerSpec['serverCheck'];
      /** spec.consumer: the claim to publish the share as (decide-consumer.ts); undefined when unset. */
      consumer: { claimName: string; backingClaim: string } | undefined;
    }
  | { ok: false; message: string };

/** Fills in the manager's default timings and checks the rules the schema cannot express. */
export function resolveSpec(spec: ShareManagerSpec, defaults: LeaseTimings): ResolvedSpec {
  const problems: string[] = [];
  const timing = (field: keyof NonNullable<ShareManagerSpec['lease']>, fallback: number): number => {
    const text = spec.lease?.[field];
    if (text === undefined) return fallback;
    const ms = parseDuration(text);
    if (ms === undefined || ms <= 0) {
      problems.push(
        `spec.lease.${field}=${JSON.stringify(text)}: must be a duration such as 500ms, 2s or 1m`,
      );
      return fallback;
    }
    return ms;
  };
  const timings: LeaseTimings = {
    leaseDurationMs: timing('duration', defaults.leaseDurationMs),
    renewIntervalMs: timing('renewInterval', defaults.renewIntervalMs),
    renewDeadlineMs: timing('renewDeadline', defaults.renewDeadlineMs),
    retryPeriodMs: timing('retryPeriod', defaults.retryPeriodMs),
  };
  if (timings.leaseDurationMs % 1000 !== 0) {
    problems.push(
      `spec.lease.duration=${formatDuration(timings.leaseDurationMs)}: must be whole seconds (Lease.spec.leaseDurationSeconds)`,
    );
  }
  const rule = problems.length === 0 ? timingProblem(timings) : undefined;
  if (rule) problems.push(`spec.lease (defaults filled in from the manager): ${rule}`);
  const fence = spec.fence;
  // No unfenced default: without spec.fence the agent stops every process of the pod.
  const fenceAction: FenceAction = fence?.action ?? 'pod';
  if (fenceAction === 'signal' && !fence?.process)
    problems.push('spec.fence.process is required when action is signal');
  if (fenceAction === 'command' && !fence?.command)
    problems.push('spec.fence.command is required when action is command');
  if (fenceAction !== 'none' && problems.length === 0) problems.push(...fenceTimingOf(fence, timings));
  const mountPath = spec.volume.mountPath ?? '/export';
  // A path the kubelet would mount as written but a server would normalise (ganesha
  // exports "/a/../b" as "/b"): status.export would name a path nobody serves.
  if (mountPath !== posix.normalize(mountPath) || !mountPath.startsWith('/') || /.\/$/.test(mountPath))
    problems.push(
      `spec.volume.mountPath=${JSON.stringify(mountPath)}: must be a normalised absolute path (no "." or ".." parts, no repeated or trailing "/")${mountPath.startsWith('/') ? `; did you mean ${JSON.stringify(posix.normalize(mountPath).replace(/(.)\/$/, '$1'))}?` : ''}`,
    );
  const nfsDefault = usesNfsDefault(spec);
  if (nfsDefault) problems.push(...nfsSpecProblems(mountPath, spec.nfs));
  else if (spec.nfs !== undefined)
    problems.push(
      'spec.nfs: applies only to the shipped NFS server; with spec.server, configure your server through spec.server.env',
    );
  problems.push(...consumerProblems(spec, nfsDefault));
  if (problems.length > 0) return { ok: false, message: problems.join('; ') };
  const serverCheck = spec.serverCheck ?? (nfsDefault ? nfsServerCheck(timings) : undefined);
  const consumer = spec.consumer
    ? { claimName: spec.consumer.claimName, backingClaim: spec.volume.pvc }
    : undefined;
  return { ok: true, timings, mountPath, fenceAction, nfsDefault, serverCheck, consumer };
}

/** spec.consumer's rules the schema cannot express (decide-consumer.ts). */
function consumerProblems(spec: ShareManagerSpec, nfsDefault: boolean): string[] {
  const consumer = spec.consumer;
  if (consumer === undefined) return [];
  if (!nfsDefault)
    return [
      'spec.consumer: applies only to the shipped NFS server (no spec.server), whose export and mount options the manager knows; with spec.server, create the PersistentVolume and claim yourself',
    ];
  if (consumer.claimName === spec.volume.pvc)
    return [
      `spec.consumer.claimName=${JSON.stringify(consumer.claimName)}: must differ from spec.volume.pvc, the backing claim the server mounts`,
    ];
  return [];
}

/** spec.fence.grace/timeout (or their defaults) against D - T: lib/fence-timing.ts. */
function fenceTimingOf(fence: ShareManagerSpec['fence'], timings: LeaseTimings): string[] {
  const defaults = defaultFenceTiming(timings.leaseDurationMs, timings.renewDeadlineMs);
  const parse = (field: 'grace' | 'timeout', fallback: number): number | string => {
    const text = fence?.[field];
    if (text === undefined) return fallback;
    const ms = parseDuration(text);
    return ms === undefined
      ? `spec.fence.${field}=${JSON.stringify(text)}: must be a duration such as 500ms or 1s`
      : ms;
  };
  const timeout = parse('timeout', defaults.timeoutMs);
  if (typeof timeout === 'string') return [timeout];
  const grace = parse('grace', Math.floor(timeout / 2));
  if (typeof grace === 'string') return [grace];
  return fenceTimingProblems(
    { graceMs: fence?.action === 'command' ? undefined : grace, timeoutMs: timeout },
    timings,
    {
      grace: 'spec.fence.grace',
      timeout: 'spec.fence.timeout',
      duration: 'the lease duration',
      deadline: 'the renew deadline',
    },
    formatDuration,
  );
}
