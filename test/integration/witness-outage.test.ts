/**
 * Witness promises end to end with real processes (docs/design.md, "Serving through an API
 * outage"): three managers (dist/manager/main.js) as witnesses, each reaching the real
 * kube-apiserver through its own TCP proxy, and agents (dist/agent/main.js) given them in
 * LEASEHOLD_WITNESSES. Default timings (D 6 s, R 2 s, T 4 s; P = T). An outage for everyone
 * and a node cut off alone run on real nodes with the kernel client
 * (test/e2e/real-node-witnesses.test.ts); here, what real nodes cannot stage cheaply.
 * The managers do not
 * fail over here (LEASEHOLD_FAST_FAILOVER=false): the test writes the delinquent mark a
 * manager would write, so what is tested is the witness protocol, not detection.
 *
 * - A holder cut off together with two of three witnesses: it serves on their promises; its
 *   replacement waits (its clearances: one of three) until those witnesses reach the API
 *   again, the holder has fenced, and their promises ran out; it serves only after that.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { TcpProxy } from '../../dev/net/tcp-proxy.ts';
import { ANNOTATION_DELINQUENT, ANNOTATION_FAILOVER_BY, toWire } from '../../lib/lease-record.ts';
import { useCluster } from '../support/cluster.ts';
import {
  type AgentProcess,
  agentEnv,
  cleanup,
  leaseApi,
  probe,
  proxiedApi,
  readLease,
  spawnAgent,
  until,
} from './agent-harness.ts';
import { applyCrd, type ManagerProcess, startManager, stopAllManagers } from './manager-harness.ts';

const cluster = useCluster({ scheduler: false, controllerManager: false });
after(cleanup);
after(stopAllManagers);

const FENCED = 'fenced: readiness dropped, fence action done, exiting';

interface Witness {
  name: string;
  manager: ManagerProcess;
  proxy: TcpProxy;
  port: number;
}

const witnesses: Witness[] = [];
const witnessEnv = () => witnesses.map((w) => `${w.name}=http://127.0.0.1:${w.port}`).join(',');

async function agentPort(agent: AgentProcess): Promise<number> {
  const started = await agent.waitForLog('agent started');
  return Number(started.httpPort);
}

/** Writes the delinquent mark a manager writes on a stale verdict (CAS on the version read). */
async function markDelinquent(lease: string): Promise<void> {
  const api = leaseApi(cluster());
  const record = await readLease(api, lease);
  assert.ok(record, `lease ${lease} exists`);
  const wire = toWire(record);
  wire.metadata = {
    ...wire.metadata,
    annotations: {
      ...(wire.metadata?.annotations ?? {}),
      [ANNOTATION_DELINQUENT]: new Date().toISOString(),
      [ANNOTATION_FAILOVER_BY]: 'the-test',
    },
  };
  await api.replaceNamespacedLease({ namespace: 'default', name: lease, body: wire });
}

/** Marks the lease delinquent, starts its replacement, and waits until it asks for clearances. */
async function replacementAfterMark(
  lease: string,
  pod: string,
): Promise<{ agent: AgentProcess; port: number }> {
  await markDelinquent(lease);
  const agent = spawnAgent({
    ...agentEnv(lease, pod, { LEASEHOLD_WITNESSES: witnessEnv() }),
    KUBECONFIG: cluster().kubeconfigPath,
  });
  const port = await agentPort(agent);
  await agent.waitForLog(
    "waiting for clearances from a majority of the previous holder's witnesses before serving",
  );
  return { agent, port };
}

describe('witness promises', () => {
  before(
    async () => {
      await applyCrd(cluster());
      for (const name of ['wit-a', 'wit-b', 'wit-c']) {
        const { proxy, kubeconfigPath } = await proxiedApi(cluster());
        const manager = startManager(cluster(), name, {
          KUBECONFIG: kubeconfigPath,
          LEASEHOLD_FAST_FAILOVER: 'false',
          LEASEHOLD_NODE_NAME: name,
        });
        const started = await until(
          `${name} started`,
          async () => (await manager.lines()).find((l) => l.msg === 'manager started'),
          30_000,
        );
        witnesses.push({ name, manager, proxy, port: Number(started.port) });
      }
    },
    { timeout: 120_000 },
  );

  it('a holder cut off with two of three witnesses serves on their promises; its replacement serves only after it fenced', async () => {
    const { proxy, kubeconfigPath } = await proxiedApi(cluster());
    const old = spawnAgent({
      ...agentEnv('wit-minority', 'pod-min', { LEASEHOLD_WITNESSES: witnessEnv() }),
      KUBECONFIG: kubeconfigPath,
    });
    const oldPort = await agentPort(old);
    await old.waitForLog('lease acquired');
    await new Promise((r) => setTimeout(r, 2_500));
    const [a, b] = witnesses as [Witness, Witness, Witness];
    proxy.setMode('close');
    a.proxy.setMode('close');
    b.proxy.setMode('close');
    await old.waitForLog(
      'lease not renewed for T: serving on the promises of a majority of witnesses (the API server is unreachable for them too)',
      10_000,
    );

    const { agent: next, port: nextPort } = await replacementAfterMark('wit-minority', 'pod-min-2');
    // Two witnesses keep promising the cut-off holder: no majority clears the replacement.
    await new Promise((r) => setTimeout(r, 5_000));
    assert.equal(old.child.exitCode, null, 'the holder serves on promises');
    assert.equal((await probe(oldPort, '/readyz')).status, 200);
    assert.equal((await probe(nextPort, '/readyz')).status, 503, 'the replacement waits');

    // The two witnesses reach the API again: they see the new holder and stop promising.
    a.proxy.setMode('pass');
    b.proxy.setMode('pass');
    const fenced = await old.exited;
    assert.equal(fenced.code, 1);
    const cleared = await next.waitForLog('cleared by a majority of the witnesses: serving', 20_000);
    assert.ok(cleared.atMs > fenced.atMs, 'the replacement serves after the holder fenced');
    const gapMs = cleared.atMs - fenced.atMs;
    assert.ok(old.lines.some((l) => l.msg === FENCED));
    await until('the replacement ready', async () =>
      (await probe(nextPort, '/readyz')).status === 200 ? true : undefined,
    );
    process.stdout.write(`# replacement cleared ${Math.round(gapMs)} ms after the holder fenced\n`);
  });

  it('a bad request gets 400 naming the field and the rule; a body over 4 KiB 413', async () => {
    const url = `http://127.0.0.1:${(witnesses[0] as Witness).port}`;
    const post = async (path: string, body: string) => {
      const res = await fetch(`${url}${path}`, { method: 'POST', body, signal: AbortSignal.timeout(5_000) });
      return { status: res.status, text: await res.text() };
    };
    const noLease = await post(
      '/witness/promise',
      JSON.stringify({ holder: 'p', validForMs: 1000, marginMs: 0 }),
    );
    assert.equal(noLease.status, 400);
    assert.match(noLease.text, /lease=undefined must be \\"namespace\/name\\"/);
    const badP = await post(
      '/witness/promise',
      JSON.stringify({ lease: 'default/x', holder: 'p', validForMs: -1, marginMs: 0 }),
    );
    assert.equal(badP.status, 400);
    assert.match(badP.text, /validForMs=-1 must be a number of milliseconds above 0/);
    assert.equal((await post('/witness/clearance', '{not json')).status, 400);
    assert.equal((await post('/witness/clearance', JSON.stringify({ pad: 'x'.repeat(5000) }))).status, 413);
  });
});
