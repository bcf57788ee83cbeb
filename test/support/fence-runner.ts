/**
 * Test harness (not a test file): runs the agent's real fence (agent/fence.ts) in this
 * process, as a test places it — as another user, or inside a PID namespace — and
 * prints the result as one JSON line.
 *
 *   node --import tsx test/support/fence-runner.ts '<FenceConfig JSON>' <wait-for-targets>
 * waits (up to 5 s) until at least <wait-for-targets> processes other than itself, its
 * children and PID 1 are visible, so the targets are running before the fence starts.
 * Prints `{ result, running }`: `running` = the PIDs other than itself, its children and
 * PID 1 that still run (not zombies) after the fence.
 */
import { runFence } from '../../agent/fence.ts';
import { fenceTargets } from '../../agent/fence-targets.ts';
import { listProcesses } from '../../agent/process-table.ts';
import { sleep, systemClock } from '../../lib/clock.ts';

const config = JSON.parse(process.argv[2] ?? '{}');
const want = Number(process.argv[3] ?? '0');
const deadline = performance.now() + 5_000;
while (
  fenceTargets({ action: 'pod' }, listProcesses(), process.pid).length < want &&
  performance.now() < deadline
)
  await sleep(20);
const result = await runFence(config, systemClock);
const running = fenceTargets({ action: 'pod' }, listProcesses(), process.pid)
  .filter((p) => p.state !== 'Z' && p.state !== 'X')
  .map((p) => p.pid);
process.stdout.write(`${JSON.stringify({ result, running })}\n`);
