/**
 * Disruptions that must NOT cause a failover, or only a planned one, on real nodes
 * (dev/system/real-system.ts: a real control plane, two real nodes with the real
 * kubelet, containerd and runc, the project's images, the chart installed by helm;
 * default timings D 6 s, R 2 s, T 4 s), three shares on the shipped NFS server
 * (NFSv3), one system start:
 *  - clock skew: the agents of `skew-ahead` and `skew-behind` run under libfaketime
 *    10 minutes ahead and behind (clock-skew-policy.ts: a MutatingAdmissionPolicy
 *    mounts the host's libfaketime into the agent container, which the image lacks;
 *    the API server's certificates are made an hour early so that the agent behind
 *    accepts them) and keep their shares for 20 s, more than three lease durations
 *    (their renewTime is off by 10 minutes; no manager compares it); the 20 s count
 *    from when they serve, and the two scenarios below run meanwhile on `moved`;
 *  - the agent sidecar killed on a real kubelet: every process of its container
 *    (found by the container's cgroup under the pod's, from the pod's status)
 *    SIGKILLed. NB: unlike on simulated nodes, the pod often does not keep serving: the
 *    shipped NFS server stops ganesha when the agent's lease proof has been missing
 *    for 2 s (its watch, WATCH_TOLERANCE_MS, and the kubelet's liveness backstop,
 *    2 x 1 s), and the real kubelet's restart of the sidecar, the node process's start
 *    and a renewal took longer than that in five of six runs here (in the sixth the
 *    agent took up its own lease 1.6 s after the kill and the same pod served on); then
 *    the server container ends and with it the pod (restartPolicy Never), and the
 *    manager frees the ended holder's lease and replaces the pod. Either way, asserted: no failover (no lastFailover), no
 *    delinquent mark, the serving pod holds the lease, the old ganesha ran once and
 *    never beside another, and an NFSv3 client on the other node (e2e-support.ts
 *    RealNfsClient) through the Service loses nothing; printed: what the kubelet did,
 *    which pod serves and when, the client's gap;
 *  - drain: cordon + eviction (policy/v1 Eviction, as kubectl drain does) of `moved`'s
 *    pod: its agent releases the lease on SIGTERM (its log says `lease released`), or,
 *    when the loaded kubelet stops the server container long enough before the sidecar
 *    for the agent's server check to fail, fences and the manager frees the ended
 *    holder's lease (2 of 4 loaded runs on 2026-12-02 had no `lease released`; the order
 *    is the kubelet's: a native sidecar's SIGTERM waits for every main container to exit,
 *    kubelet v1.36.3 pkg/kubelet/kuberuntime/kuberuntime_termination_order.go); the
 *    new pod on the other node acquires it free (`how: free`: no lease-duration wait),
 *    no delinquent mark, no failover; the old ganesha stopped before the new one
 *    started; eviction -> serving is printed;
 *  - the API server down for 12 s (dev/cluster stopApiServer/startApiServer: every
 *    kubelet, kube-proxy, manager and agent loses it through its own path): 12 s exceeds
 *    T (4 s: every agent fences, its server stops, its pod ends), D (6 s) and the
 *    node-monitor grace (8 s). Then each share is either freed as an ended holder (no
 *    failover) or, when the real kubelet's report of the ended pod reaches the API later
 *    than D of the managers' healthy watch (its status retries run every 10 s; seen in 3
 *    of 8 runs at load 7-11, always `skew-behind`, once all three), failed over. Asserted:
 *    every failover's verdict came at least D after the API returned (no verdict from
 *    observations older than the outage: the blindness rule), its old ganesha had
 *    stopped before the API returned (a fenced pod, never a running server), a
 *    LeaseExpired only for a failover, no other share marked delinquent; every share
 *    served again by a running ganesha; never two ganesha. On the sim (immediate pod
 *    status) it was zero failovers every time.
 *  - one frozen share manager among many on a healthy node (last: it leaves its extra
 *    shares): 5 more shares of the demo record server (dev/share-server, compiled into
 *    the leasehold image's dist/, run by spec.server from that image) pinned to the node
 *    where `moved` serves, so 6-8 share-manager pods there; then
 *    the cgroup v1 freezer freezes `moved`'s pod cgroup only (dev/node/freezer.ts
 *    freezeCgroup: its agent stops renewing; the node, its kubelet and the other pods
 *    run on). Asserted: exactly that share fails over (lastFailover names the frozen
 *    pod, which is force-deleted, its replacement serves on the other node, the NFS
 *    client through the Service loses nothing), every other share keeps its pod and
 *    lease holder, one new LeaseExpired, no StormGuardActive. The pod stays frozen until
 *    its replacement serves: a frozen process ignores the kubelet's signals, so the
 *    kubelet cannot end the pod, its volume stays mounted and in the live node's
 *    volumesInUse (the manager first leaves the handoff to a live kubelet), and the
 *    attach-detach controller never detaches from a Ready node. Before the manager's
 *    unmount check no replacement served within 120 s (first run of this scenario);
 *    now the check releases the entry LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT after the
 *    force-delete (this file installs the chart with 10 s, a third of the default, to
 *    keep the wait short; the rule is the same), or the handoff released it at once when no heartbeat of the node
 *    came after the holder's renew deadline (10 s heartbeats: either happens; the
 *    check then follows up if the kubelet put it back). Asserted: lastFailover.
 *    volumeHandoff names the release, and the pod was still frozen when the
 *    replacement served. Then the pod's processes are SIGKILLed and
 *    thawed, dying before they run again. Why 5 and not the sim's 20 (or the 8 it had here first):
 *    the claim is per lease, so any bystander on the frozen pod's node would fail it
 *    if the manager blamed the node; the storm guard needs 3 stale leases (minLeases)
 *    and counts none on the source node, so no N moves it with one lease frozen; what N
 *    adds is a crowded kubelet (each real pod a pause, an agent and a server Node process
 *    under containerd and runc, the frozen pod's neighbours in the same pods' cgroup
 *    parent). 8 started in 11-25 s at load 3-11 on the 2 cores; at load 9, started
 *    together, they once starved `moved`'s own pod out before the freeze. 5 keep the
 *    node crowded (6-8 pods) for less (figures below); the sim's 20 on one simulated
 *    node were processes, not pods.
 * Every share: never two of its ganesha processes running at once (GaneshaTracker, one
 * per share for the whole file; its check is proven to fail on an overlap by
 * test/unit/real-share-windows.test.ts).
 * Not covered here: a clock that jumps while the agent runs (libfaketime's offset is
 * fixed from the process's start).
 * Cost: one system start (31-57 s; 40.6 and 70.3 s in the runs below), three shares and
 * the 5 bystanders. Trimmed on 2026-12-02 (the three shares created together, the two
 * skew policies applied at once; the bystanders created together; the agent kill's hold
 * D + 2 s, was 10 s; the skew window counted from the later skewed share's serving, not
 * from the first test's end; 5 bystanders, were 8), three passing runs: 190 s at a load
 * of 4-8 (start 50.9 s; the shares 10.0 s, agent kill 9.5, drain 7.8, skew check 1.7, API
 * outage 50.8, frozen pod 24.5 s with the bystanders serving in 10.1 s), 193 s at 12-14
 * (40.6; 6.7, 9.1, 7.7, 2.5, 65.1, 37.4 / 18.4 s) and 231 s at 13-18 (70.3; 23.5, 9.3,
 * 8.7, 0.9, 35.5, 50.5 / 35.7 s); the same day before it, at a load of 4-8, the shares
 * took 11.6 s and the agent kill 10.8 s. Before: the file 120-200 s at a
 * load of 3 to 15 without the frozen-pod scenario, 148-201 s with it (docs/testing.md).
 * NB: the API outage's cost is the API server's restart and the kubelets' (ready again
 * 15-44 s after its stop began, served again 9-38 s after that at loads 8-18), not a wait
 * of this file's.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, test } from 'node:test';
import { freezeCgroup, freezerState, podFreezerCgroup, thawNode } from '../../dev/node/freezer.ts';
import { SIGKILL, SIGTERM, signalPending } from '../../dev/node/pending-signals.ts';
import { overlappingWindows, type ServingWindow } from '../../dev/share-server/serving-window-log.ts';
import {
  createRealNfsShare,
  createRealRecordShare,
  GaneshaTracker,
  podLog,
} from '../../dev/system/real-share.ts';
import type { RealSystem } from '../../dev/system/real-system.ts';
import { SHARES_NAMESPACE } from '../../dev/system/real-system.ts';
import { sharePods, shareStatus } from '../../dev/system/shares.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { type k8s, withDeadline } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { backdateClusterCerts, LIBFAKETIME, skewAgentsOf } from './clock-skew-policy.ts';
import {
  E2E_NFS,
  eventsOf,
  failedOver,
  leaseOf,
  podProcesses,
  REAL_SERVING_WITHIN_MS,
  type ReadyRealPod,
  RealNfsClient,
  readyRealPod,
  servingRealPod,
  setUnschedulable,
  useRealSystem,
  waitPodProcessesGone,
} from './e2e-support.ts';
import { RealKernelClient } from './kernel-client-support.ts';

// The agent 10 min behind must accept the API server's certificate: made 1 h early.
const certClock = backdateClusterCerts('-1h');
after(() => certClock.restore());
const system = useRealSystem({
  nodes: 2,
  cluster: { attachDetachReconcileSyncPeriod: '2s', onProgress: certClock.onClusterProgress },
  // A third of the default 30 s: the frozen-pod scenario waits it out (see the header).
  values: { 'manager.kubeletUnmountTimeout': '10s' },
});

const SKEWED = { 'skew-ahead': '+10m', 'skew-behind': '-10m' } as const;
const MOVED = 'moved';
const SHARES = [...Object.keys(SKEWED), MOVED];
const SKEW_WINDOW_MS = 20_000; // more than three lease durations
const DELINQUENT = 'leasehold.dev/delinquent';
/** The chart's default lease duration D (the managers' blindness rule waits D of healthy watch). */
const D_MS = 6_000;
/** When the skew window began, and the pod serving each skewed share then. */
const skewWindow = { startedAt: 0, servers: new Map<string, string>() };

/**
 * A tracker per share for the whole file. NB: GaneshaTracker.windows() keeps every
 * window whose pod name is known (its filter compares a pod name with uid keys), so a
 * share's windows are picked here too: by the pod's name, or kept when the pod's name
 * was never learned (the id is the uid: stricter, never looser).
 */
const trackers = new Map<string, GaneshaTracker>();
after(async () => {
  for (const t of trackers.values()) await t.stop();
});
const UID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const fmt = (w: ServingWindow) =>
  `${w.id}[${w.startWall}..${w.stopWall ?? 'open'}${w.reason ? ` ${w.reason}` : ''}]`;

function ganeshaOf(share: string): ServingWindow[] {
  const t = trackers.get(share);
  assert.ok(t, `a ganesha tracker for ${share} (first test)`);
  return t.windows().filter((w) => w.id.startsWith(`${share}-`) || UID.test(w.id));
}

/** Never two ganesha processes of `share` running at once, over the whole file so far. */
function assertNeverTwo(share: string, label: string): ServingWindow[] {
  const windows = ganeshaOf(share);
  assert.deepEqual(
    overlappingWindows(windows, monotonicMs()).map(([a, b]) => `${fmt(a)} x ${fmt(b)}`),
    [],
    `${label}: no two ganesha processes of ${share} running at once`,
  );
  return windows;
}

/** The share's pod that serves now (servingRealPod), its ganesha running (an open window). */
const servingPod = (sys: RealSystem, share: string, notPod?: string, timeoutMs = REAL_SERVING_WITHIN_MS) =>
  servingRealPod(sys, share, {
    ...(notPod === undefined ? {} : { notPod }),
    timeoutMs,
    running: (pod) => ganeshaOf(share).some((w) => w.id === pod && w.stopMonoMs === undefined),
  });

/** The JSON log entries of `msg` in a container log's text (CRI lines): wall ms and fields. */
function entriesOf(text: string, msg: string): { ms: number; how?: string }[] {
  const out: { ms: number; how?: string }[] = [];
  for (const line of text.split('\n')) {
    const at = line.indexOf('{');
    if (at < 0 || !line.includes(JSON.stringify(msg))) continue;
    try {
      const e = JSON.parse(line.slice(at)) as { msg?: string; time?: string | number; how?: string };
      if (e.msg !== msg || e.time === undefined) continue;
      out.push({
        ms: typeof e.time === 'number' ? e.time : Date.parse(e.time),
        ...(e.how ? { how: e.how } : {}),
      });
    } catch {}
  }
  return out;
}

/** The agent's `lease acquired` entries (how: self, free, expired, ...), from the node's log files. */
const acquisitions = (sys: RealSystem, pod: k8s.V1Pod) =>
  entriesOf(podLog(sys.node(pod.spec?.nodeName ?? ''), pod, 'agent'), 'lease acquired');

/** Host pids of the container's processes: its cgroup, under the pod's, names its id. */
function containerPids(podUid: string, containerId: string): number[] {
  const pids: number[] = [];
  const mark = new RegExp(`pod${podUid}/(cri-containerd-)?${containerId}\\b`);
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (mark.test(readFileSync(`/proc/${name}/cgroup`, 'utf8'))) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

const agentStatus = (pod: k8s.V1Pod) => pod.status?.initContainerStatuses?.find((c) => c.name === 'agent');

/**
 * What a pod leaves while it lasts: its agent's and server's logs on the node's disk
 * (the kubelet removes them with the pod) and the last status the API had, read every
 * 100 ms until stop().
 */
function keepPodRecord(sys: RealSystem, pod: k8s.V1Pod) {
  const node = sys.node(pod.spec?.nodeName ?? '');
  const record = { agentLog: '', serverLog: '', last: pod };
  let watching = true;
  const readLogs = () => {
    record.agentLog = podLog(node, pod, 'agent') || record.agentLog;
    record.serverLog = podLog(node, pod, 'server') || record.serverLog;
  };
  // NB: the logs on their own 50 ms loop (local reads), not behind the API read: a CI run
  // at load 18 missed the agent's last line (`lease released`) between two reads, the
  // kubelet having removed the log by the next.
  const logs = (async () => {
    while (watching) {
      readLogs();
      await sleep(50);
    }
  })();
  const objects = (async () => {
    while (watching) {
      const now = await readPod(sys, pod.metadata?.name ?? '').catch(() => undefined);
      if (now) record.last = now;
      await sleep(100);
    }
  })();
  return {
    record,
    stop: async () => {
      watching = false;
      await Promise.all([logs, objects]);
      readLogs();
      return record;
    },
  };
}

async function readPod(sys: RealSystem, name: string): Promise<k8s.V1Pod> {
  return sys.core.readNamespacedPod({ namespace: SHARES_NAMESPACE, name }, withDeadline(5_000));
}

test('shares start on real nodes (two with skewed agents) and serve', { timeout: 240_000 }, async (t) => {
  const sys = system();
  const t0 = performance.now();
  for (const share of SHARES) trackers.set(share, new GaneshaTracker(sys, share, 200));
  // Together: `moved` needs no policy; each skewed share is created once its policy applies.
  const createdS = new Map<string, number>();
  const created = (share: string) => createdS.set(share, (performance.now() - t0) / 1000);
  await Promise.all([
    createRealNfsShare(sys, MOVED, { nfs: E2E_NFS }).then(() => created(MOVED)),
    ...Object.entries(SKEWED).map(async ([share, offset]) => {
      await skewAgentsOf(sys.cluster, share, offset);
      await createRealNfsShare(sys, share, { nfs: E2E_NFS });
      created(share);
    }),
  ]);
  const served = await Promise.all(
    SHARES.map(async (share) => [share, (await servingPod(sys, share)).servingWall] as const),
  );
  const startWall = Date.now() - (performance.now() - t0);
  const line = `shares start: ${served.map(([s, wall]) => `${s} created ${createdS.get(s)?.toFixed(1)} s, serving ${((wall - startWall) / 1000).toFixed(1)} s`).join('; ')} since the test began (a skewed share once its policy applied)`;
  process.stderr.write(`${line}\n`);
  t.diagnostic(line);
  for (const share of Object.keys(SKEWED)) {
    const serving = await servingPod(sys, share, undefined, 5_000);
    const agent = serving.object.spec?.initContainers?.[0];
    assert.ok(
      agent?.env?.some((e) => e.name === 'LD_PRELOAD' && e.value === LIBFAKETIME),
      `${share}: the agent runs under libfaketime`,
    );
    skewWindow.servers.set(share, serving.pod);
  }
  // From when the later of the two skewed shares served (the pod start's own time, not this test's end).
  const skewedServedWall = Math.max(...served.filter(([s]) => s in SKEWED).map(([, wall]) => wall));
  skewWindow.startedAt = performance.now() - Math.max(0, Date.now() - skewedServedWall);
});

test('agent sidecar killed on a real kubelet: no failover, no delinquent mark, the share served again (the server outlives a missing lease proof by 2 s only), the NFS client loses nothing', {
  timeout: 240_000,
}, async (t) => {
  const sys = system();
  const before = await servingPod(sys, MOVED, undefined, 10_000);
  const other = sys.nodes.find((n) => n.name !== before.node);
  assert.ok(other, 'a second node');
  const client = await RealNfsClient.start(sys, MOVED, other.name, { file: 'agent-kill.bin' });
  let kept: ReturnType<typeof keepPodRecord> | undefined;
  let kernel: RealKernelClient | undefined;
  try {
    kernel = await RealKernelClient.start(sys, MOVED, other.name, { name: 'kc-agentkill', index: 1 });
    await client.waitResumed(60_000);
    const pod0 = await readPod(sys, before.pod);
    const uid = pod0.metadata?.uid ?? '';
    const agent0 = agentStatus(pod0);
    const cid = agent0?.containerID?.replace(/^containerd:\/\//, '') ?? '';
    assert.ok(uid && cid, `${before.pod}: its uid and its agent's container id`);
    const pids = containerPids(uid, cid);
    assert.ok(pids.length > 0, `the agent container's processes under ${before.node}'s pod cgroup`);
    kept = keepPodRecord(sys, pod0);
    const killedAt = Date.now();
    client.markFault();
    kernel.markFault();
    for (const pid of pids) process.kill(pid, 'SIGKILL');
    await sleep(D_MS + 2_000); // past D since the kill, a 2 s margin
    const { agentLog, serverLog, last: pod1 } = await kept.stop();
    const after = await servingPod(sys, MOVED);
    const servedMono = monotonicMs() - (Date.now() - after.servingWall);
    await client.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
    await kernel.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
    // Where the time after the kill went, printed before the verdicts.
    const agent1 = agentStatus(pod1);
    const since = (ms: number | undefined) =>
      ms === undefined || Number.isNaN(ms) ? 'never' : `${((ms - killedAt) / 1000).toFixed(2)} s`;
    const restartedAt = Date.parse(
      String(agent1?.state?.running?.startedAt ?? agent1?.state?.terminated?.startedAt ?? ''),
    );
    const started = entriesOf(agentLog, 'agent started').find((e) => e.ms >= killedAt);
    const reacquired = entriesOf(agentLog, 'lease acquired').find((e) => e.ms >= killedAt);
    const stoppedBy = serverLog.includes('E_NFS_LEASE_LAPSED')
      ? 'its own watch (the lease proof lapsed)'
      : serverLog.includes('stop requested: forwarding SIGTERM to ganesha')
        ? "a SIGTERM (the kubelet's liveness backstop)"
        : 'nothing it logged';
    const windows = assertNeverTwo(MOVED, 'agent kill');
    const mine = windows.filter((w) => w.id === before.pod);
    const [acquired] = acquisitions(sys, after.object);
    const line = `agent kill: ${before.pod}'s agent (${pids.length} process) SIGKILLed; ${(agent1?.restartCount ?? 0) > (agent0?.restartCount ?? 0) ? `the kubelet restarted it (container start ${since(restartedAt)} in whole seconds, its log's start ${since(started?.ms)}, lease re-acquired ${reacquired ? `(${reacquired.how}) ${since(reacquired.ms)}` : 'never'})` : 'the kubelet did not restart it before the pod ended'}; ${before.pod}'s ganesha ${mine.some((w) => w.stopMonoMs !== undefined) ? `stopped by ${stoppedBy}` : 'runs on'}: ${mine.map(fmt).join(', ')}, the pod ${pod1.status?.phase}; ${after.pod === before.pod ? 'the same pod serves' : `${after.pod} on ${after.node} serves (lease ${acquired?.how ?? '?'}) ${since(after.servingWall)} after the kill`}`;
    process.stderr.write(`${line}\n`);
    t.diagnostic(line);
    const lease = await leaseOf(sys, MOVED);
    assert.equal(lease.spec?.holderIdentity, after.pod, 'the serving pod holds the lease');
    assert.equal(lease.metadata?.annotations?.[DELINQUENT], undefined, 'never marked delinquent');
    assert.equal((await shareStatus(sys, MOVED)).lastFailover, undefined, 'no failover');
    // The old pod's ganesha ran once; a replacement's started after it stopped (above: never two).
    assert.equal(mine.length, 1, `one ganesha of ${before.pod}: ${windows.map(fmt)}`);
    const [gapS] = client.assertClientView(`${MOVED} agent kill`);
    const kernelS = kernel.assertClientView(`${MOVED} agent kill`, servedMono);
    t.diagnostic(
      `agent kill: clientWriteGap ${gapS?.toFixed(2)} s; ${kernel.label}: first write ${kernelS.toFixed(2)} s after the kill`,
    );
  } finally {
    await kept?.stop();
    await client.stop();
    await kernel?.stop();
  }
});

test('drain (cordon + eviction) on real nodes: the agent releases, the new pod on the other node acquires the free lease at once, no failover', {
  timeout: 150_000,
}, async (t) => {
  const sys = system();
  const before = await servingPod(sys, MOVED, undefined, 10_000);
  const pod0 = await readPod(sys, before.pod);
  const other = sys.nodes.find((n) => n.name !== before.node);
  assert.ok(other, 'a second node');
  // On the node the share moves onto: its traffic goes from the old pod's node to its own.
  const kernel = await RealKernelClient.start(sys, MOVED, other.name, { name: 'kc-drain', index: 2 });
  await setUnschedulable(sys, before.node, true);
  const kept = keepPodRecord(sys, pod0);
  try {
    kernel.markFault();
    const evictedAt = Date.now();
    await sys.core.createNamespacedPodEviction(
      {
        name: before.pod,
        namespace: SHARES_NAMESPACE,
        body: {
          apiVersion: 'policy/v1',
          kind: 'Eviction',
          metadata: { name: before.pod, namespace: SHARES_NAMESPACE },
        },
      },
      withDeadline(5_000),
    );
    const next = await servingPod(sys, MOVED, before.pod);
    // The old agent's last line may reach its log file after the new pod serves (a CI run
    // read the log without it): keep reading it up to 10 s for the release or the fence.
    const ended = (log: string) =>
      entriesOf(log, 'lease released').length > 0 || log.includes('"fenced: readiness dropped');
    for (let i = 0; i < 100 && !ended(kept.record.agentLog); i++) await sleep(100);
    const oldAgentLog = (await kept.stop()).agentLog;
    const tookS = (next.servingWall - evictedAt) / 1000;
    assert.notEqual(next.node, before.node, 'the new pod avoids the cordoned node');
    // The agent releases on its SIGTERM. NB: the kubelet stops a pod's main containers
    // before its sidecars, so a loaded kubelet may leave the agent time to see its server
    // gone (its server check) and fence first: then it exits without releasing, the pod
    // ends, and the manager frees the ended holder's lease. Either way no failover and a
    // free lease for the new pod (asserted below). What the agent did is printed.
    const released = entriesOf(oldAgentLog, 'lease released').length;
    const fencedOnCheck = oldAgentLog
      .split('\n')
      .some((l) => l.includes('"fenced: readiness dropped') && l.includes('server-check-failed'));
    const lastMsgs = oldAgentLog
      .split('\n')
      .filter((l) => l.includes('"msg"'))
      .slice(-6)
      .map((l) => /"msg":"([^"]*)"/.exec(l)?.[1] ?? l.slice(0, 80));
    // NB: a third ending, seen in 2 of 3 whole-file runs on 2026-12-04 (never when the file
    // ran only its first three tests): the old agent's log ends at its start lines, neither
    // SIGTERM nor release nor fence logged within 10 s of the new pod serving. Its lease was
    // free all the same (asserted next: acquired `free`, no failover, no delinquent mark),
    // so the ended holder's lease was freed by the manager; which of the agent's paths ran
    // is then not known, and is printed, not asserted. Not yet explained.
    assert.ok(released <= 1, `${before.pod}'s agent released the lease at most once (${released})`);
    t.diagnostic(
      `drain: ${before.pod}'s agent ${released === 1 ? 'released the lease' : fencedOnCheck ? 'fenced on its server check' : `logged neither a release nor a fence; its last lines: ${JSON.stringify(lastMsgs)}`}`,
    );
    const [acquired] = acquisitions(sys, next.object);
    assert.equal(acquired?.how, 'free', `${next.pod} acquired the released lease (no lease-duration wait)`);
    const lease = await leaseOf(sys, MOVED);
    assert.equal(lease.spec?.holderIdentity, next.pod);
    assert.equal(lease.metadata?.annotations?.[DELINQUENT], undefined, 'never marked delinquent');
    assert.equal((await shareStatus(sys, MOVED)).lastFailover, undefined, 'no failover');
    const windows = assertNeverTwo(MOVED, 'drain');
    const old = windows.find((w) => w.id === before.pod);
    const fresh = windows.find((w) => w.id === next.pod);
    assert.ok(
      old?.stopMonoMs !== undefined && fresh,
      `the old ganesha stopped, a new one runs: ${windows.map(fmt)}`,
    );
    assert.ok(tookS < 60, `eviction to serving ${tookS.toFixed(2)} s < 60 s`);
    const releasedMs = entriesOf(oldAgentLog, 'lease released')[0]?.ms;
    const since = (ms: number | undefined) =>
      ms === undefined ? '?' : `${((ms - evictedAt) / 1000).toFixed(2)} s`;
    const servedMono = monotonicMs() - (Date.now() - next.servingWall);
    await kernel.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
    const kernelS = kernel.assertClientView(`${MOVED} drain`, servedMono);
    const line = `drain: eviction -> old lease released ${since(releasedMs)}, new pod's lease acquired (free) ${since(acquired?.ms)}, serving on ${next.node} ${tookS.toFixed(2)} s; the old ganesha gone ${((fresh.startMonoMs - old.stopMonoMs) / 1000).toFixed(2)} s before the new one started; ${kernel.label}'s first write ${kernelS.toFixed(2)} s after the eviction`;
    process.stderr.write(`${line}\n`);
    t.diagnostic(line);
  } finally {
    await kernel.stop();
    await kept.stop();
    await setUnschedulable(sys, before.node, false);
  }
});

// NB: after the agent-kill and drain scenarios, which run during the skew window.
test('clock skew on real nodes: agents 10 min ahead and behind renew without a false failover', {
  timeout: 60_000,
}, async () => {
  const sys = system();
  assert.ok(skewWindow.startedAt > 0, 'the skewed shares served (first test)');
  await sleep(Math.max(0, SKEW_WINDOW_MS - (performance.now() - skewWindow.startedAt)));
  for (const [share, offsetMin] of [
    ['skew-ahead', 10],
    ['skew-behind', -10],
  ] as const) {
    const lease = await leaseOf(sys, share);
    const skewMs = new Date(lease.spec?.renewTime as unknown as string).getTime() - Date.now();
    assert.ok(
      Math.abs(skewMs - offsetMin * 60_000) < 30_000,
      `${share}: renewTime is ${(skewMs / 60_000).toFixed(1)} min off real time (the agent's clock)`,
    );
    assert.equal(lease.spec?.holderIdentity, skewWindow.servers.get(share), `${share}: same holder`);
    const serving = await servingPod(sys, share, undefined, 5_000);
    assert.equal(serving.pod, skewWindow.servers.get(share), `${share}: same pod serves`);
    assert.equal((await shareStatus(sys, share)).lastFailover, undefined, `${share}: no failover`);
    assert.equal(ganeshaOf(share).length, 1, `${share}: one ganesha throughout`);
  }
  assert.deepEqual(await eventsOf(sys, 'LeaseExpired'), [], 'no LeaseExpired event');
});

const OUTAGE_MS = 12_000;

test('API server down for 12 s with real nodes: no failover of a running server, none on a verdict within D of the API returning, every share served again, never two ganesha, the kernel client loses nothing', {
  timeout: 240_000,
}, async (t) => {
  const sys = system();
  const before = new Map<string, string>();
  for (const share of SHARES) before.set(share, (await servingPod(sys, share, undefined, 10_000)).pod);
  const movedNode = (await servingPod(sys, MOVED, undefined, 10_000)).node;
  const clientNode = sys.nodes.find((n) => n.name !== movedNode)?.name ?? movedNode;
  const kernel = await RealKernelClient.start(sys, MOVED, clientNode, { name: 'kc-apiout', index: 3 });
  t.after(() => kernel.stop());
  kernel.markFault();
  const downAt = performance.now();
  await sys.cluster.stopApiServer();
  await sleep(Math.max(0, OUTAGE_MS - (performance.now() - downAt)));
  await sys.cluster.startApiServer();
  const backAt = performance.now();
  process.stderr.write(
    `API outage (real nodes): the API server ready again ${((backAt - downAt) / 1000).toFixed(1)} s after its stop began\n`,
  );
  const back: string[] = [];
  for (const share of SHARES) {
    await servingPod(sys, share);
    back.push(`${share} ${((performance.now() - backAt) / 1000).toFixed(1)} s`);
  }
  process.stderr.write(`API outage (real nodes): served again after the API returned: ${back.join(', ')}\n`);
  const movedServed = await servingPod(sys, MOVED);
  const servedMono = monotonicMs() - (Date.now() - movedServed.servingWall);
  await kernel.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
  const kernelS = kernel.assertClientView(`${MOVED} API outage`, servedMono);
  process.stderr.write(
    `API outage (real nodes): ${kernel.label} on ${clientNode}: first write ${kernelS.toFixed(2)} s after the API server's stop began\n`,
  );
  await kernel.stop();
  await sleep(8_000); // past D after the managers see the API again
  const after = new Map<string, string>();
  for (const share of SHARES) after.set(share, (await servingPod(sys, share, undefined, 30_000)).pod);
  process.stderr.write(
    `API outage (real nodes): ${SHARES.map((s) => `${s} ${before.get(s) === after.get(s) ? 'same pod' : `new pod ${after.get(s)}`}`).join(', ')}\n`,
  );
  // NB: the agents fence after T (4 s) without the API, as they must; their servers stop and
  // their pods end. Then either path is right: the manager frees the ended holder's lease
  // (no failover), or, when the kubelet's report of the ended pod reaches the API later
  // than D of the managers' healthy watch (its status retries run every 10 s), it judges
  // the unrenewed lease stale and fails over a pod already stopped. What must not happen:
  // a verdict from observations older than the outage (before D of healthy watch), or a
  // failover of a share whose old server still ran when the API came back.
  const backWall = Date.now() - (performance.now() - backAt);
  const failovers = await failedOver(sys);
  for (const [share, status] of failovers) {
    const lf = status.lastFailover;
    assert.ok(lf, `${share}: a failover record`);
    const detectedWall = Date.parse(lf.detectedAt ?? '');
    assert.ok(
      detectedWall >= backWall + D_MS - 1_000, // 1 s: the API may take connections before its readiness answers
      `${share}: failed over on a verdict ${detectedWall - backWall} ms after the API returned (the blindness rule: at least D = ${D_MS} ms)`,
    );
    const old = ganeshaOf(share).filter((w) => w.id === lf.lostPod);
    assert.ok(old.length > 0, `${share}: the failed-over pod ${lf.lostPod} ran ganesha before the outage`);
    for (const w of old)
      assert.ok(
        w.stopMonoMs !== undefined && w.stopMonoMs <= monotonicMs() - (performance.now() - backAt),
        `${share}: the failed-over pod's ganesha ${fmt(w)} had stopped before the API returned (its agent fenced)`,
      );
  }
  process.stderr.write(
    `API outage (real nodes): ${failovers.size} of ${SHARES.length} shares failed over after the API returned (of pods already fenced), the others' ended holders freed\n`,
  );
  const expired = await eventsOf(sys, 'LeaseExpired');
  assert.ok(
    expired.length <= failovers.size,
    `a LeaseExpired event only for a failover: ${expired.join('; ')}`,
  );
  for (const share of SHARES) {
    const lease = await leaseOf(sys, share);
    if (!failovers.has(share))
      assert.equal(lease.metadata?.annotations?.[DELINQUENT], undefined, `${share}: never marked delinquent`);
    const windows = assertNeverTwo(share, 'API outage');
    process.stderr.write(`${share}: ganesha windows ${windows.map(fmt).join(', ')}\n`);
  }
});

// ---- One frozen share manager among many on a healthy real node (last: it leaves extra shares) ----

/** Shares of the record server on the frozen pod's node: bystanders that must keep their pods. */
const BYSTANDERS = Array.from({ length: 5 }, (_, i) => `many-${String(i + 1).padStart(2, '0')}`);

test('one frozen share manager among many on a healthy real node (its pod cgroup frozen): only it fails over, the NFS client loses nothing', {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  const before = await servingPod(sys, MOVED, undefined, 30_000);
  const other = sys.nodes.find((n) => n.name !== before.node);
  assert.ok(other, 'a second node');
  const startedAt = performance.now();
  await Promise.all(BYSTANDERS.map((share) => createRealRecordShare(sys, share, { node: before.node })));
  await Promise.all(BYSTANDERS.map((share) => servingRealPod(sys, share)));
  const startS = (performance.now() - startedAt) / 1000;
  const all = [...SHARES, ...BYSTANDERS];
  const pods = new Map<string, ReadyRealPod>();
  for (const share of all) {
    // Waited for, not read once: a CI run found skew-ahead's pod, serving 6 s before, not
    // Ready at that instant (between readiness probes after the API outage). The claim
    // is about the freeze; a share not Ready within 30 s still fails here.
    const waitedFrom = performance.now();
    const ready = await eventually(
      `${share}: a Ready pod before the freeze`,
      () => readyRealPod(sys, share),
      30_000,
      200,
    );
    const waitedS = (performance.now() - waitedFrom) / 1000;
    if (waitedS > 1)
      process.stderr.write(
        `many shares: ${share}'s pod ${ready.pod} Ready only after ${waitedS.toFixed(1)} s\n`,
      );
    pods.set(share, ready);
  }
  assert.equal(
    pods.get(MOVED)?.pod,
    before.pod,
    `${MOVED}: the same pod serves after the bystanders started`,
  );
  const onNode = all.filter((s) => pods.get(s)?.node === before.node);
  const line0 = `many shares: ${BYSTANDERS.length} record-server shares created on ${before.node} and serving in ${startS.toFixed(1)} s; ${onNode.length} share-manager pods on ${before.node} (${onNode.join(', ')})`;
  process.stderr.write(`${line0}\n`);
  t.diagnostic(line0);
  // The claim is about the freeze: a failover before it (agents starved past D while the
  // bystanders start on 2 cores: the protocol then fails them over, as it must) is named
  // and left out of the count below.
  const earlier = await failedOver(sys);
  for (const [share, st] of earlier)
    t.diagnostic(`failed over before the freeze: ${share} ${JSON.stringify(st.lastFailover)}`);
  const expiredEarlier = (await eventsOf(sys, 'LeaseExpired')).length;
  const holders = new Map<string, string | undefined>();
  for (const share of all) holders.set(share, (await leaseOf(sys, share)).spec?.holderIdentity);

  const client = await RealNfsClient.start(sys, MOVED, other.name, { file: 'many-freeze.bin' });
  const uid = before.object.metadata?.uid ?? '';
  let cgroup: string | undefined;
  let pids: number[] = [];
  let kernel: RealKernelClient | undefined;
  try {
    kernel = await RealKernelClient.start(sys, MOVED, other.name, { name: 'kc-freeze', index: 4 });
    await client.waitResumed(60_000);
    pids = podProcesses(uid);
    cgroup = podFreezerCgroup(uid, pids);
    assert.ok(cgroup, `${before.pod}: its pod cgroup in the freezer hierarchy (${pids.length} processes)`);
    const frozenAt = Date.now();
    client.markFault();
    kernel.markFault();
    freezeCgroup(cgroup);
    pids = podProcesses(uid); // frozen now: none forks or exits until the thaw
    // The failover of the frozen pod: stale verdict, delinquent mark, force delete.
    const failover = await eventually(
      `${MOVED}: lastFailover of the frozen ${before.pod}`,
      async () => {
        const lf = (await shareStatus(sys, MOVED)).lastFailover;
        return lf?.lostPod === before.pod && lf.podDeletedAt ? lf : undefined;
      },
      60_000,
      200,
    );
    assert.equal(
      await readPod(sys, before.pod).then(
        () => 'present',
        (e: { code?: number }) => (e.code === 404 ? 'gone' : `error ${e.code}`),
      ),
      'gone',
      `${before.pod} force-deleted`,
    );
    // NB: a frozen task ignores SIGKILL until thawed: the healthy node's kubelet cannot end
    // the force-deleted pod, so it never unmounts and keeps the volume in its
    // status.volumesInUse, and the attach-detach controller never detaches from a Ready
    // node. The manager's unmount check (LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT after the
    // force-delete: 10 s here, 30 s by default) releases the entry: the volume moves while the pod stays frozen,
    // its node's view revoked by the fencing storage. Before that check, the first run
    // saw no replacement serve within 120 s. Frozen to the end of the move.
    const next = await servingPod(sys, MOVED, before.pod);
    assert.equal(
      freezerState(cgroup),
      'FROZEN',
      `${before.pod}'s processes still frozen when ${next.pod} served`,
    );
    const pending = (pid: number) =>
      signalPending(pid, SIGTERM) === true || signalPending(pid, SIGKILL) === true;
    const pendingOn = pids.filter(pending).length;
    // Released by the handoff step at once (no heartbeat of the node seen after the
    // holder's renew deadline: no evidence its kubelet lives), or left to the live
    // kubelet and released by the unmount check: either way the entry was removed.
    const handoff = (await shareStatus(sys, MOVED)).lastFailover?.volumeHandoff ?? '';
    assert.match(
      handoff,
      new RegExp(`removed \\S+ \\(PV \\S+\\) from node ${before.node} status\\.volumesInUse`),
      `${MOVED}: the volume released from ${before.node} (volumeHandoff: ${handoff})`,
    );
    const byCheck = handoff.includes('after the force-delete');
    const windowsFrozen = assertNeverTwo(MOVED, 'frozen pod, before the thaw');
    // The kernel client while the old pod stays frozen on its live node: that node's
    // kernel still acknowledges the client's segments into the frozen ganesha's socket,
    // and a v4 client never retransmits an RPC on a connection TCP calls alive. Given
    // 10 s past the replacement's serving; what it did is printed (docs/testing.md).
    const servedMono = monotonicMs() - (Date.now() - next.servingWall);
    const frozenWait = performance.now();
    while (!kernel.resumedSince(servedMono) && performance.now() - frozenWait < 10_000) await sleep(250);
    const whileFrozen = kernel.firstWriteAfterMs(servedMono);
    const kernelWhileFrozen =
      whileFrozen === undefined
        ? `no write within ${((monotonicMs() - servedMono) / 1000).toFixed(1)} s of the replacement serving while ${before.pod} stayed frozen`
        : `writing again ${((whileFrozen - servedMono) / 1000).toFixed(2)} s after the replacement served, ${before.pod} still frozen`;
    // Then the machine's operator ends the hung pod: SIGKILLed, then thawed, so none of
    // its processes runs again (SIGKILL is taken on the way out of the freezer).
    for (const pid of pids)
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    thawNode(cgroup);
    const thawedAt = Date.now();
    await client.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
    await kernel.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
    assert.notEqual(next.node, before.node, 'the replacement avoids the lost pod node');
    assert.ok(
      windowsFrozen.some((w) => w.id === next.pod),
      `${next.pod}'s ganesha seen while ${before.pod} was frozen: ${windowsFrozen.map(fmt)}`,
    );
    assert.equal((await leaseOf(sys, MOVED)).spec?.holderIdentity, next.pod, `${next.pod} holds the lease`);
    const movedNow = [...(await failedOver(sys))].filter(
      ([s, st]) => earlier.get(s)?.lastFailover?.detectedAt !== st.lastFailover?.detectedAt,
    );
    // NB: another share may fail over only if its own agent lost its lease first: its old
    // ganesha stopped (its fence: renewals later than T) before the verdict, so nothing
    // was blamed on the node. A CI run at load ~18 saw skew-behind (a libfaketime agent on
    // the crowded node) go so, after the freeze. Bystanders (record servers) have no
    // ganesha to show it: any failover of theirs fails here.
    const others = movedNow.filter(([s]) => s !== MOVED);
    for (const [share, st] of others) {
      const lf = st.lastFailover ?? {};
      const oldW = (trackers.get(share)?.windows() ?? []).filter((w) => w.id === lf.lostPod);
      const stoppedBy = Math.max(
        ...oldW.map((w) => (w.stopWall ? Date.parse(w.stopWall) : Number.POSITIVE_INFINITY)),
      );
      assert.ok(
        oldW.length > 0 && stoppedBy <= Date.parse(lf.detectedAt ?? ''),
        `${share} failed over too (${JSON.stringify(lf)}): only allowed when its old ganesha had stopped before the verdict (its agent fenced itself): ${oldW.map(fmt)}`,
      );
      t.diagnostic(
        `${share} also failed over, its agent having fenced itself first: ${oldW.map(fmt)}; verdict ${lf.detectedAt}`,
      );
    }
    assert.deepEqual(
      movedNow.map(([s]) => s).filter((s) => s === MOVED),
      [MOVED],
      'the frozen share failed over',
    );
    for (const share of all) {
      if (share === MOVED || others.some(([s]) => s === share)) continue;
      // NB: its pods, Ready or not: a CI run at load 18 caught skew-ahead's pod between
      // two readiness probes (a renewal later than T under that load); the pod and its
      // lease holder are what a failover would change.
      const sharePodsNow = await sharePods(sys, share);
      const live = sharePodsNow
        .filter(
          (p) => !p.metadata?.deletionTimestamp && !['Succeeded', 'Failed'].includes(p.status?.phase ?? ''),
        )
        .map((p) => p.metadata?.name);
      // A pod that ended on its own is no failover: its agent fenced itself (renewals later
      // than T on the crowded, loaded node; a CI run of 2026-12-07 saw many-05's so) and the
      // reconciler replaces it. What this scenario claims is that no manager blamed another
      // share on the frozen pod's node: no lastFailover for it (asserted above: a bystander
      // has no ganesha windows to excuse one) and no delinquent mark (here).
      const original = pods.get(share)?.pod;
      const own = sharePodsNow.find((p) => p.metadata?.name === original);
      const endedOnItsOwn =
        !live.includes(original) &&
        (own === undefined ||
          own.metadata?.deletionTimestamp !== undefined ||
          ['Succeeded', 'Failed'].includes(own.status?.phase ?? ''));
      if (endedOnItsOwn) {
        assert.equal(
          (await leaseOf(sys, share)).metadata?.annotations?.[DELINQUENT],
          undefined,
          `${share}: its pod ended on its own, never marked delinquent`,
        );
        t.diagnostic(
          `${share}: its pod ${original} ended on its own (${own?.status?.phase ?? 'gone'}: its agent fenced itself, no failover, no mark); now ${live.join(', ') || 'no live pod yet'}`,
        );
        continue;
      }
      assert.deepEqual(live, [original], `${share} kept its pod`);
      assert.equal(
        (await leaseOf(sys, share)).spec?.holderIdentity,
        holders.get(share),
        `${share}: same holder`,
      );
    }
    const expired = await eventsOf(sys, 'LeaseExpired');
    assert.equal(
      expired.length - expiredEarlier,
      1 + others.length,
      `one new LeaseExpired event per failover: ${expired.join(' | ')}`,
    );
    assert.deepEqual(await eventsOf(sys, 'StormGuardActive'), [], 'the storm guard stayed quiet');
    assertNeverTwo(MOVED, 'frozen pod');
    const [gapS] = client.assertClientView(`${MOVED} pod frozen among many`);
    const kernelS = kernel.assertClientView(`${MOVED} pod frozen among many`, servedMono);
    const since = (ms: number | undefined) =>
      ms === undefined ? '?' : `${((ms - frozenAt) / 1000).toFixed(2)} s`;
    const line = `many shares: ${before.pod}'s pod cgroup frozen on ${before.node} (${pids.length} processes): lease stale ${since(Date.parse(failover.detectedAt ?? ''))}, ${next.pod} serving on ${next.node} ${since(next.servingWall)}, clientWriteGap ${gapS?.toFixed(2)} s, ${kernel.label}'s first write ${kernelS.toFixed(2)} s (${kernelWhileFrozen}); force-deleted ${since(Date.parse(failover.podDeletedAt ?? ''))}, the kubelet's stop signal pending on ${pendingOn} of ${pids.length} when it served, released ${byCheck ? 'by the unmount check' : 'by the handoff at once'}, thawed ${since(thawedAt)}; ${all.length - 1} others kept their pods`;
    process.stderr.write(`${line}\n`);
    t.diagnostic(line);
  } finally {
    await client.stop();
    await kernel?.stop();
    // Also when a check failed while frozen: killed first, then thawed (see above).
    for (const pid of pids)
      try {
        process.kill(pid, 'SIGKILL');
      } catch {}
    if (cgroup) thawNode(cgroup);
  }
  await waitPodProcessesGone(before, 60_000);
});
