/**
 * The storm guard (docs/design.md, "The storm guard and the blindness rule"): when many
 * leases go stale at once on several nodes that all look healthy, the likelier culprit
 * is this manager or the control plane, not the share managers. New failovers then pause until the window
 * passes without that pattern.
 *
 * Why by node: a node that has just crashed still looks healthy for its whole heartbeat
 * grace (40 s by default), and it takes every share it carried with it. Stale leases
 * concentrated on one holder node are that node's failure, however many shares it held.
 * A fault of this manager or of the control plane hits the leases of every node alike.
 *
 * The rule (pure: state in, state out; time is an argument):
 *  - A *suspect* is a lease judged stale within the last `windowMs` whose holder node
 *    looked healthy then, or whose holder node is not known at all (no
 *    `leasehold.dev/holder-node` and no known pod: nothing shows a node failure, so it
 *    is never explained by one and counts on its own). A stale lease on a node that looks
 *    down, or on a named node with no Node object (deleted), is an ordinary node failure
 *    and never a suspect.
 *  - The suspects are grouped by holder node. The *source* is the node with the most
 *    suspects (ties: the one carrying more tracked leases, then the first name): one node
 *    failure explains all of them, so they do not count.
 *  - Counted = suspects not on the source; population = tracked leases not on the source.
 *    Active iff counted >= `minLeases` AND counted > `threshold` x population.
 *  - So one node's shares, all stale, never activate it; stale leases spread over
 *    several healthy-looking nodes do.
 *  - Every decision stays per lease: the guard only pauses (all new failovers while
 *    active, the source node's too); it never fails a lease over.
 *
 * Not guaranteed: telling two nodes crashing together from a storm. A second node's
 * stale leases count; with the defaults (3 leases, 50 %) two small nodes failing in one
 * window still fail over, a larger simultaneous loss may pause until the heartbeats
 * show those nodes down (then they stop counting).
 */
export interface StormGuardConfig {
  threshold: number;
  minLeases: number;
  windowMs: number;
}

export interface Suspect {
  /** Last time it was judged stale with a healthy-looking (or unknown) node. */
  at: number;
  /** Its holder node; '' when unknown. */
  node: string;
}

export interface StormGuardState {
  /** Lease key -> the suspect. */
  readonly recent: ReadonlyMap<string, Suspect>;
}

/** The tracked leases: how many in all and how many per holder node. */
export interface Population {
  total: number;
  byNode: ReadonlyMap<string, number>;
}

export const emptyStormGuard: StormGuardState = { recent: new Map() };

export interface StormAssessment {
  active: boolean;
  /** Suspects counted (not on the source node). */
  suspects: number;
  /** The node whose failure explains the most suspects; '' when none. */
  source: string;
  /** Suspects on the source node (not counted). */
  explained: number;
  /** Distinct holder nodes among the counted suspects (an unknown node counts once per lease). */
  nodes: number;
}

export interface StormVerdict extends StormAssessment {
  state: StormGuardState;
  /** True when this failover may proceed now. */
  allow: boolean;
}

function prune(state: StormGuardState, now: number, windowMs: number): Map<string, Suspect> {
  const recent = new Map<string, Suspect>();
  for (const [key, s] of state.recent) if (now - s.at <= windowMs) recent.set(key, s);
  return recent;
}

export function assess(
  recent: ReadonlyMap<string, Suspect>,
  population: Population,
  config: StormGuardConfig,
): StormAssessment {
  const groups = new Map<string, number>();
  let unknown = 0;
  for (const s of recent.values()) {
    if (s.node === '') unknown += 1;
    else groups.set(s.node, (groups.get(s.node) ?? 0) + 1);
  }
  let source = '';
  let explained = 0;
  for (const [node, count] of [...groups].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const better =
      count > explained ||
      (count === explained && (population.byNode.get(node) ?? 0) > (population.byNode.get(source) ?? 0));
    if (better) {
      source = node;
      explained = count;
    }
  }
  const suspects = recent.size - explained;
  const base = Math.max(0, population.total - (source ? (population.byNode.get(source) ?? 0) : 0));
  const active = suspects >= config.minLeases && suspects > config.threshold * base;
  return { active, suspects, source, explained, nodes: groups.size - (source ? 1 : 0) + unknown };
}

/** Records one stale verdict and says whether its failover may start now. */
export function considerStale(
  state: StormGuardState,
  input: { key: string; node: string; nodeHealthy: boolean; now: number },
  population: Population,
  config: StormGuardConfig,
): StormVerdict {
  const recent = prune(state, input.now, config.windowMs);
  if (input.nodeHealthy) recent.set(input.key, { at: input.now, node: input.node });
  else recent.delete(input.key);
  const a = assess(recent, population, config);
  return { ...a, state: { recent }, allow: !a.active };
}

/** Whether the guard is active now (e.g. for the metric, or to re-judge paused leases). */
export function stormStatus(
  state: StormGuardState,
  population: Population,
  now: number,
  config: StormGuardConfig,
): StormAssessment & { state: StormGuardState } {
  const recent = prune(state, now, config.windowMs);
  return { ...assess(recent, population, config), state: { recent } };
}

/** A lease that renewed (or went away) no longer counts as a suspect. */
export function forgetLease(state: StormGuardState, key: string): StormGuardState {
  if (!state.recent.has(key)) return state;
  const recent = new Map(state.recent);
  recent.delete(key);
  return { recent };
}
