/**
 * A local cluster with simulated nodes, for poking at by hand:
 *
 *   bash dev/toolchain.sh --kube node --import tsx dev/sim/cli.ts [--nodes=3]
 *
 * starts the control plane and N nodes (sim-1..sim-N), prints the admin kubeconfig and
 * the simulator's directory (sim.log, pod logs, volumes), and runs until Ctrl-C or
 * SIGTERM. Then the control plane's exit hooks (dev/cluster/component.ts) kill its
 * components and exit at once, and every pod process dies with this process (each
 * sandbox is tied to it by a parent-death signal); the directories stay for reading.
 * Run `npm run build` first: pods run dist/ files.
 * Exit codes: 130/143 stopped by SIGINT/SIGTERM, 1 failed to start, 2 bad arguments.
 */
import { startCluster } from '../cluster/cluster.ts';
import { startSim } from './sim.ts';

function parseNodes(args: readonly string[]): number {
  let nodes = 3;
  for (const arg of args) {
    const match = /^--nodes=(\d+)$/.exec(arg);
    const n = Number(match?.[1]);
    if (!match || n < 1 || n > 20) {
      process.stderr.write(`sim: argument ${JSON.stringify(arg)}: expected --nodes=N with N from 1 to 20\n`);
      process.exit(2);
    }
    nodes = n;
  }
  return nodes;
}

async function main(): Promise<void> {
  const nodes = parseNodes(process.argv.slice(2));
  const say = (line: string) => process.stderr.write(`sim: ${line}\n`);
  say('starting the control plane ...');
  const cluster = await startCluster({ onProgress: (line) => say(`  ${line}`) });
  let sim: Awaited<ReturnType<typeof startSim>>;
  try {
    sim = await startSim({ cluster, nodes });
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  say(`nodes ${sim.nodes.map((n) => n.name).join(', ')} are up`);
  say(`export KUBECONFIG=${cluster.kubeconfigPath}`);
  say(`simulator files (sim.log, pods/<uid>/logs, volumes/<pv>) in ${sim.root}`);
  say('Ctrl-C stops everything (the directories stay)');
  // Keep the event loop alive; the signal hooks of dev/cluster end the process.
  setInterval(() => {}, 60_000);
}

main().catch((err: unknown) => {
  process.stderr.write(`sim: failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
