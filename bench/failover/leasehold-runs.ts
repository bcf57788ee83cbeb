/**
 * Node crashes with the leasehold manager installed (chart defaults, or other agent
 * timings such as Longhorn's): one share, `runs` times: crash the node serving it,
 * measure detection (status.lastFailover.detectedAt, first value seen) and
 * crash-to-serving (the replacement's serving-window start), heal (reboot) the node,
 * wait until it is Ready again, repeat. A run that is not served within `budgetMs` is
 * recorded with a note and the next run proceeds. Each crash comes after a random pause
 * of up to `phaseSpreadMs` (the attach-detach controller's sync period), so that crash
 * times are spread uniformly over that controller's cycle.
 *
 * With `longhorn`, each sample also gets the emulated Longhorn verdict (1 s periodic
 * wall-clock check of renewTime, see stats.ts) and crash-to-serving shifted by the
 * difference between that verdict and ours (the rest of the pipeline is the same).
 */
import { PodTracker } from '../../dev/system/failover-facts.ts';
import { createShare, pvName, servingNow, shareStatus, waitServing } from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE, type System } from '../../dev/system/system.ts';
import { sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { crashToServing, longhornVerdictMs, round, shiftByDetection, victimStillServing } from './stats.ts';

export interface CrashSample {
  run: number;
  node: string;
  detectS?: number;
  /** The manager's handoff step done (status.lastFailover.detachedAt). */
  handoffS?: number;
  /** The old node's attachment detached: ControllerUnpublish done, finalizer removed (sim attacher). */
  oldDetachedS?: number;
  /** The volume attached to the new node (sim attacher). */
  attachedS?: number;
  /** The new agent acquired the lease (status.lastFailover.completedAt). */
  acquiredS?: number;
  servingS?: number;
  note?: string;
}

const SHARE = 'bench';

async function nodeReady(sys: System, node: string): Promise<boolean> {
  const n = await sys.core.readNode({ name: node }, withDeadline(5_000));
  return n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export async function lastRenewMs(sys: { kc: k8s.KubeConfig }, share = SHARE): Promise<number | undefined> {
  const coord = sys.kc.makeApiClient(k8s.CoordinationV1Api);
  const lease = await coord.readNamespacedLease(
    { namespace: SHARES_NAMESPACE, name: share },
    withDeadline(5_000),
  );
  const renew = lease.spec?.renewTime as unknown as string | Date | undefined;
  return renew === undefined ? undefined : new Date(renew).getTime();
}

export async function leaseholdCrashRuns(
  sys: System,
  runs: number,
  budgetMs: number,
  say: (line: string) => void,
  phaseSpreadMs: number,
  longhorn?: { leaseMs: number },
): Promise<CrashSample[]> {
  const samples: CrashSample[] = [];
  await createShare(sys, SHARE);
  for (let run = 1; run <= runs; run++) {
    const chosen = await waitServing(sys, SHARE, 120_000);
    // A random phase against the renew period and the attach-detach controller's state
    // sync: without it, runs that each last about one sync period lock onto its phase.
    await sleep(Math.random() * phaseSpreadMs);
    // NB: the victim is the node serving now, after the pause: the share may have moved
    // during it (crashing the old node then measured the earlier move, -38.22 s once).
    const before = victimStillServing(chosen, await servingNow(sys, SHARE).catch(() => undefined))
      ? chosen
      : await waitServing(sys, SHARE, 120_000);
    const tracker = new PodTracker(sys, SHARE);
    const crashAt = Date.now();
    await sys.sim.node(before.node).crash();
    const renewMs = await lastRenewMs(sys).catch(() => undefined);
    const sample: CrashSample = { run, node: before.node };
    try {
      const after = await waitServing(sys, SHARE, budgetMs, before.pod);
      const window = sys.sim.servingWindows(pvName(SHARE)).find((w) => w.id === after.pod);
      // A window that began before the crash is rejected (stats.ts crashToServing).
      const judged = crashToServing(
        crashAt,
        window ? new Date(window.startWall).getTime() : undefined,
        budgetMs,
      );
      if (judged.kind === 'measured') sample.servingS = judged.s;
      else sample.note = `${after.pod}: ${judged.reason}`;
      await sleep(500);
    } catch {
      sample.note = `not served again within ${budgetMs / 1000} s`;
    } finally {
      await tracker.stop();
    }
    const latest = (await shareStatus(sys, SHARE).catch(() => undefined))?.lastFailover?.detectedAt;
    const detectedAt =
      tracker.firstFailover.detectedAt ??
      (latest !== undefined && new Date(latest).getTime() >= crashAt ? latest : undefined);
    if (detectedAt) sample.detectS = round((new Date(detectedAt).getTime() - crashAt) / 1000);
    const since = (wall: string | Date | undefined) => {
      const ms = wall === undefined ? Number.NaN : new Date(wall).getTime() - crashAt;
      return ms >= 0 ? round(ms / 1000) : undefined;
    };
    const record = (await shareStatus(sys, SHARE).catch(() => undefined))?.lastFailover;
    sample.handoffS = since(record?.detachedAt);
    sample.acquiredS = since(record?.completedAt);
    const pv = pvName(SHARE);
    const afterCrash = sys.sim.attacher.timings.filter((t) => t.pv === pv && t.doneWall.getTime() >= crashAt);
    sample.oldDetachedS = since(
      afterCrash.find((t) => t.op === 'detach' && t.node === before.node)?.doneWall,
    );
    sample.attachedS = since(afterCrash.find((t) => t.op === 'attach' && t.node !== before.node)?.doneWall);
    if (longhorn && renewMs !== undefined && sample.detectS !== undefined) {
      const verdict = longhornVerdictMs(renewMs, longhorn.leaseMs, crashAt + Math.random() * 1000);
      const lhDetectS = round((verdict - crashAt) / 1000);
      const shifted = shiftByDetection(sample.servingS, sample.detectS, lhDetectS);
      if (shifted === undefined) delete sample.servingS;
      else sample.servingS = shifted;
      sample.detectS = lhDetectS;
    }
    samples.push(sample);
    say(
      `run ${run}/${runs}: crashed ${before.node}: detected ${sample.detectS ?? '?'} s, handoff ${sample.handoffS ?? '?'} s, old detached ${sample.oldDetachedS ?? '?'} s, attached ${sample.attachedS ?? '?'} s, acquired ${sample.acquiredS ?? '?'} s, serving ${sample.servingS ?? '?'} s${sample.note ? ` (${sample.note})` : ''}`,
    );
    sys.sim.node(before.node).heal();
    const deadline = performance.now() + 60_000;
    while (performance.now() < deadline && !(await nodeReady(sys, before.node).catch(() => false)))
      await sleep(250);
  }
  return samples;
}
