/**
 * npm run cluster -- up     start a local control plane, print its kubeconfig path and
 *                           stay up until `npm run cluster -- down` or Ctrl-C
 * npm run cluster -- down   stop the cluster started by `up`
 *
 * The running cluster is recorded in .leasehold/cluster.json (pid, kubeconfig, dir).
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from '../../lib/clock.ts';
import { startCluster } from './cluster.ts';

const stateFile = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '.leasehold', 'cluster.json');

interface State {
  pid: number;
  kubeconfig: string;
  dir: string;
  server: string;
}

function readState(): State | undefined {
  if (!existsSync(stateFile)) return undefined;
  const state = JSON.parse(readFileSync(stateFile, 'utf8')) as State;
  return alive(state.pid) ? state : undefined;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function up(): Promise<number> {
  const existing = readState();
  if (existing) {
    console.error(
      `leasehold: a cluster is already up (pid ${existing.pid}, kubeconfig ${existing.kubeconfig}); run 'npm run cluster -- down' first`,
    );
    return 1;
  }
  console.error('leasehold: starting the local control plane ...');
  const cluster = await startCluster({ onProgress: (line) => console.error(`leasehold:   ${line}`) });
  mkdirSync(dirname(stateFile), { recursive: true });
  const state: State = {
    pid: process.pid,
    kubeconfig: cluster.kubeconfigPath,
    dir: cluster.dir,
    server: cluster.server,
  };
  writeFileSync(stateFile, `${JSON.stringify(state, null, 2)}\n`);
  // Runs on every way out, Ctrl-C included (the cluster removes its own temp dir).
  process.on('exit', () => rmSync(stateFile, { force: true }));
  console.log(cluster.kubeconfigPath);
  console.error(`leasehold: cluster up at ${cluster.server}; logs in ${cluster.logDir}`);
  console.error(
    `leasehold: try: ${cluster.kubectl} --kubeconfig ${cluster.kubeconfigPath} get --raw /readyz`,
  );
  console.error("leasehold: stop with 'npm run cluster -- down' or Ctrl-C");
  await new Promise<void>((resolve) => {
    // NB: a signal listener alone does not keep Node running; the interval does.
    const keepAlive = setInterval(() => {}, 60_000);
    process.once('SIGUSR2', () => {
      clearInterval(keepAlive);
      resolve();
    });
  });
  await cluster.stop();
  return 0;
}

async function down(): Promise<number> {
  const state = readState();
  if (!state) {
    rmSync(stateFile, { force: true });
    console.error('leasehold: no cluster is up; nothing to stop');
    return 0;
  }
  // SIGUSR2 asks `up` for a graceful stop (SIGTERM would also work, abruptly).
  process.kill(state.pid, 'SIGUSR2');
  const deadline = performance.now() + 30_000;
  while (alive(state.pid) && performance.now() < deadline) await sleep(100);
  if (alive(state.pid)) {
    process.kill(state.pid, 'SIGTERM');
    await sleep(1_000);
  }
  console.error(`leasehold: cluster at ${state.server} stopped`);
  return 0;
}

const command = process.argv[2];
const commands: Record<string, () => Promise<number>> = { up, down };
const chosen = command === undefined ? undefined : commands[command];
if (!chosen) {
  console.error(
    `leasehold: unknown cluster command '${command ?? ''}': use 'up' or 'down' (npm run cluster -- up)`,
  );
  process.exit(2);
}
chosen().then(
  (code) => process.exit(code),
  (err: Error) => {
    console.error(`leasehold: ${err.message}`);
    process.exit(1);
  },
);
