/**
 * `kubectl-leasehold`, the kubectl plugin (`kubectl leasehold status | timeline SHARE |
 * why SHARE`): wiring only. Parses the command line (plugin-args.ts), loads the user's
 * kubeconfig (kube-target.ts), runs the command (commands.ts) and prints its lines.
 *
 * Exit codes: 0 the command answered (`why` exits 0 for a share served or not: the
 * answer is the text); 1 the cluster could not answer, or has no such share; 2 bad
 * usage, kubeconfig or context. Every failure is one line on stderr naming the input or
 * the API server and the rule (plugin-error.ts).
 */

import { ClusterReader } from './cluster-reads.ts';
import { runCommand } from './commands.ts';
import { type KubeTarget, loadKubeTarget } from './kube-target.ts';
import { parseArgs, USAGE } from './plugin-args.ts';
import { explainFailure } from './plugin-error.ts';

async function main(argv: readonly string[]): Promise<number> {
  const parsed = parseArgs(argv);
  if (!parsed.ok) {
    process.stderr.write(`kubectl leasehold: ${parsed.message}\nRun 'kubectl leasehold --help' for usage.\n`);
    return 2;
  }
  const { args } = parsed;
  if (args.command === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  let target: KubeTarget | undefined;
  try {
    target = loadKubeTarget(args);
    const lines = await runCommand(
      { command: args.command, share: args.share, namespace: args.namespace },
      new ClusterReader(target.kc),
      new Date(),
    );
    process.stdout.write(`${lines.join('\n')}\n`);
    return 0;
  } catch (err) {
    const failure = explainFailure(err, target);
    process.stderr.write(`kubectl leasehold: ${failure.message}\n`);
    return failure.exitCode;
  }
}

// NB: exit explicitly: client-node's keep-alive connections would hold the process open.
main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(
      `kubectl leasehold: unexpected failure: ${err instanceof Error ? err.stack : String(err)}\n`,
    );
    process.exit(1);
  },
);
