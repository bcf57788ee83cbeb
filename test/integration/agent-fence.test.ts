/**
 * The agent's fence on real processes: SIGTERM, SIGKILL after the grace, targets
 * verified gone, within the fence timeout; a server that ignores SIGTERM or forks while
 * stopping; a fence run as another user without CAP_KILL (EPERM: reported, never a
 * pass); and the `pod` action inside a real PID namespace, where it stops every process
 * but the agent and PID 1.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { type FenceResult, runFence } from '../../agent/fence.ts';
import { isRunning, readProcess } from '../../agent/process-table.ts';
import { sleep, systemClock } from '../../lib/clock.ts';

const RUNNER = join(import.meta.dirname, '../support/fence-runner.ts');
const children: ChildProcess[] = [];
after(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** A process titled `name`; `onTerm`: exit, ignore SIGTERM, or ignore it and fork a twin. */
async function server(name: string, onTerm: 'exit' | 'ignore' | 'fork'): Promise<number> {
  const script = `
    process.title = ${JSON.stringify(name)};
    if (${JSON.stringify(onTerm)} !== 'exit') process.on('SIGTERM', () => {
      if (${JSON.stringify(onTerm)} === 'fork') require('node:child_process').spawn(process.execPath,
        ['-e', 'process.title = ${name}; process.on("SIGTERM", () => {}); setInterval(() => {}, 1000)'.replace('${name}', JSON.stringify(${JSON.stringify(name)}))],
        { stdio: 'ignore' });
    });
    setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['-e', script], { stdio: 'ignore' });
  children.push(child);
  const pid = child.pid ?? 0;
  for (let i = 0; i < 200 && readProcess(pid)?.comm !== name.slice(0, 15); i++) await sleep(10);
  assert.equal(readProcess(pid)?.comm, name.slice(0, 15), `${name} is up with its title`);
  return pid;
}

const unique = (what: string) => `lhf-${what}-${process.pid % 10000}`;
const timing = { graceMs: 400, timeoutMs: 1500 };

test('a server that stops on SIGTERM: stopped without SIGKILL, well inside the grace', async (t) => {
  const name = unique('term');
  const pid = await server(name, 'exit');
  const result = await runFence(
    { action: 'signal', process: name, signal: 'SIGTERM', ...timing },
    systemClock,
  );
  t.diagnostic(JSON.stringify(result));
  assert.equal(result.kind, 'stopped');
  assert.deepEqual((result as Extract<FenceResult, { kind: 'stopped' }>).killed, []);
  assert.ok((result as { durationMs: number }).durationMs < timing.graceMs);
  assert.equal(isRunning({ pid, startTime: 0 }), false);
});

test('a server that ignores SIGTERM: SIGKILLed at the grace, verified gone, inside the timeout', async (t) => {
  const name = unique('stubborn');
  const pid = await server(name, 'ignore');
  const result = await runFence(
    { action: 'signal', process: name, signal: 'SIGTERM', ...timing },
    systemClock,
  );
  t.diagnostic(JSON.stringify(result));
  assert.equal(result.kind, 'stopped');
  const stopped = result as Extract<FenceResult, { kind: 'stopped' }>;
  assert.deepEqual(stopped.killed, [pid]);
  assert.ok(stopped.durationMs >= timing.graceMs, `SIGKILL not before the grace (${stopped.durationMs} ms)`);
  assert.ok(stopped.durationMs < timing.timeoutMs, `within the fence timeout (${stopped.durationMs} ms)`);
  assert.ok(['gone', 'Z'].includes(readProcess(pid)?.state ?? 'gone'), 'exited (a zombie until reaped)');
});

test('a server that forks a twin while ignoring SIGTERM: the twin is found and SIGKILLed too', async (t) => {
  const name = unique('forker');
  const pid = await server(name, 'fork');
  const result = await runFence(
    { action: 'signal', process: name, signal: 'SIGTERM', ...timing },
    systemClock,
  );
  t.diagnostic(JSON.stringify(result));
  assert.equal(result.kind, 'stopped');
  const stopped = result as Extract<FenceResult, { kind: 'stopped' }>;
  assert.equal(stopped.pids.length, 2, 'the original and the twin born during the grace');
  assert.ok(stopped.killed.includes(pid));
  for (const p of stopped.pids)
    assert.ok(['gone', 'Z'].includes(readProcess(p)?.state ?? 'gone'), `${p} exited (a zombie until reaped)`);
});

test('a fence run as uid 65532 without CAP_KILL cannot stop a root server: incomplete with EPERM, never "stopped"', async (t) => {
  const name = unique('root');
  const pid = await server(name, 'exit');
  const config = { action: 'signal', process: name, signal: 'SIGTERM', graceMs: 200, timeoutMs: 600 };
  const run = spawnSync(
    'setpriv',
    [
      '--reuid=65532',
      '--regid=65532',
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      process.execPath,
      '--import',
      'tsx',
      RUNNER,
      JSON.stringify(config),
      '0',
    ],
    { encoding: 'utf8', cwd: join(import.meta.dirname, '../..'), timeout: 20_000 },
  );
  assert.equal(run.status, 0, run.stderr);
  const { result } = JSON.parse(run.stdout) as { result: FenceResult };
  t.diagnostic(JSON.stringify(result));
  assert.equal(result.kind, 'incomplete');
  const incomplete = result as Extract<FenceResult, { kind: 'incomplete' }>;
  assert.deepEqual(incomplete.remaining, [pid]);
  assert.ok(
    incomplete.refused.some((r) => r.includes('EPERM')),
    incomplete.refused.join(', '),
  );
  assert.ok(readProcess(pid), 'the root server still runs (what the agent must never report as fenced)');
});

test('pod action inside a real PID namespace: stops every process but the agent and PID 1', async (t) => {
  // PID 1 is a shell (the pod's pause stands in), two servers run beside the fence runner.
  const config = { action: 'pod', signal: 'SIGTERM', graceMs: 300, timeoutMs: 1200 };
  const term = 'setInterval(() => {}, 1000)';
  const stubborn = 'process.on("SIGTERM", () => {}); setInterval(() => {}, 1000)';
  const node = process.execPath;
  const script = [
    `${node} -e '${term}' &`,
    `${node} -e '${stubborn}' &`,
    `${node} --import tsx ${RUNNER} '${JSON.stringify(config)}' 2`,
  ].join('\n');
  const run = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', '--kill-child', 'sh', '-c', script], {
    encoding: 'utf8',
    cwd: join(import.meta.dirname, '../..'),
    timeout: 30_000,
  });
  assert.equal(run.status, 0, run.stderr);
  const { result, running } = JSON.parse(run.stdout) as { result: FenceResult; running: number[] };
  t.diagnostic(JSON.stringify(result));
  assert.equal(result.kind, 'stopped');
  const stopped = result as Extract<FenceResult, { kind: 'stopped' }>;
  assert.equal(stopped.pids.length, 2, 'both servers, not PID 1, not the runner');
  assert.equal(stopped.killed.length, 1, 'only the one ignoring SIGTERM needed SIGKILL');
  assert.deepEqual(running, [], 'nothing but PID 1 and the fence runner still runs');
});
