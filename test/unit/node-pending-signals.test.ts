/**
 * Pending signals from /proc/<pid>/status (dev/node/pending-signals.ts): the masks'
 * bits, thread and group; and on a real process of this test, stopped with SIGTERM
 * blocked so the signal stays pending.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test } from 'node:test';
import { SIGKILL, SIGTERM, signalPending, signalPendingIn } from '../../dev/node/pending-signals.ts';

const status = (sig: string, shd: string) =>
  `Name:\tganesha.nfsd\nSigPnd:\t${sig}\nShdPnd:\t${shd}\nSigBlk:\t0000000000000000\n`;

test('bit signo - 1 of SigPnd or ShdPnd; nothing pending is false', () => {
  assert.equal(signalPendingIn(status('0000000000000100', '0000000000000000'), SIGKILL), true);
  assert.equal(signalPendingIn(status('0000000000000000', '0000000000000100'), SIGKILL), true, 'the group');
  assert.equal(signalPendingIn(status('0000000000004000', '0000000000000000'), SIGTERM), true);
  assert.equal(signalPendingIn(status('0000000000004000', '0000000000000000'), SIGKILL), false);
  assert.equal(signalPendingIn(status('0000000000000000', '0000000000000000'), SIGTERM), false);
});

test('a real stopped process: SIGTERM pending while it is stopped, gone afterwards is undefined', async () => {
  const child = spawn('sleep', ['30'], { stdio: 'ignore' });
  const pid = child.pid ?? 0;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  process.kill(pid, 'SIGSTOP');
  for (let i = 0; i < 100 && signalPending(pid, SIGTERM) !== false; i++)
    await new Promise((r) => setTimeout(r, 10));
  assert.equal(signalPending(pid, SIGTERM), false, 'nothing pending yet');
  process.kill(pid, 'SIGTERM'); // a stopped process keeps it pending until SIGCONT
  assert.equal(signalPending(pid, SIGTERM), true);
  process.kill(pid, 'SIGKILL');
  await exited;
  assert.equal(signalPending(pid, SIGTERM), undefined, 'reaped: gone');
});
