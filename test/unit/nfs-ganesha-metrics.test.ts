/**
 * The NFS server's metrics, pure parts: dbus-send's reply format (dbus-reply.ts), ganesha
 * 4.3's stats replies (ganesha-stats.ts) on replies captured from Debian's ganesha 4.3
 * after three 1 KiB libnfs writes, /proc/net/tcp (tcp-connections.ts), ganesha's grace
 * log lines (grace-log.ts) and the families (nfs-metrics.ts, parsed by promtool).
 * The real ganesha answers them in test/integration/nfs-ganesha-metrics.test.ts.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { renderFamilies } from '../../lib/prom-text.ts';
import { type DbusValue, parseDbusReply } from '../../server/nfs-ganesha/dbus-reply.ts';
import { inGraceOf, nfsIoOf, requestsOf, v4OpsOf } from '../../server/nfs-ganesha/ganesha-stats.ts';
import { graceEventOf } from '../../server/nfs-ganesha/grace-log.ts';
import { type NfsObservations, nfsFamilies } from '../../server/nfs-ganesha/nfs-metrics.ts';
import { countEstablished } from '../../server/nfs-ganesha/tcp-connections.ts';

const HEADER =
  'method return time=1796670787.925862 sender=:1.0 -> destination=:1.2 serial=12 reply_serial=2\n';
const io6 = (n: number[]) =>
  `         struct {\n${n.map((v) => `            uint64 ${v}\n`).join('')}         }\n`;
const GET_NFS_IO = `${HEADER}   boolean true
   string "OK"
   struct {
      uint64 1796670780
      uint64 740744288
   }
   array [
      struct {
         uint16 1
         string "NFSv40"
${io6([0, 0, 0, 0, 0, 0])}${io6([3072, 3072, 3, 0, 101130, 0])}      }
      struct {
         uint16 0
         string "NFSv40"
${io6([0, 0, 0, 0, 0, 0])}${io6([0, 0, 0, 0, 0, 0])}      }
   ]
`;
const GET_GLOBAL_OPS = `${HEADER}   boolean true
   string "OK"
   struct {
      uint64 1796670780
      uint64 740744288
   }
   struct {
      string "NFSv3"
      uint64 0
      string "NFSv40"
      uint64 56
      string "NFSv41"
      uint64 0
      string "NFSv42"
      uint64 0
      string "NLM4"
      uint64 0
      string "MNTv1"
      uint64 0
      string "MNTv3"
      uint64 0
      string "RQUOTA"
      uint64 0
   }
`;
const FULLV4 = (entries: string) => `${HEADER}   boolean true
   string "OK"
   struct {
      uint64 1796670780
      uint64 740744288
   }
   array [
${entries}   ]
   string "OK"
`;
const op = (name: string, total: number, errors: number, mean: number) =>
  `      struct {\n         string "${name}"\n         uint64 ${total}\n         uint64 ${errors}\n         double ${mean}\n         double 0.01\n         double 0.05\n      }\n`;
const V4_DISABLED = `${HEADER}   boolean false\n   string "v4_full stats disabled"\n`;
const GRACE = (inGrace: boolean) =>
  `${HEADER}   boolean ${inGrace}\n   boolean true\n   string "get grace success"\n`;

function args(text: string): DbusValue[] {
  const parsed = parseDbusReply(text);
  assert.ok(parsed.ok, parsed.ok ? '' : parsed.error);
  return parsed.value;
}

describe('parseDbusReply', () => {
  it('reads basic values, structs and arrays in order', () => {
    const [status, message, stamp, list] = args(GET_NFS_IO);
    assert.deepEqual(status, { kind: 'boolean', value: true });
    assert.deepEqual(message, { kind: 'string', value: 'OK' });
    assert.equal(stamp?.kind, 'struct');
    assert.equal(list?.kind === 'array' ? list.items.length : -1, 2);
    assert.deepEqual(args(`${HEADER}   array [\n   ]\n   double 0.25\n   int32 -3\n`), [
      { kind: 'array', items: [] },
      { kind: 'number', value: 0.25 },
      { kind: 'number', value: -3 },
    ]);
  });

  it('refuses what it cannot read, naming it', () => {
    const bad = (text: string) => {
      const parsed = parseDbusReply(text);
      return parsed.ok ? 'read' : parsed.error;
    };
    assert.match(bad('Error org.freedesktop.DBus.Error.ServiceUnknown: gone\n'), /not a method return/);
    assert.match(bad(`${HEADER}   uint64 twelve\n`), /line 2 of the reply is unreadable: uint64 twelve/);
    assert.match(bad(`${HEADER}   struct {\n      uint64 1\n`), /ends inside a struct/);
  });
});

describe("ganesha's stats replies", () => {
  it('GetNFSIO: the READ and WRITE counters of our export only, latency in seconds', () => {
    const read = nfsIoOf(args(GET_NFS_IO), 1);
    assert.ok(read.ok);
    assert.deepEqual(read.value, [
      { version: '4.0', direction: 'read', ops: 0, errors: 0, bytes: 0, latencySeconds: 0 },
      { version: '4.0', direction: 'write', ops: 3, errors: 0, bytes: 3072, latencySeconds: 0.00010113 },
    ]);
    const other = nfsIoOf(args(GET_NFS_IO), 7);
    assert.deepEqual(other, { ok: true, value: [] });
  });

  it('a refusal is an error quoting ganesha; another shape is an error, not a guess', () => {
    assert.deepEqual(
      nfsIoOf(args(`${HEADER}   boolean false\n   string "NFS stat counting disabled"\n`), 1),
      {
        ok: false,
        error: 'GetNFSIO: ganesha answered "NFS stat counting disabled"',
      },
    );
    const short = GET_NFS_IO.replace('            uint64 101130\n', '');
    assert.deepEqual(nfsIoOf(args(short), 1), {
      ok: false,
      error: 'GetNFSIO: the write counters of NFSv40 are not 6 integers',
    });
    assert.equal(requestsOf(args(GRACE(true))).ok, false);
    assert.equal(v4OpsOf(args(GET_GLOBAL_OPS)).ok, false);
  });

  it('GetGlobalOPS: requests per NFS version, the other protocols left out', () => {
    const read = requestsOf(args(GET_GLOBAL_OPS));
    assert.ok(read.ok);
    assert.deepEqual(
      [...read.value],
      [
        ['3', 0],
        ['4.0', 56],
        ['4.1', 0],
        ['4.2', 0],
      ],
    );
  });

  it('GetFULLV4Stats: per operation, summed latency from the mean; the "None" placeholder skipped', () => {
    const read = v4OpsOf(args(FULLV4(op('WRITE', 3, 1, 0.5) + op('OPEN', 2, 0, 0.25))));
    assert.deepEqual(read, {
      ok: true,
      value: [
        { op: 'WRITE', total: 3, errors: 1, latencySeconds: 0.0015 },
        { op: 'OPEN', total: 2, errors: 0, latencySeconds: 0.0005 },
      ],
    });
    assert.deepEqual(v4OpsOf(args(FULLV4(op('None', 0, 0, 0)))), { ok: true, value: [] });
    assert.deepEqual(v4OpsOf(args(V4_DISABLED)), {
      ok: false,
      error: 'GetFULLV4Stats: ganesha answered "v4_full stats disabled"',
    });
  });

  it('get_grace: in grace or not', () => {
    assert.deepEqual(inGraceOf(args(GRACE(true))), { ok: true, value: true });
    assert.deepEqual(inGraceOf(args(GRACE(false))), { ok: true, value: false });
    assert.match(
      (
        inGraceOf(args(`${HEADER}   boolean false\n   string "Get grace takes no arguments."\n`)) as {
          error: string;
        }
      ).error,
      /get_grace: the reply is no/,
    );
  });
});

describe('countEstablished', () => {
  const tcp = [
    '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
    '   0: 0100007F:0801 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1',
    '   1: 0100007F:0801 0100007F:D2C4 01 00000000:00000000 00:00000000 00000000     0        0 2 1',
    '   2: 0100007F:D2C4 0100007F:0801 01 00000000:00000000 00:00000000 00000000     0        0 3 1',
    '   3: 0A000005:0801 0A000009:03FF 01 00000000:00000000 00:00000000 00000000     0        0 4 1',
    '   4: 0100007F:0801 0100007F:D2C6 06 00000000:00000000 00:00000000 00000000     0        0 5 1',
    '',
  ].join('\n');
  const tcp6 = [
    '  sl  local_address                         remote_address                        st tx_queue',
    '   0: 0000000000000000FFFF00000100007F:0801 0000000000000000FFFF00000100007F:C350 01 00000000:00000000',
    '   1: 00000000000000000000000000000000:0801 00000000000000000000000000000000:0000 0A 00000000:00000000',
  ].join('\n');

  it('counts ESTABLISHED connections to the local NFS port only (not listeners, not our outgoing ones, not TIME_WAIT)', () => {
    assert.equal(countEstablished(tcp, 2049), 2);
    assert.equal(countEstablished(tcp6, 2049), 1);
    assert.equal(countEstablished(tcp, 3049), 0);
    assert.equal(countEstablished('', 2049), 0);
  });
});

describe('graceEventOf', () => {
  it("reads ganesha 4.3's grace lines and nothing else", () => {
    const line = (text: string) =>
      `2026-12-07 19:13:00 : nfs-ganesha-19510[main] nfs_start_grace :STATE :EVENT :${text}`;
    assert.deepEqual(graceEventOf(line('NFS Server Now IN GRACE, duration 15')), {
      kind: 'started',
      durationS: 15,
    });
    assert.deepEqual(graceEventOf(line('NFS Server Now NOT IN GRACE')), { kind: 'ended' });
    assert.equal(graceEventOf(line('grace reload client info completed from backend')), undefined);
  });
});

describe('nfsFamilies', () => {
  const up: NfsObservations = {
    versions: ['4.1', '4.2'],
    stats: {
      ok: true,
      value: {
        io: [{ version: '4.1', direction: 'write', ops: 3, errors: 0, bytes: 3072, latencySeconds: 0.0001 }],
        requests: new Map([['4.1', 20]]),
        ops: [{ op: 'WRITE', total: 3, errors: 0, latencySeconds: 0.0001 }],
        inGrace: true,
      },
    },
    connections: 2,
    gracePeriodsStarted: 1,
    scrapeSeconds: 0.03,
  };
  const sample = (text: string, series: string) =>
    text
      .split('\n')
      .find((l) => l.startsWith(`${series} `))
      ?.slice(series.length + 1);

  it('every enabled version and direction has its series from the start; promtool parses it', () => {
    const text = renderFamilies(nfsFamilies(up));
    assert.equal(sample(text, 'leasehold_nfs_stats_up'), '1');
    assert.equal(sample(text, 'leasehold_nfs_in_grace'), '1');
    assert.equal(sample(text, 'leasehold_nfs_client_connections'), '2');
    assert.equal(sample(text, 'leasehold_nfs_io_operations_total{version="4.1",direction="write"}'), '3');
    assert.equal(sample(text, 'leasehold_nfs_io_operations_total{version="4.2",direction="read"}'), '0');
    assert.equal(sample(text, 'leasehold_nfs_requests_total{version="4.2"}'), '0');
    assert.equal(sample(text, 'leasehold_nfs_operations_total{op="WRITE"}'), '3');
    const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    if (run.error)
      throw new Error(`promtool not runnable (apt-get install prometheus): ${run.error.message}`);
    assert.equal(`${run.stdout}${run.stderr}`.trim(), '');
    assert.equal(run.status, 0);
  });

  it("stats down: stats_up 0 and nothing read from ganesha, not a stale value; the kernel's and the log's stay", () => {
    const text = renderFamilies(nfsFamilies({ ...up, stats: { ok: false, error: 'GetNFSIO: gone' } }));
    assert.equal(sample(text, 'leasehold_nfs_stats_up'), '0');
    assert.doesNotMatch(text, /leasehold_nfs_(in_grace|requests|operation|io_)/);
    assert.equal(sample(text, 'leasehold_nfs_client_connections'), '2');
    assert.equal(sample(text, 'leasehold_nfs_grace_periods_total'), '1');
    const noProc = renderFamilies(nfsFamilies({ ...up, connections: undefined }));
    assert.doesNotMatch(noProc, /client_connections/);
  });
});
