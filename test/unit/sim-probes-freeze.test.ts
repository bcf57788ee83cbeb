import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProbeLoop, type ProbeVerdict } from '../../dev/sim/kubelet/probes.ts';
import { sleep } from '../../lib/clock.ts';

// A probe with no port to reach fails every time (resolvePort -> undefined).
const failing = { tcpSocket: { port: 1 }, periodSeconds: 0.02, failureThreshold: 2 };

test('a paused probe loop (frozen node) neither probes nor counts; resumed, it fails as before', async () => {
  const verdicts: ProbeVerdict[] = [];
  let probed = 0;
  const loop = new ProbeLoop(
    failing,
    () => {
      probed++;
      return undefined;
    },
    (v) => verdicts.push(v),
  );
  loop.pause();
  loop.start();
  await sleep(200);
  assert.deepEqual(verdicts, [], 'no verdict while paused');
  assert.equal(probed, 0, 'no probe ran while paused');
  loop.resume();
  await sleep(200);
  loop.stop();
  assert.deepEqual(verdicts, ['failure']);
});

test('an unpaused loop fails after failureThreshold (the check above can fail)', async () => {
  const verdicts: ProbeVerdict[] = [];
  const loop = new ProbeLoop(
    failing,
    () => undefined,
    (v) => verdicts.push(v),
  );
  loop.start();
  await sleep(200);
  loop.stop();
  assert.deepEqual(verdicts, ['failure']);
});
