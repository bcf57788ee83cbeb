/**
 * The three commands of `kubectl leasehold`: each reads what it needs
 * (cluster-reads.ts) and hands a snapshot to its pure view (status-table.ts,
 * timeline-lines.ts, why-verdict.ts), which returns the lines to print. No deciding
 * here beyond which objects to read.
 *
 * A SHARE is looked up among the ShareManagers of -n's namespace (or of every
 * namespace); with -n and no match there, among every namespace's too, for a share
 * provisioned elsewhere for a claim in that namespace (share-snapshot.ts findShare),
 * as far as the user may list them.
 */
import { statusOf } from '../lib/kube-client.ts';
import { LABEL_SHARE_MANAGER } from '../lib/lease-record.ts';
import type { ShareManager } from '../manager/share-model/share-manager-spec.ts';
import type { ClusterReader } from './cluster-reads.ts';
import type { Command } from './plugin-args.ts';
import { PluginError } from './plugin-error.ts';
import { findShare, type ShareSnapshot } from './share-snapshot.ts';
import { statusLines } from './status-table.ts';
import { timelineLines } from './timeline-lines.ts';
import { agentLogPlan, whyLines } from './why-verdict.ts';

export interface CommandInput {
  command: Command;
  share?: string;
  namespace?: string;
}

export async function runCommand(input: CommandInput, reader: ClusterReader, now: Date): Promise<string[]> {
  const { namespace } = input;
  if (input.command === 'status') {
    const [sms, leases, pods] = await Promise.all([
      reader.shareManagers(namespace),
      reader.leases(namespace),
      reader.pods(namespace),
    ]);
    const shares: ShareSnapshot[] = sms.map((sm) => {
      const ns = sm.metadata.namespace;
      const name = sm.metadata.name;
      return {
        sm,
        lease: leases.find((l) => l.namespace === ns && l.name === name),
        pods: pods.filter(
          (p) => p.metadata?.namespace === ns && p.metadata?.labels?.[LABEL_SHARE_MANAGER] === name,
        ),
      };
    });
    return statusLines(
      shares,
      now,
      namespace === undefined ? 'in any namespace' : `in namespace ${namespace}`,
    );
  }
  const sm = await lookUp(reader, input.share ?? '', namespace);
  const ns = sm.metadata.namespace ?? '';
  const name = sm.metadata.name ?? '';
  if (input.command === 'timeline') {
    const events = await reader.events(ns, [name]);
    return timelineLines(
      sm,
      events.filter((e) => e.involvedObject?.kind === 'ShareManager'),
    );
  }
  const [lease, pods] = await Promise.all([reader.lease(ns, name), reader.pods(ns, name)]);
  const snapshot: ShareSnapshot = { sm, lease, pods };
  const plan = agentLogPlan(snapshot);
  const [events, agentLog] = await Promise.all([
    reader.events(
      ns,
      [name, ...pods.map((p) => p.metadata?.name ?? '')].filter((n) => n !== ''),
    ),
    'read' in plan ? reader.agentLog(ns, plan.read) : Promise.resolve(plan.known),
  ]);
  return whyLines({ ...snapshot, events, agentLog }).lines;
}

async function lookUp(
  reader: ClusterReader,
  share: string,
  namespace: string | undefined,
): Promise<ShareManager> {
  let found = findShare(await reader.shareManagers(namespace), share, namespace);
  if (found.kind === 'missing' && namespace !== undefined) {
    // A provisioned share lives in its class's backing namespace, its claim in -n's.
    // A user who may list only -n's namespace is told about that namespace alone.
    const everywhere = await reader.shareManagers(undefined).catch((err: unknown) => {
      if (statusOf(err) === 403) return undefined;
      throw err;
    });
    if (everywhere) found = findShare(everywhere, share, namespace);
  }
  if (found.kind !== 'found')
    throw new PluginError(found.kind === 'missing' ? 'E_NO_SHARE' : 'E_AMBIGUOUS', found.message, 1);
  return found.sm;
}
