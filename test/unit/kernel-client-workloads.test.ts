/**
 * dev/kernel-client's guest workloads: lh-kload's console lines parse into typed events
 * (kernel lines that share the console ignored, bad fields named), the pure analysis
 * measures a stall, flags ESTALE, finds a granted probe and a lost record (each safety
 * check shown to fail on a violation), and the real program, built by build.sh and
 * run on the host in a temp dir: write then verify (a flipped byte is found), lock and
 * probe exclude each other across two processes, read, create and an open that fails
 * print what the parser takes, bad arguments exit 2. About 2 s (gcc once, then cached).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, describe, it } from 'node:test';
import { processesNaming } from '../../dev/kernel-client/machine.ts';
import {
  checkReadBack,
  expectedRecord,
  lockExclusion,
  stallOf,
  WorkloadAnalysisError,
} from '../../dev/kernel-client/workload-analysis.ts';
import {
  type AckEvent,
  parseWorkloadLine,
  type WorkloadEvent,
  WorkloadLineError,
} from '../../dev/kernel-client/workload-lines.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';

const BUILD_SCRIPT = join(import.meta.dirname, '../../dev/kernel-client/build.sh');

function parsed(text: string, atMs = 1000): WorkloadEvent {
  const e = parseWorkloadLine(text, atMs);
  assert.ok(e, `${text} should parse`);
  return e;
}
const ack = (seq: number, atMs: number): AckEvent => ({ kind: 'ack', tag: 'w1', atMs, seq });
const err = (n: number, errno: string, atMs: number): WorkloadEvent => ({
  kind: 'err',
  tag: 'w1',
  atMs,
  n,
  errno,
  op: 'write',
});

describe('kernel-client workload lines', () => {
  it('parses every kind lh-kload prints, stamped with the given time', () => {
    assert.deepEqual(parsed('w1 ack 17', 5.5), { kind: 'ack', tag: 'w1', atMs: 5.5, seq: 17 });
    assert.deepEqual(parsed('w-2 err 18 ESTALE fsync\r'), {
      kind: 'err',
      tag: 'w-2',
      atMs: 1000,
      n: 18,
      errno: 'ESTALE',
      op: 'fsync',
    });
    assert.deepEqual(parsed('l1 err 0 E524 lock'), {
      kind: 'err',
      tag: 'l1',
      atMs: 1000,
      n: 0,
      errno: 'E524',
      op: 'lock',
    });
    assert.deepEqual(parsed('r1 read 3'), { kind: 'read', tag: 'r1', atMs: 1000, n: 3 });
    assert.deepEqual(parsed('l1 locked'), { kind: 'locked', tag: 'l1', atMs: 1000 });
    assert.deepEqual(parsed('l1 lockio 4'), { kind: 'lockio', tag: 'l1', atMs: 1000, n: 4 });
    assert.deepEqual(parsed('p1 denied 1'), { kind: 'denied', tag: 'p1', atMs: 1000, n: 1 });
    assert.deepEqual(parsed('p1 granted 2'), { kind: 'granted', tag: 'p1', atMs: 1000, n: 2 });
    assert.deepEqual(parsed('c1 created 9'), { kind: 'created', tag: 'c1', atMs: 1000, n: 9 });
    assert.deepEqual(parsed('v1 verified 0'), { kind: 'verified', tag: 'v1', atMs: 1000, count: 0 });
    assert.deepEqual(parsed('v1 bad 7 short-read'), {
      kind: 'bad',
      tag: 'v1',
      atMs: 1000,
      seq: 7,
      reason: 'short-read',
    });
    assert.deepEqual(parsed('v1 bad 1 ENOENT\n'), {
      kind: 'bad',
      tag: 'v1',
      atMs: 1000,
      seq: 1,
      reason: 'ENOENT',
    });
    assert.deepEqual(parsed('w1 exit'), { kind: 'exit', tag: 'w1', atMs: 1000 });
  });

  it('ignores the kernel and other programs that share the console', () => {
    for (const line of [
      '',
      '[    0.000000] Linux version 6.1.0-21-amd64 (debian-kernel@lists.debian.org)',
      'nfs: server 10.0.2.2 not responding, still trying',
      'NFS: nfs4_reclaim_open_state: Lock reclaim failed!',
      'random: crng init done',
      'lockd: server 10.0.2.2 OK',
      'lh-kload: intervalMs=x: expected an integer from 0 to 3600000',
      'W1 ack 1',
      '1w ack 1',
      'w1 acked 1',
      'w1  ack 1',
      ' w1 ack 1',
      'w1',
    ])
      assert.equal(parseWorkloadLine(line, 1), undefined, line);
  });

  it('throws an error naming the line and the rule for a known kind with bad fields', () => {
    const cases: Array<[string, RegExp]> = [
      ['w1 ack', /ack takes 1 field\(s\) \(seq\)/],
      ['w1 ack 1 2', /ack takes 1 field/],
      ['w1 ack 0', /ack seq must be an integer from 1 to 4294967295, got "0"/],
      ['w1 ack 01', /ack seq must be an integer/],
      ['w1 ack 4294967296', /ack seq must be an integer/],
      ['w1 ack x', /got "x"/],
      ['w1 err 3 eio write', /err errno must be a symbolic errno/],
      ['w1 err 3 EIO scribble', /err op must be one of open, write, fsync/],
      ['w1 err -1 EIO write', /err n must be an integer from 0/],
      ['v1 bad 2 weird', /bad reason must be short-read, mismatch or a symbolic errno/],
      ['l1 locked now', /locked takes no fields/],
      ['w1 exit 0', /exit takes no fields/],
    ];
    for (const [line, rule] of cases)
      assert.throws(
        () => parseWorkloadLine(line, 1),
        (e: unknown) =>
          e instanceof WorkloadLineError &&
          e.code === 'E_WORKLOAD_LINE' &&
          e.message.startsWith(`workload line ${JSON.stringify(line)}: `) &&
          rule.test(e.message),
        line,
      );
    assert.throws(() => parseWorkloadLine('w1 ack 1', Number.NaN), { code: 'E_WORKLOAD_LINE' });
  });
});

describe('kernel-client workload analysis', () => {
  it('measures the stall: last success before, first after, the gap and the errors by errno', () => {
    // Acks every 100 ms up to 1000, fault at 1050, EIO then ETIMEDOUT, writes resume at 4000.
    const events: WorkloadEvent[] = [
      ...[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((s) => ack(s, s * 100)),
      err(11, 'EIO', 1500),
      err(11, 'ETIMEDOUT', 2500),
      err(11, 'EIO', 3500),
      ack(11, 4000),
      ack(12, 4100),
    ];
    const stall = stallOf(events, 1050);
    assert.deepEqual(stall, {
      tag: 'w1',
      workload: 'write',
      faultMs: 1050,
      outcome: 'resumed',
      lastSuccessBefore: { n: 10, atMs: 1000 },
      firstSuccessAfter: { n: 11, atMs: 4000 },
      gapMs: 2950,
      errorsAfter: [
        { errno: 'EIO', count: 2, firstMs: 1500, lastMs: 3500, ops: ['write'] },
        { errno: 'ETIMEDOUT', count: 1, firstMs: 2500, lastMs: 2500, ops: ['write'] },
      ],
      staleSeen: false,
    });
    // A success exactly at the fault counts as before it.
    assert.deepEqual(stallOf(events, 1000).lastSuccessBefore, { n: 10, atMs: 1000 });
  });

  it('flags ESTALE and a workload that never resumed', () => {
    const events = [ack(1, 100), ack(2, 200), err(3, 'ESTALE', 400), err(3, 'ESTALE', 500)];
    const stall = stallOf(events, 250);
    assert.equal(stall.staleSeen, true);
    assert.equal(stall.outcome, 'never-resumed');
    assert.equal(stall.gapMs, undefined);
    assert.deepEqual(stall.errorsAfter, [
      { errno: 'ESTALE', count: 2, firstMs: 400, lastMs: 500, ops: ['write'] },
    ]);
    assert.equal(stallOf([ack(1, 100), ack(2, 300)], 250).staleSeen, false);
  });

  it("takes each workload's success kind and refuses mixed input", () => {
    const lock = ['l1 locked', 'l1 lockio 1', 'l1 err 2 EIO lockio', 'l1 lockio 2'].map((l, i) =>
      parsed(l, i * 100),
    );
    const stall = stallOf(lock, 150);
    assert.equal(stall.workload, 'lock');
    assert.equal(stall.gapMs, 150);
    assert.equal(stallOf([parsed('c1 created 1', 10)], 5).workload, 'create');
    assert.equal(stallOf([parsed('r1 read 1', 10)], 5).workload, 'read');
    assert.throws(() => stallOf([ack(1, 1), parsed('w2 ack 1', 2)], 0), {
      code: 'E_WORKLOAD_ANALYSIS',
      message: /one tag, got w1, w2/,
    });
    assert.throws(() => stallOf([ack(1, 1), parsed('w1 read 1', 2)], 0), /several workloads \(ack, read\)/);
    assert.throws(() => stallOf([], Number.NaN), WorkloadAnalysisError);
  });

  it('finds a probe granted the lock the holder holds', () => {
    const denied = ['p1 denied 1', 'p1 err 2 ENOLCK setlk', 'p1 denied 3'].map((l, i) => parsed(l, i));
    assert.deepEqual(lockExclusion(denied), {
      tag: 'p1',
      outcome: 'exclusive',
      denied: 2,
      granted: [],
      errors: [{ errno: 'ENOLCK', count: 1, firstMs: 1, lastMs: 1, ops: ['setlk'] }],
    });
    const violated = lockExclusion([...denied, parsed('p1 granted 4', 7)]);
    assert.equal(violated.outcome, 'violated');
    assert.deepEqual(violated.granted, [{ n: 4, atMs: 7 }]);
    assert.equal(lockExclusion([parsed('p1 err 1 ENOLCK setlk', 1)]).outcome, 'unprobed');
    assert.equal(lockExclusion([]).outcome, 'unprobed');
  });

  it('reproduces the record format and checks a read-back byte for byte', () => {
    const one = expectedRecord(1, 64).toString('latin1');
    assert.equal(one, `lh-kload seq=0000000001\n${'b'.repeat(39)}\n`);
    assert.equal(expectedRecord(25, 100).toString('latin1').slice(24, 99), 'z'.repeat(75));
    assert.equal(expectedRecord(26, 64)[30], 0x61);
    assert.throws(() => expectedRecord(1, 63), { code: 'E_WORKLOAD_ANALYSIS', message: /recordSize 63/ });
    assert.throws(() => expectedRecord(0, 64), /record seq 0/);

    const size = 100;
    const acks = [1, 2, 3, 4].map((s) => ack(s, s));
    // Record 5 landed but its ack was never printed: allowed, and the highest present.
    const file = Buffer.concat([1, 2, 3, 4, 5].map((s) => expectedRecord(s, size)));
    assert.deepEqual(checkReadBack(acks, file, size), {
      tag: 'w1',
      outcome: 'intact',
      acked: 4,
      lost: [],
      highestPresent: 5,
    });

    const zeroed = Buffer.from(file);
    zeroed.fill(0, 2 * size, 3 * size);
    const lost = checkReadBack(acks, zeroed, size);
    assert.equal(lost.outcome, 'lost');
    assert.deepEqual(lost.lost, [{ seq: 3, reason: 'different' }]);
    assert.equal(lost.highestPresent, 5);

    const short = checkReadBack(acks, file.subarray(0, 3 * size + 10), size);
    assert.deepEqual(short.lost, [{ seq: 4, reason: 'missing' }]);
    assert.equal(short.highestPresent, 3);

    assert.equal(checkReadBack([], Buffer.alloc(0), size).outcome, 'nothing-acked');
    assert.throws(() => checkReadBack([ack(1, 1), { ...ack(1, 2), tag: 'w2' }], file, size), /one tag/);
  });
});

// --- The real program on the host -------------------------------------------------------

const dir = mkdtempSync(join(tmpdir(), 'lh-kload-'));
const children = new Set<ChildProcess>();
after(() => {
  for (const child of children) child.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

let binary: string | undefined;
function lhKload(): string {
  binary ??= join(execFileSync('bash', [BUILD_SCRIPT], { encoding: 'utf8' }).trim(), 'lh-kload');
  return binary;
}

interface Workload {
  events: WorkloadEvent[];
  exited: Promise<number | null>;
  /** Resolves with the first event matching, once seen; rejects on exit or after timeoutMs. */
  waitFor(match: (e: WorkloadEvent) => boolean, timeoutMs: number): Promise<WorkloadEvent>;
  /** SIGTERM; resolves with the exit code once every stdout line was shown to be an event. */
  stop(): Promise<number | null>;
}

function start(args: string[]): Workload {
  const child = spawn(lhKload(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  const events: WorkloadEvent[] = [];
  let stderr = '';
  let done = false;
  child.stderr?.on('data', (d) => {
    stderr += String(d);
  });
  // Nothing else writes to this stdout: a line that is not an event is a failure (stop() says so).
  const unparsed: string[] = [];
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
    try {
      const e = parseWorkloadLine(text, monotonicMs());
      if (e) events.push(e);
      else unparsed.push(text);
    } catch (error) {
      unparsed.push(`${text} (${(error as Error).message})`);
    }
  });
  const exited = new Promise<number | null>((resolve) =>
    child.on('close', (code) => {
      done = true;
      children.delete(child);
      resolve(code);
    }),
  );
  return {
    events,
    exited,
    async waitFor(match, timeoutMs) {
      const deadline = monotonicMs() + timeoutMs;
      for (;;) {
        const e = events.find(match);
        if (e) return e;
        if (done || monotonicMs() > deadline)
          throw new Error(
            `lh-kload ${args.join(' ')}: no such event ${done ? 'before it exited' : `within ${timeoutMs} ms`}; stderr: ${stderr}`,
          );
        await sleep(10);
      }
    },
    async stop() {
      child.kill('SIGTERM');
      const code = await exited;
      assert.deepEqual(unparsed, [], `lh-kload ${args.join(' ')}: every stdout line is an event`);
      return code;
    },
  };
}

function verify(path: string, count: number, size: number): { status: number | null; stdout: string } {
  const r = spawnSync(lhKload(), ['verify', 'v1', path, String(count), String(size)], { encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout };
}

describe('kernel-client lh-kload on the host', () => {
  it('writes acked records that verify passes and a flipped byte fails', async () => {
    const file = join(dir, 'records');
    const size = 100; // not a divisor of a page: records straddle page boundaries
    const writer = start(['write', 'w1', file, '10', String(size)]);
    await writer.waitFor((e) => e.kind === 'ack' && e.seq >= 3, 2000);
    await sleep(300);
    assert.equal(await writer.stop(), 0);
    const acks = writer.events.filter((e): e is AckEvent => e.kind === 'ack');
    assert.deepEqual(
      acks.map((a) => a.seq),
      acks.map((_, i) => i + 1),
      'acks go 1, 2, 3, ... without a gap',
    );
    assert.equal(writer.events.at(-1)?.kind, 'exit');
    assert.equal(writer.events.length, acks.length + 1, 'nothing but acks and the exit line');
    const count = acks.length;

    const content = readFileSync(file);
    const readBack = checkReadBack(acks, content, size);
    assert.equal(readBack.outcome, 'intact', JSON.stringify(readBack.lost));
    assert.ok(readBack.highestPresent >= count);

    assert.deepEqual(verify(file, count, size), { status: 0, stdout: `v1 verified ${count}\n` });
    assert.deepEqual(verify(file, count + 1000, size), {
      status: 1,
      stdout: `v1 bad ${readBack.highestPresent + 1} short-read\n`,
    });
    const flipped = Buffer.from(content);
    flipped[size + 50] = (flipped[size + 50] ?? 0) ^ 1;
    writeFileSync(file, flipped);
    assert.deepEqual(verify(file, count, size), { status: 1, stdout: 'v1 bad 2 mismatch\n' });
    assert.deepEqual(checkReadBack(acks, flipped, size).lost, [{ seq: 2, reason: 'different' }]);
  });

  it('denies a probe while the lock holder holds the lock, grants it once the holder is gone', async () => {
    const file = join(dir, 'lock');
    const holder = start(['lock', 'l1', file, '20']);
    await holder.waitFor((e) => e.kind === 'locked', 2000);
    const probe = start(['probe', 'p1', file, '20']);
    await probe.waitFor((e) => e.kind === 'denied' && e.n >= 3, 2000);
    await holder.waitFor((e) => e.kind === 'lockio', 2000);
    assert.equal(await probe.stop(), 0);
    const whileHeld = lockExclusion(probe.events);
    assert.equal(whileHeld.outcome, 'exclusive', JSON.stringify(probe.events));
    assert.equal(await holder.stop(), 0);
    assert.ok(!holder.events.some((e) => e.kind === 'err'), JSON.stringify(holder.events));

    // The check fails on a violation: the same probe, the holder gone, is granted.
    const later = start(['probe', 'p2', file, '20']);
    await later.waitFor((e) => e.kind === 'granted', 2000);
    assert.equal(await later.stop(), 0);
    assert.equal(lockExclusion(later.events).outcome, 'violated');
  });

  it('reads with O_DIRECT, creates files, and reports a failed open as err', async () => {
    const file = join(dir, 'readme');
    writeFileSync(file, expectedRecord(1, 64));
    const reader = start(['read', 'r1', file, '10', '64']);
    await reader.waitFor((e) => e.kind === 'read' && e.n >= 2, 2000);
    assert.equal(await reader.stop(), 0);

    const files = join(dir, 'files');
    const creator = start(['create', 'c1', files, '10']);
    const last = await creator.waitFor((e) => e.kind === 'created' && e.n >= 3, 2000);
    assert.equal(await creator.stop(), 0);
    assert.equal(stallOf(creator.events, last.atMs - 1).workload, 'create');
    const created = creator.events.filter((e) => e.kind === 'created').length;
    assert.equal(readdirSync(files).length, created);
    assert.equal(readFileSync(join(files, 'f-1'), 'latin1'), 'f-0000000000001\n');

    const failing = start(['write', 'w9', join(dir, 'no-such-dir', 'f'), '10', '64']);
    const e = await failing.waitFor((x) => x.kind === 'err', 2000);
    assert.equal(await failing.stop(), 0);
    assert.deepEqual(
      { ...e, atMs: 0 },
      { kind: 'err', tag: 'w9', atMs: 0, n: 1, errno: 'ENOENT', op: 'open' },
    );
  });

  it('refuses bad arguments with exit 2, naming the argument', () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /mode is missing/],
      [['scribble', 't', 'f', '1'], /mode=scribble/],
      [['write', 'Tag', 'f', '10', '64'], /tag=Tag: expected \[a-z\]\[a-z0-9-\]\*/],
      [['write', 't', 'f', '10x', '64'], /intervalMs=10x: expected an integer from 0 to 3600000/],
      [['write', 't', 'f', '10', '63'], /recordSize=63: expected an integer from 64 to 65536/],
      [['verify', 't', 'f', '-1', '64'], /count=-1/],
      [['lock', 't', 'f'], /lock takes 3 arguments after the mode, got 2/],
      [['create', 't', '', '10'], /dir=: expected a non-empty path/],
    ];
    for (const [args, rule] of cases) {
      const r = spawnSync(lhKload(), args, { encoding: 'utf8' });
      assert.equal(r.status, 2, args.join(' '));
      assert.equal(r.stdout, '', args.join(' '));
      assert.match(r.stderr, rule);
      assert.match(r.stderr, /usage: lh-kload/);
    }
  });
});

describe("the kernel client's leftover check", () => {
  it('finds a process whose command line names the machine directory, and none once it is gone', async () => {
    const machineDir = mkdtempSync(join(tmpdir(), 'leasehold-kc-leftover-'));
    const child = spawn('sh', ['-c', 'sleep 30', machineDir], { stdio: 'ignore' });
    children.add(child);
    await sleep(100);
    const found = processesNaming(machineDir);
    assert.ok(
      found.some((p) => p.startsWith(`process ${child.pid} `)),
      JSON.stringify(found),
    );
    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
    assert.deepEqual(processesNaming(machineDir), []);
    rmSync(machineDir, { recursive: true, force: true });
  });
});
