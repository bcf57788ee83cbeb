/**
 * `npm run bench -- <name> [args]`: runs a benchmark by name, each in its own Node
 * process (the same toolchain: tsx, the control-plane binaries on PATH):
 *   failover        bench/failover/run.ts       node crashes on real nodes, from the NFS client's side: leasehold
 *                   and, with --modes, its other settings and stock Kubernetes
 *   kernel-client   bench/kernel-client/run.ts  node crashes on real nodes as Linux 6.1 and 6.12 NFS clients see them
 *   agent           bench/agent/run.ts          one agent's memory, CPU, requests per renewal
 *   manager-scale   bench/manager-scale/run.ts  manager CPU/RSS and detection lag at N leases
 *   witness-cost    bench/witness-cost/run.ts   witness promises' requests, bytes and manager CPU at N shares
 *   provisioning    bench/provisioning/run.ts   N claims of the StorageClass at once: time to Bound, manager CPU/RSS, requests per claim
 *   share-resources bench/share-resources/run.ts the share pod's server and agent memory and CPU under a kernel client's writes
 *   api-outage      bench/api-outage/run.ts     the API server down on real nodes: when a kernel client reaches the replacement
 *   all             each of the above in turn (args go to every one)
 * Exit codes: the benchmark's own; 2 for an unknown name; with `all`, the first failure's.
 * NB: `failover --real-nodes` (the benchmark's name when a simulated one existed, in the
 * commands of older result files) is the same run: the flag is dropped.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const BENCHMARKS = {
  failover: 'failover/run.ts',
  'kernel-client': 'kernel-client/run.ts',
  agent: 'agent/run.ts',
  'manager-scale': 'manager-scale/run.ts',
  'witness-cost': 'witness-cost/run.ts',
  provisioning: 'provisioning/run.ts',
  'share-resources': 'share-resources/run.ts',
  'api-outage': 'api-outage/run.ts',
} as const;
type Name = keyof typeof BENCHMARKS;

function runOne(name: Name, args: string[]): number {
  const script = join(here, BENCHMARKS[name]);
  if (name === 'failover') args = args.filter((a) => a !== '--real-nodes');
  if (!existsSync(script)) {
    process.stderr.write(`bench: ${name}: ${script} does not exist (not written yet)\n`);
    return 1;
  }
  process.stdout.write(`\n== bench ${name} ==\n`);
  const child = spawnSync(process.execPath, ['--import', 'tsx', script, ...args], { stdio: 'inherit' });
  return child.status ?? 1;
}

const [name, ...args] = process.argv.slice(2);
const names = Object.keys(BENCHMARKS) as Name[];
if (name === 'all') {
  let code = 0;
  for (const n of names) {
    const c = runOne(n, args);
    if (c !== 0 && code === 0) code = c;
  }
  process.exitCode = code;
} else if (name !== undefined && (names as string[]).includes(name)) {
  process.exitCode = runOne(name as Name, args);
} else {
  process.stderr.write(
    `bench: unknown benchmark ${JSON.stringify(name ?? '')}: expected one of ${[...names, 'all'].join(', ')}\n` +
      `usage: npm run bench -- <${[...names, 'all'].join('|')}> [args]\n`,
  );
  process.exitCode = 2;
}
