/**
 * The failover benchmark's managed modes, as data (pure): the chart values each
 * installs, its share lease timings and the line that says what it is, in one place for
 * the mode switch (real-mode-switch.ts) and the runs (real-node-runs.ts).
 *
 *   leasehold      the chart's defaults (lease 6 s, renew 2 s, deadline 4 s; volume
 *                  handoff volumes-in-use)
 *   leasehold-va   the same with manager.volumeHandoff=volume-attachment
 *   longhorn       Longhorn v1.7's timings (renew 3 s, lease 7 s) given to leasehold's
 *                  agent and manager; its 1 s wall-clock verdict emulated (stats.ts)
 *   leasehold-oos  the chart's defaults plus the opt-in out-of-service taint
 *                  (nodeLeaseGrace = the cluster's node-monitor grace) on top of
 *                  volume-attachment
 *   leasehold-witnesses  (3 nodes or more) the chart's defaults plus
 *                  manager.witnesses.nodes = every node (docs/design.md, "Serving through
 *                  an API outage"): the same crash with witness promises on
 * The benchmark's other mode, stock (no manager), is real-stock-runs.ts's.
 */

export const MANAGED_MODES = [
  'leasehold',
  'leasehold-va',
  'longhorn',
  'leasehold-oos',
  'leasehold-witnesses',
] as const;
/** The modes that run a leasehold manager with the crashed share. */
export type ManagedMode = (typeof MANAGED_MODES)[number];

export interface LeaseTimingsUsed {
  duration: string;
  renewInterval: string;
  renewDeadline: string;
}

export const CHART_LEASE: LeaseTimingsUsed = { duration: '6s', renewInterval: '2s', renewDeadline: '4s' };
export const LONGHORN_LEASE: LeaseTimingsUsed = { duration: '7s', renewInterval: '3s', renewDeadline: '5s' };
export const LONGHORN_LEASE_MS = 7000;

/**
 * helm --set values of a managed mode; `grace` is the cluster's node-monitor grace period,
 * `nodes` the system's node names (the witnesses of `leasehold-witnesses`: 3 or more).
 */
export function modeChartValues(
  mode: ManagedMode,
  grace: string,
  nodes: readonly string[] = [],
): Record<string, string> {
  switch (mode) {
    case 'leasehold-witnesses':
      if (nodes.length < 3)
        throw new Error(`mode leasehold-witnesses needs 3 or more nodes (witnesses), not ${nodes.length}`);
      return { 'manager.witnesses.nodes': `{${nodes.join(',')}}` };
    case 'longhorn':
      return {
        'agent.leaseDuration': LONGHORN_LEASE.duration,
        'agent.renewInterval': LONGHORN_LEASE.renewInterval,
        'agent.renewDeadline': LONGHORN_LEASE.renewDeadline,
      };
    case 'leasehold-oos':
      return {
        'manager.outOfServiceTaint': 'true',
        'manager.nodeLeaseGrace': grace,
        'manager.volumeHandoff': 'volume-attachment',
      };
    case 'leasehold-va':
      return { 'manager.volumeHandoff': 'volume-attachment' };
    case 'leasehold':
      return {};
  }
}

export function modeLease(mode: ManagedMode): LeaseTimingsUsed {
  return mode === 'longhorn' ? LONGHORN_LEASE : CHART_LEASE;
}

/** What a managed mode is, in one line (written into the result file). */
export function modeSettings(mode: ManagedMode, grace: string): string {
  if (mode === 'longhorn')
    return 'leasehold agent+manager with lease 7 s, renew 3 s (deadline 5 s), volume handoff volumes-in-use; detection = emulated Longhorn verdict: first 1 s tick after renewTime + 7 s (wall clock); crash-to-serving, clientWriteGap and server Ready (NFS) or crash-to-serving (toy) = measured + (emulated - measured detection); the other steps as measured';
  if (mode === 'leasehold-witnesses')
    return 'leasehold chart defaults (lease 6 s, renew 2 s, deadline 4 s; volume handoff volumes-in-use) with witness promises on (manager.witnesses.nodes = every node); detection = status.lastFailover.detectedAt';
  const va = mode === 'leasehold-va' || mode === 'leasehold-oos';
  return `leasehold chart defaults: lease 6 s, renew 2 s, deadline 4 s; volume handoff ${va ? 'volume-attachment (VolumeAttachment deleted)' : 'volumes-in-use (default)'}${mode === 'leasehold-oos' ? `; out-of-service taint on (node lease grace ${grace})` : ''}; detection = status.lastFailover.detectedAt`;
}
