/**
 * `npm run bench -- failover [--runs N] [--nodes N] [--adc-sync D]
 * [--node-monitor-grace D] [--budget S] [--settle S] [--modes M,...] [--stock-budget S]`,
 * parsed by a pure function (no I/O, no exit).
 * Defaults: 5 crashes (each healed: the node reboots before the next), 2 nodes,
 * Kubernetes' defaults (ADC sync 1m, node-monitor grace 40s), a budget of 150 s per
 * crash (crash to the client's resumed writes), no settling after each reboot's manager
 * has run again (real-node-runs.ts waits for its restarted container; `--settle S` adds
 * S seconds), the `leasehold` mode only; `--modes` names the modes to run, in order, on
 * the same system: the managed modes (modes.ts: `leasehold-va`, `longhorn`,
 * `leasehold-oos`, `leasehold-witnesses`; each put on the chart by real-mode-switch.ts)
 * and `stock` (real-stock-runs.ts), each stock crash capped at `--stock-budget`
 * (default 600 s, at least 60).
 * Guarantees: accepted values are in range; a rejected one names the option and the
 * rule; an unknown option is rejected, not ignored (e.g. a node heartbeat: the real
 * kubelet's is its own default, 10 s).
 */
import { parseArgs } from 'node:util';
import { MANAGED_MODES } from './modes.ts';

export interface RealNodeBenchArgs {
  runs: number;
  nodes: number;
  adcSync: string;
  nodeMonitorGracePeriod: string;
  budgetS: number;
  /** Seconds to wait after a reboot's manager is Ready before the next crash. */
  settleS: number;
  /** The modes, in the order they run on the one system. */
  modes: RealNodeMode[];
  /** Per stock crash: crash to the client's resumed writes, or capped. */
  stockBudgetS: number;
}

export const REAL_NODE_MODES = [...MANAGED_MODES, 'stock'] as const;
export type RealNodeMode = (typeof REAL_NODE_MODES)[number];

export const REAL_NODE_BENCH_USAGE =
  'usage: npm run bench -- failover [--runs 1-50 (default 5)] [--nodes 2-5 (default 2)] [--adc-sync DURATION (default 1m)] [--node-monitor-grace DURATION (default 40s)] [--budget SECONDS (per crash, default 150)] [--settle SECONDS (after a reboot, default 0)] [--modes leasehold,leasehold-va,longhorn,leasehold-oos,leasehold-witnesses,stock (any of them, in the order to run; default leasehold; leasehold-witnesses needs --nodes 3 or more)] [--stock-budget SECONDS (per stock crash, default 600)]';

const DURATION = /^[1-9]\d*(s|m)$/;

export function parseRealNodeBenchArgs(argv: readonly string[]): RealNodeBenchArgs | { problem: string } {
  let values: Record<string, string | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        runs: { type: 'string', default: '5' },
        nodes: { type: 'string', default: '2' },
        'adc-sync': { type: 'string', default: '1m' },
        'node-monitor-grace': { type: 'string', default: '40s' },
        budget: { type: 'string', default: '150' },
        settle: { type: 'string', default: '0' },
        modes: { type: 'string', default: 'leasehold' },
        'stock-budget': { type: 'string', default: '600' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    return { problem: err instanceof Error ? err.message : String(err) };
  }
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1 || runs > 50)
    return { problem: `--runs=${values.runs}: must be a whole number from 1 to 50` };
  const nodes = Number(values.nodes);
  if (!Number.isInteger(nodes) || nodes < 2 || nodes > 5)
    return {
      problem: `--nodes=${values.nodes}: must be a whole number from 2 to 5 (a crash needs a surviving node)`,
    };
  const adcSync = values['adc-sync'] ?? '';
  if (!DURATION.test(adcSync)) return { problem: `--adc-sync=${adcSync}: must be like 2s or 1m` };
  const grace = values['node-monitor-grace'] ?? '';
  if (!DURATION.test(grace)) return { problem: `--node-monitor-grace=${grace}: must be like 8s or 40s` };
  const budgetS = Number(values.budget);
  if (!Number.isFinite(budgetS) || budgetS < 10)
    return { problem: `--budget=${values.budget}: must be a number of seconds >= 10` };
  const settleS = Number(values.settle);
  if (!Number.isFinite(settleS) || settleS < 0 || settleS > 600)
    return { problem: `--settle=${values.settle}: must be a number of seconds from 0 to 600` };
  const modes = (values.modes ?? '').split(',');
  const unknown = modes.find((m) => !(REAL_NODE_MODES as readonly string[]).includes(m));
  if (unknown !== undefined)
    return {
      problem: `--modes=${values.modes}: ${JSON.stringify(unknown)} is not a real-node mode (${REAL_NODE_MODES.join(', ')}; comma-separated)`,
    };
  if (new Set(modes).size !== modes.length)
    return { problem: `--modes=${values.modes}: a mode may be named once` };
  if (modes.includes('leasehold-witnesses') && nodes < 3)
    return {
      problem: `--modes=${values.modes} with --nodes=${nodes}: leasehold-witnesses needs --nodes 3 or more (a witness set of at least 3)`,
    };
  const stockBudgetS = Number(values['stock-budget']);
  if (!Number.isFinite(stockBudgetS) || stockBudgetS < 60)
    return { problem: `--stock-budget=${values['stock-budget']}: must be a number of seconds >= 60` };
  return {
    runs,
    nodes,
    adcSync,
    nodeMonitorGracePeriod: grace,
    budgetS,
    settleS,
    modes: modes as RealNodeMode[],
    stockBudgetS,
  };
}
