import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { ManualClock } from '../../lib/clock.ts';
import { LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import { createLogger } from '../../lib/logger.ts';
import { readReconnectorConfig } from '../../server/reconnector/config.ts';
import type { EndOutcome } from '../../server/reconnector/connection-ends.ts';
import { nfsPortOf, Reconnector, SCAN_OFFSETS_MS } from '../../server/reconnector/reconnector.ts';
import {
  type ConnectionToEnd,
  type ConntrackEntry,
  connectionsToEnd,
  NO_ROUTING,
  neighbourFromArp,
  observeListed,
  parseConntrackLine,
} from '../../server/reconnector/stale-connections.ts';

// Lines as `conntrack -L -p tcp` printed them on a real node (bench run of 2026-12-08).
const KERNEL_CLIENT =
  'tcp      6 299 ESTABLISHED src=10.202.1.2 dst=10.0.0.152 sport=42280 dport=2049 src=10.244.1.3 dst=10.201.0.3 sport=2049 dport=12319 [ASSURED] mark=0 use=1';
const NODE_MOUNT_SYN =
  'tcp      6 114 SYN_SENT src=10.201.0.3 dst=10.0.0.152 sport=811 dport=20048 [UNREPLIED] src=10.244.1.3 dst=10.201.0.3 sport=20048 dport=615 mark=0 use=1';

/** The entry KERNEL_CLIENT is, with `over` changed. */
const entry = (over: Partial<ConntrackEntry>): ConntrackEntry => ({
  state: 'ESTABLISHED',
  src: '10.202.1.2',
  sport: 42280,
  dst: '10.0.0.152',
  dport: 2049,
  replySrc: '10.244.1.3',
  replySport: 2049,
  ...over,
});

test('parseConntrackLine reads both directions of a TCP entry and nothing else', () => {
  assert.deepEqual(parseConntrackLine(KERNEL_CLIENT), entry({}));
  assert.equal(parseConntrackLine(NODE_MOUNT_SYN)?.state, 'SYN_SENT');
  assert.equal(parseConntrackLine(NODE_MOUNT_SYN)?.replySrc, '10.244.1.3');
  assert.equal(
    parseConntrackLine(
      'udp      17 29 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=53 src=10.0.0.2 dst=10.0.0.1 sport=53 dport=1',
    ),
    undefined,
  );
  assert.equal(
    parseConntrackLine('conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown.'),
    undefined,
  );
  assert.equal(
    parseConntrackLine('tcp 6 10 ESTABLISHED src=10.0.0.1 dst=10.0.0.2 sport=0 dport=2049'),
    undefined,
  );
  assert.equal(parseConntrackLine(''), undefined);
});

test('observeListed: only a change that drops an address while another is listed asks to end connections', () => {
  const first = observeListed(NO_ROUTING, ['10.244.1.3'], 0, 60_000);
  assert.equal(first.endStale, false, 'a first listing has nothing gone');
  const same = observeListed(first.routing, ['10.244.1.3'], 1_000, 60_000);
  assert.equal(same.endStale, false);
  const emptied = observeListed(same.routing, [], 2_000, 60_000);
  assert.equal(emptied.endStale, false, 'nobody listed: no one to reconnect to yet');
  assert.deepEqual([...emptied.routing.gone], [['10.244.1.3', 2_000]]);
  const replaced = observeListed(emptied.routing, ['10.244.2.7'], 3_000, 60_000);
  assert.equal(replaced.endStale, true);
  assert.deepEqual([...replaced.routing.gone.keys()], ['10.244.1.3']);
  // Both listed at once (the replacement got its address before the old pod was deleted), then the old one goes.
  const both = observeListed(first.routing, ['10.244.1.3', '10.244.2.7'], 1_000, 60_000);
  assert.equal(both.endStale, false);
  const oldGone = observeListed(both.routing, ['10.244.2.7'], 2_000, 60_000);
  assert.equal(oldGone.endStale, true);
  // Forgotten after rememberMs; an address listed again is no longer gone.
  assert.equal(observeListed(replaced.routing, ['10.244.2.7'], 62_001, 60_000).routing.gone.size, 0);
  const back = observeListed(replaced.routing, ['10.244.1.3'], 4_000, 60_000);
  assert.deepEqual([...back.routing.gone.keys()], ['10.244.2.7']);
  assert.equal(back.routing.gone.has('10.244.1.3'), false);
});

test('connectionsToEnd: the Service address, a Service port and a gone address, each ended the way its client can be', () => {
  const routing = observeListed(
    observeListed(NO_ROUTING, ['10.244.1.3'], 0, 60_000).routing,
    ['10.244.2.7'],
    1_000,
    60_000,
  ).routing;
  const service = { addresses: ['10.0.0.152'], ports: [2049, 20048] };
  const local = new Set(['10.201.0.3', '127.0.0.1']);
  const entries = [
    entry({}), // a pod's or VM's client behind this node: tickled
    entry({ src: '10.201.0.3', sport: 811, dport: 20048, state: 'SYN_SENT' }), // the node's own mount: its socket
    entry({ dst: '10.0.0.99' }), // another Service whose pod reuses the lost address: untouched
    entry({ dport: 8080 }), // another port of the same address: untouched
    entry({ replySrc: '10.244.2.7' }), // already on the replacement: untouched
    entry({ replySrc: '10.244.9.9' }), // never listed: untouched
    entry({ src: 'fd00::2' }), // IPv6: left alone (the tickle is IPv4 only)
  ];
  const ends = connectionsToEnd(entries, service, routing, local);
  assert.deepEqual(
    ends.map((e) => [e.entry.src, e.entry.dport, e.how]),
    [
      ['10.202.1.2', 2049, 'tickle'],
      ['10.201.0.3', 20048, 'destroy-socket'],
    ],
  );
  // The premise: with the lost address still listed, nothing is stale.
  const stillListed = observeListed(NO_ROUTING, ['10.244.1.3'], 0, 60_000).routing;
  assert.deepEqual(connectionsToEnd(entries, service, stillListed, local), []);
});

test('neighbourFromArp: a complete entry gives its device and address, an incomplete one nothing', () => {
  const arp = [
    'IP address       HW type     Flags       HW address            Mask     Device',
    '10.202.1.2       0x1         0x2         0a:e7:34:63:c0:b8     *        lhkc1',
    '10.244.1.9       0x1         0x0         00:00:00:00:00:00     *        cni0',
  ].join('\n');
  assert.deepEqual(neighbourFromArp(arp, '10.202.1.2'), { device: 'lhkc1', mac: '0a:e7:34:63:c0:b8' });
  assert.equal(neighbourFromArp(arp, '10.244.1.9'), undefined);
  assert.equal(neighbourFromArp(arp, '10.202.1.3'), undefined);
});

const slice = (
  addresses: string[],
  ports: Array<{ name?: string; port: number }> = [{ name: 'nfs', port: 2049 }],
): V1EndpointSlice => ({
  addressType: 'IPv4',
  metadata: { name: 'vol-leasehold', namespace: 'ns', labels: { [LABEL_SHARE_MANAGER]: 'vol' } },
  endpoints: addresses.map((a) => ({ addresses: [a] })),
  ports,
});

test('nfsPortOf: the port named nfs, else 2049, else the first', () => {
  assert.equal(
    nfsPortOf(
      slice(
        [],
        [
          { name: 'mount', port: 20048 },
          { name: 'nfs', port: 3049 },
        ],
      ),
    ),
    3049,
  );
  assert.equal(nfsPortOf(slice([], [{ name: 'mount', port: 20048 }, { port: 2049 }])), 2049);
  assert.equal(nfsPortOf(slice([], [{ name: 'web', port: 8080 }])), 8080);
  assert.equal(nfsPortOf(slice([], [])), undefined);
});

function harness(opts: { servesAfter: number; entries: ConntrackEntry[] }) {
  const clock = new ManualClock();
  const probes: string[] = [];
  const ended: Array<{ at: number; c: ConnectionToEnd }> = [];
  const scans: number[] = [];
  let table = [...opts.entries];
  const reconnector = new Reconnector(
    {
      clock,
      sleep: async (ms) => {
        clock.advance(ms);
        await new Promise((r) => setImmediate(r));
      },
      log: createLogger('reconnector-test', 'silent'),
      readService: async () => ({ addresses: ['10.0.0.152'], ports: [2049] }),
      serves: async (address, port) => {
        probes.push(`${address}:${port}`);
        return probes.length > opts.servesAfter;
      },
      entriesFrom: async (replySrc) => {
        scans.push(clock.now());
        return table.filter((e) => e.replySrc === replySrc);
      },
      end: async (c): Promise<EndOutcome> => {
        ended.push({ at: clock.now(), c });
        table = table.filter((e) => e !== c.entry);
        return { ok: true, detail: 'ended' };
      },
      localAddresses: () => new Set(['10.201.0.3']),
      counted: () => {},
    },
    { waitMs: 60_000, rememberMs: 600_000 },
    LABEL_SHARE_MANAGER,
  );
  return { clock, probes, ended, scans, reconnector, addEntry: (e: ConntrackEntry) => table.push(e) };
}

const settle = async () => {
  for (let i = 0; i < 200; i++) await new Promise((r) => setImmediate(r));
};

test('Reconnector: waits until the listed replacement answers, then ends the stale connections and scans again', async () => {
  const h = harness({ servesAfter: 3, entries: [entry({}), entry({ replySrc: '10.244.2.7', sport: 1 })] });
  h.reconnector.sliceSeen(slice(['10.244.1.3']), false);
  h.reconnector.sliceSeen(slice(['10.244.2.7']), false);
  await settle();
  assert.deepEqual(h.probes, Array(4).fill('10.244.2.7:2049'), 'probed every 100 ms until it answered');
  assert.equal(h.ended.length, 1);
  assert.equal(h.ended[0]?.c.entry.sport, 42280);
  assert.equal(h.ended[0]?.c.how, 'tickle');
  assert.equal(h.ended[0]?.at, 300, 'ended right after the answer, not before');
  assert.deepEqual(
    h.scans.map((t) => t - 300),
    [...SCAN_OFFSETS_MS],
    'scanned at each offset after the answer',
  );
  h.reconnector.stop();
});

test('Reconnector: an entry made again after the first scan (kube-proxy not yet updated) is ended by a later scan', async () => {
  const h = harness({ servesAfter: 0, entries: [entry({})] });
  h.reconnector.sliceSeen(slice(['10.244.1.3']), false);
  h.reconnector.sliceSeen(slice(['10.244.2.7']), false);
  await new Promise((r) => setImmediate(r));
  h.addEntry(entry({ sport: 50000 }));
  await settle();
  assert.deepEqual(
    h.ended.map((e) => e.c.entry.sport),
    [42280, 50000],
  );
});

test('Reconnector: nothing is ended while no listed server answers, nor for a first listing', async () => {
  const never = harness({ servesAfter: Number.POSITIVE_INFINITY, entries: [entry({})] });
  never.reconnector.sliceSeen(slice(['10.244.1.3']), false);
  never.reconnector.sliceSeen(slice(['10.244.2.7']), false);
  await settle();
  never.reconnector.stop();
  await settle();
  assert.equal(never.ended.length, 0);
  assert.ok(never.probes.length > 0);
  const first = harness({ servesAfter: 0, entries: [entry({})] });
  first.reconnector.sliceSeen(slice(['10.244.2.7']), false);
  await settle();
  assert.deepEqual(first.probes, []);
  assert.equal(first.ended.length, 0);
});

test('readReconnectorConfig: defaults, and every bad value named at once', () => {
  const c = readReconnectorConfig({ LEASEHOLD_NODE_NAME: 'n1' });
  assert.equal(c.waitMs, 300_000);
  assert.equal(c.rememberMs, 600_000);
  assert.equal(c.httpPort, 8092);
  assert.throws(
    () =>
      readReconnectorConfig({
        LEASEHOLD_RECONNECT_WAIT: '0s',
        LEASEHOLD_RECONNECT_REMEMBER: 'forever',
        LEASEHOLD_LOG_LEVEL: 'loud',
      }),
    (err: Error) =>
      /LEASEHOLD_NODE_NAME is not set/.test(err.message) &&
      /LEASEHOLD_RECONNECT_WAIT="0s"/.test(err.message) &&
      /LEASEHOLD_RECONNECT_REMEMBER="forever"/.test(err.message) &&
      /LEASEHOLD_LOG_LEVEL="loud"/.test(err.message),
  );
});
