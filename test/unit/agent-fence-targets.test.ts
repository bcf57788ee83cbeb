/**
 * Which processes a fence stops, and the preflight that keeps an agent from holding a
 * lease it could not fence (pure: process tables and credentials are given).
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ancestorsOf, CAP_KILL, fencePreflightProblem, fenceTargets } from '../../agent/fence-targets.ts';
import { type ProcessInfo, parseStat } from '../../agent/process-table.ts';

const proc = (pid: number, ppid: number, comm: string, argv: string[] = [comm]): ProcessInfo => ({
  pid,
  ppid,
  state: 'S',
  startTime: 1000 + pid,
  comm,
  argv,
});

// A share-manager pod with shareProcessNamespace: pause is PID 1, each container's first
// process has its parent outside the namespace (ppid 0); the server forked a worker and
// an orphan of the server was reparented to PID 1.
const POD: ProcessInfo[] = [
  proc(1, 0, 'pause'),
  proc(7, 0, 'node', ['/nodejs/bin/node', 'dist/bin/leasehold.js', 'agent']),
  proc(9, 7, 'sh', ['/bin/sh', '-c', 'fence-hook']),
  proc(12, 0, 'ganesha.nfsd', ['/usr/bin/ganesha.nfsd', '-F']),
  proc(13, 12, 'ganesha.nfsd', ['/usr/bin/ganesha.nfsd', '-F']),
  proc(20, 1, 'dbus-daemon'),
];
const AGENT = 7;
const KILL_ONLY = { uid: 0, capEff: 1n << BigInt(CAP_KILL) };

describe('fence targets', () => {
  it('pod: every process but the agent, its children and PID 1, orphans included', () => {
    assert.deepEqual(
      fenceTargets({ action: 'pod' }, POD, AGENT).map((p) => p.pid),
      [12, 13, 20],
    );
  });
  it('signal: the processes matching the name, never the agent', () => {
    assert.deepEqual(
      fenceTargets({ action: 'signal', process: 'ganesha.nfsd' }, POD, AGENT).map((p) => p.pid),
      [12, 13],
    );
    assert.deepEqual(
      fenceTargets({ action: 'signal', process: 'leasehold' }, POD, AGENT).map((p) => p.pid),
      [],
      'the agent itself matches by argv but is never a target',
    );
  });
});

describe('fence preflight', () => {
  it('a pod that shares its PID namespace and an agent with CAP_KILL: can fence', () => {
    const facts = { selfPid: AGENT, processes: POD, credentials: KILL_ONLY };
    assert.equal(fencePreflightProblem('pod', facts), undefined);
    assert.equal(fencePreflightProblem('signal', facts), undefined);
  });
  it('pod on a host (PID 1 is an ancestor of the agent): refused, it would signal the machine', () => {
    const host = [proc(1, 0, 'systemd'), proc(300, 1, 'bash'), proc(301, 300, 'node'), proc(400, 1, 'sshd')];
    assert.deepEqual(ancestorsOf(301, host), [300, 1]);
    const problem = fencePreflightProblem('pod', { selfPid: 301, processes: host, credentials: KILL_ONLY });
    assert.match(problem ?? '', /shareProcessNamespace/);
    // signal by name stays possible there (tests and standalone use)
    assert.equal(
      fencePreflightProblem('signal', { selfPid: 301, processes: host, credentials: KILL_ONLY }),
      undefined,
    );
  });
  it('pod without a shared PID namespace (the agent is PID 1): refused', () => {
    const alone = [proc(1, 0, 'node')];
    assert.match(
      fencePreflightProblem('pod', { selfPid: 1, processes: alone, credentials: KILL_ONLY }) ?? '',
      /PID 1 of its own/,
    );
  });
  it('no CAP_KILL (uid 65532, capabilities dropped): refused with the fix in the message', () => {
    const problem = fencePreflightProblem('pod', {
      selfPid: AGENT,
      processes: POD,
      credentials: { uid: 65532, capEff: 0n },
    });
    assert.match(problem ?? '', /CAP_KILL/);
    assert.match(problem ?? '', /uid 65532/);
    assert.match(problem ?? '', /add \[KILL\]/);
  });
  it('unreadable credentials are a refusal, not a pass', () => {
    assert.match(
      fencePreflightProblem('signal', { selfPid: AGENT, processes: POD, credentials: undefined }) ?? '',
      /CAP_KILL cannot be checked/,
    );
  });
  it('command and none need nothing', () => {
    const facts = { selfPid: 1, processes: [], credentials: undefined };
    assert.equal(fencePreflightProblem('command', facts), undefined);
    assert.equal(fencePreflightProblem('none', facts), undefined);
  });
});

describe('/proc/PID/stat parsing', () => {
  it('reads pid, state, ppid and start time past a command name holding spaces and ")"', () => {
    const fields = Array.from({ length: 50 }, (_, i) => String(i + 3));
    fields[0] = 'S'; // field 3
    fields[1] = '42'; // field 4: ppid
    fields[19] = '987654'; // field 22: starttime
    assert.deepEqual(parseStat(`123 (a b) c) ${fields.join(' ')}`), {
      pid: 123,
      ppid: 42,
      state: 'S',
      startTime: 987654,
    });
    assert.equal(parseStat('garbage'), undefined);
  });
});

/**
 * The pod fence never reads a process's memory (issue 27 item 13): /proc/PID/cmdline
 * blocks behind a process stuck in I/O that holds its memory-map lock, and a read there
 * would stall the agent's event loop. Stood in for by a FIFO no one writes: opening it
 * blocks. Run in a child process (a blocked synchronous read cannot be timed out from
 * inside), with a fake /proc whose one process has a PID no process has (ESRCH).
 */
describe('the pod fence and /proc/PID/cmdline', () => {
  const PID = 2_147_483_000; // above any pid_max: signals to it fail with ESRCH
  function fakeProc(): string {
    const dir = mkdtempSync(join(tmpdir(), 'lh-fakeproc-'));
    mkdirSync(join(dir, String(PID)));
    writeFileSync(
      join(dir, String(PID), 'stat'),
      `${PID} (ganesha.nfsd) S 0 ${PID} ${PID} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0\n`,
    );
    writeFileSync(join(dir, String(PID), 'comm'), 'ganesha.nfsd\n');
    execFileSync('mkfifo', [join(dir, String(PID), 'cmdline')]);
    return dir;
  }
  const run = (dir: string, code: string, timeoutMs: number) =>
    spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: join(import.meta.dirname, '..', '..'),
      env: { ...process.env, FAKE_PROC: dir },
      encoding: 'utf8',
      timeout: timeoutMs,
    });

  it('pod: the fence scans, signals and gives up on the stuck process without opening its cmdline', () => {
    const dir = fakeProc();
    try {
      const r = run(
        dir,
        `import { runFence } from './agent/fence.ts';
import { systemClock } from './lib/clock.ts';
const r = await runFence({ action: 'pod', signal: 'SIGTERM', graceMs: 20, timeoutMs: 100 }, systemClock, process.env.FAKE_PROC);
console.log(JSON.stringify(r));`,
        30_000,
      );
      assert.equal(r.signal, null, `the fence returned (not killed by the 30 s timeout): ${r.stderr}`);
      const result = JSON.parse(r.stdout.trim()) as { kind: string; pids?: number[] };
      assert.equal(result.kind, 'incomplete', r.stdout);
      assert.deepEqual(result.pids, [PID]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the check can fail: a scan that reads argv blocks on that cmdline', () => {
    const dir = fakeProc();
    try {
      const r = run(
        dir,
        `import { listProcesses } from './agent/process-table.ts';
console.log('scanning');
console.log('listed', listProcesses(process.env.FAKE_PROC, { argv: true }).length);`,
        8_000,
      );
      assert.match(r.stdout, /scanning/, `the child got as far as the scan: ${r.stderr}`);
      assert.doesNotMatch(r.stdout, /listed/, 'it never finished the scan');
      assert.equal(r.signal, 'SIGTERM', 'killed by the timeout, blocked in the read');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
