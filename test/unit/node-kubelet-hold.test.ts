/**
 * dev/node/kubelet-hold.ts: the /proc stat parse and the kubelet pick (pure), and the
 * hold itself on a real process (a `sleep` child): SIGSTOPped, seen in state T, and a
 * gone pid refused with an error naming it.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { holdProcess, kubeletOf, parseProcStat, readProcStat } from '../../dev/node/kubelet-hold.ts';

test('parseProcStat: comm with spaces and parentheses, the state after the last )', () => {
  assert.deepEqual(parseProcStat(7, '7 (kube let) S 1 7 7 0 -1'), {
    pid: 7,
    comm: 'kube let',
    state: 'S',
    ppid: 1,
  });
  assert.deepEqual(parseProcStat(8, '8 (a) b)) T 1 8'), { pid: 8, comm: 'a) b)', state: 'T', ppid: 1 });
  assert.equal(parseProcStat(9, 'garbage'), undefined);
});

test('kubeletOf: the one process named kubelet; none is undefined, two an error', () => {
  const p = (pid: number, comm: string) => ({ pid, comm, state: 'S', ppid: 1 });
  assert.equal(kubeletOf([p(1, 'containerd'), p(2, 'kubelet'), p(3, 'kube-proxy')])?.pid, 2);
  assert.equal(kubeletOf([p(1, 'containerd')]), undefined);
  assert.throws(() => kubeletOf([p(2, 'kubelet'), p(5, 'kubelet')]), /two kubelet processes.*2, 5/);
});

test('holdProcess: a real process is stopped (state T) when it returns; a gone pid is an error naming it', async () => {
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  const pid = child.pid ?? 0;
  assert.ok(pid > 0);
  try {
    assert.notEqual(readProcStat(pid)?.state, 'T');
    assert.equal(readProcStat(pid)?.ppid, process.pid, 'its parent, which node.ts continues after a kill');
    await holdProcess(pid);
    assert.equal(readProcStat(pid)?.state, 'T');
  } finally {
    child.kill('SIGKILL'); // SIGKILL ends a stopped process too
    await once(child, 'exit');
  }
  await assert.rejects(holdProcess(pid, 200), /pid \d+/);
});
