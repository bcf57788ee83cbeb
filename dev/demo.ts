/**
 * `npm run demo [-- --sim] [-- --nodes N] [-- --adc-sync 1m]`: leasehold end to end on
 * this machine, a node crash and its failover, then everything torn down.
 * By default on real nodes (dev/demo/real-demo.ts: real kubelets running the project's
 * images, the chart by helm, the shipped ganesha server, a libnfs client); `--sim` runs
 * the older demo on the simulated nodes (dev/demo/sim-demo.ts). Options: dev/demo/args.ts.
 * Exit codes: 0 the failover happened and was safe, 1 it did not (or the demo failed),
 * 2 bad option.
 */
import { DEMO_USAGE, parseDemoArgs } from './demo/args.ts';

const args = parseDemoArgs(process.argv.slice(2));
if ('problem' in args) {
  process.stderr.write(`demo: ${args.problem}\n${DEMO_USAGE}\n`);
  process.exitCode = 2;
} else if (args.mode === 'sim') {
  const { runSimDemo } = await import('./demo/sim-demo.ts');
  process.exitCode = await runSimDemo(args.adcSync);
} else {
  const { runRealDemo } = await import('./demo/real-demo.ts');
  process.exitCode = await runRealDemo(args);
}
