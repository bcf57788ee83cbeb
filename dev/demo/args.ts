/**
 * The demo's command line, parsed by a pure function (no I/O, no exit): `npm run demo
 * -- [--sim] [--nodes N] [--adc-sync DURATION]`.
 *   (default)  the demo on real nodes (dev/demo/real-demo.ts): real kubelets, the
 *              project's images, the chart by helm, a share on the shipped ganesha
 *              server and a libnfs client in a surviving node's network;
 *   --sim      the demo on the simulated nodes (dev/demo/sim-demo.ts), three of them;
 *   --nodes N  how many real nodes, 2 to 5 (default 2); not with --sim (always 3);
 *   --adc-sync kube-controller-manager's --attach-detach-reconcile-sync-period, like
 *              2s or 1m (default 1m, the Kubernetes default).
 * Guarantees: an accepted result is in range; a rejected one names the option and the
 * rule. Unknown options and positional arguments are rejected.
 */
import { parseArgs } from 'node:util';

export interface DemoArgs {
  mode: 'real' | 'sim';
  nodes: number;
  adcSync: string;
}

export const DEMO_USAGE =
  'usage: npm run demo -- [--sim] [--nodes 2-5] [--adc-sync DURATION (like 2s or 1m)]';

export function parseDemoArgs(argv: readonly string[]): DemoArgs | { problem: string } {
  let values: { sim?: boolean; nodes?: string; 'adc-sync'?: string };
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: { sim: { type: 'boolean' }, nodes: { type: 'string' }, 'adc-sync': { type: 'string' } },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    return { problem: err instanceof Error ? err.message : String(err) };
  }
  const mode = values.sim === true ? 'sim' : 'real';
  const adcSync = values['adc-sync'] ?? '1m';
  if (!/^[1-9]\d*(s|m)$/.test(adcSync))
    return { problem: `--adc-sync=${adcSync}: must be a whole number of seconds or minutes, like 2s or 1m` };
  if (mode === 'sim' && values.nodes !== undefined)
    return { problem: `--nodes=${values.nodes}: only for the real-node demo (the --sim demo runs 3 nodes)` };
  const nodes = values.nodes === undefined ? (mode === 'sim' ? 3 : 2) : Number(values.nodes);
  if (!Number.isInteger(nodes) || nodes < 2 || nodes > 5)
    return {
      problem: `--nodes=${values.nodes}: must be a whole number from 2 to 5 (the crash needs a surviving node)`,
    };
  return { mode, nodes, adcSync };
}
