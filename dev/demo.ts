/**
 * `npm run demo [-- --nodes N] [-- --adc-sync 1m] [-- --kernels K1,K2]`: leasehold end to
 * end on this machine on real nodes (dev/demo/real-demo.ts: real kubelets running the
 * project's images, the chart by helm, the shipped ganesha server, kernel NFS clients),
 * a node crash and its failover, then everything torn down. Options: dev/demo/args.ts.
 * Exit codes: 0 the failover happened and was safe, 1 it did not (or the demo failed),
 * 2 bad option.
 */
import { DEMO_USAGE, parseDemoArgs } from './demo/args.ts';

const args = parseDemoArgs(process.argv.slice(2));
if ('problem' in args) {
  process.stderr.write(`demo: ${args.problem}\n${DEMO_USAGE}\n`);
  process.exitCode = 2;
} else {
  const { runRealDemo } = await import('./demo/real-demo.ts');
  process.exitCode = await runRealDemo(args);
}
