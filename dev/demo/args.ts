/**
 * The demo's command line, parsed by a pure function (no I/O, no exit): `npm run demo
 * -- [--nodes N] [--adc-sync DURATION] [--kernels K1,K2]`, for the demo on real nodes
 * (dev/demo/real-demo.ts: real kubelets, the project's images, the chart by helm, a
 * share on the shipped ganesha server and two Linux kernel NFS clients (User-Mode
 * Linux) behind a surviving node's kube-proxy):
 *   --nodes N  how many real nodes, 2 to 5 (default 2);
 *   --adc-sync kube-controller-manager's --attach-detach-reconcile-sync-period, like
 *              2s or 1m (default 1m, the Kubernetes default);
 *   --kernels  the two kernel NFS clients' kernels, each 6.1 or 6.12 (default 6.1,6.12;
 *              6.12 is built from Debian's source on first use, about 4 minutes).
 * Guarantees: an accepted result is in range; a rejected one names the option and the
 * rule. Unknown options and positional arguments are rejected.
 */
import { parseArgs } from 'node:util';
import { KERNELS, type KernelName } from '../kernel-client/kernels.ts';

export interface DemoArgs {
  nodes: number;
  adcSync: string;
  /** The real demo's two kernel NFS clients' kernels. */
  kernels: [KernelName, KernelName];
}

export const DEMO_USAGE =
  'usage: npm run demo -- [--nodes 2-5] [--adc-sync DURATION (like 2s or 1m)] [--kernels 6.1|6.12,6.1|6.12]';

export function parseDemoArgs(argv: readonly string[]): DemoArgs | { problem: string } {
  let values: { nodes?: string; 'adc-sync'?: string; kernels?: string };
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        nodes: { type: 'string' },
        'adc-sync': { type: 'string' },
        kernels: { type: 'string' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    return { problem: err instanceof Error ? err.message : String(err) };
  }
  const adcSync = values['adc-sync'] ?? '1m';
  if (!/^[1-9]\d*(s|m)$/.test(adcSync))
    return { problem: `--adc-sync=${adcSync}: must be a whole number of seconds or minutes, like 2s or 1m` };
  const nodes = values.nodes === undefined ? 2 : Number(values.nodes);
  if (!Number.isInteger(nodes) || nodes < 2 || nodes > 5)
    return {
      problem: `--nodes=${values.nodes}: must be a whole number from 2 to 5 (the crash needs a surviving node)`,
    };
  const kernels = (values.kernels ?? '6.1,6.12').split(',');
  if (kernels.length !== 2 || !kernels.every((k) => (KERNELS as readonly string[]).includes(k)))
    return {
      problem: `--kernels=${values.kernels}: must be two of ${KERNELS.join(', ')}, comma-separated, like 6.1,6.12`,
    };
  return { nodes, adcSync, kernels: kernels as [KernelName, KernelName] };
}
