/**
 * Witness promises: what an agent may serve on while the API server cannot be reached,
 * and what a replacement must collect before it serves. Pure; shared by the agent (which
 * asks for promises and clearances) and the manager (which, as a witness, gives them).
 * The argument is in docs/design.md, "Serving through an API outage".
 *
 * - A *promise* for (lease, holder), given by a witness at its time g: "until g + P +
 *   margin on my clock, I clear no replacement of this holder". The holder counts it from
 *   the time it SENT the request (s ≤ g), for P only: its serving deadline is the q-th
 *   latest such end among distinct witnesses, or its API proof + T, whichever is later.
 * - A *clearance* for (lease, previous holder), asked by the replacement after its
 *   acquisition committed: "I hold no promise for that holder any more, and give none from
 *   now on". The replacement's server starts only with clearances from q distinct
 *   witnesses of the set the previous holder counted its promises against.
 *
 * Invariant: a promise quorum and a clearance quorum of one set intersect, so the holder
 * has fenced (its promise ran out P after its send, its fence within the fence timeout <
 * margin) before the replacement's last needed clearance is given.
 *
 * Not guaranteed: liveness when fewer than q witnesses of the set answer (a replacement
 * then waits: for the cap, if one is set, else for the witnesses).
 */

/** The smallest majority of n witnesses. */
export function quorumOf(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** A promise as the holder records it: when it sent the request, and for how long. */
export interface HeldPromise {
  witness: string;
  sentAtMs: number;
  validForMs: number;
}

/**
 * The holder's serving deadline (its monotonic clock): the later of its API proof + T
 * and the end of the q-th latest promise among distinct witnesses (a promise counts from
 * its request's send, never from its answer). `undefined` API proof: never renewed.
 */
export function servingDeadlineMs(input: {
  apiProofSentAtMs: number | undefined;
  renewDeadlineMs: number;
  promises: readonly HeldPromise[];
  witnesses: readonly string[];
}): number {
  const byApi =
    input.apiProofSentAtMs === undefined
      ? Number.NEGATIVE_INFINITY
      : input.apiProofSentAtMs + input.renewDeadlineMs;
  return Math.max(byApi, promiseQuorumEndMs(input.promises, input.witnesses));
}

/** The end of the q-th latest promise of distinct witnesses of the set; -∞ without q. */
export function promiseQuorumEndMs(promises: readonly HeldPromise[], witnesses: readonly string[]): number {
  const members = new Set(witnesses);
  const latest = new Map<string, number>();
  for (const p of promises) {
    if (!members.has(p.witness)) continue;
    const end = p.sentAtMs + p.validForMs;
    latest.set(p.witness, Math.max(latest.get(p.witness) ?? Number.NEGATIVE_INFINITY, end));
  }
  const q = quorumOf(members.size);
  const ends = [...latest.values()].sort((a, b) => b - a);
  return ends.length >= q ? (ends[q - 1] as number) : Number.NEGATIVE_INFINITY;
}

/** Whether clearances from distinct members of the set make a quorum. */
export function clearanceQuorum(clearedBy: ReadonlySet<string>, witnesses: readonly string[]): boolean {
  const members = new Set(witnesses);
  let count = 0;
  for (const w of clearedBy) if (members.has(w)) count += 1;
  return members.size > 0 && count >= quorumOf(members.size);
}

/** A witness as agents reach it: its name (its node) and its manager's base URL. */
export interface WitnessEndpoint {
  name: string;
  url: string;
}

const WITNESS_NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
const WITNESS_URL = /^http:\/\/[^\s/?#]+:\d{1,5}$/;

/**
 * `LEASEHOLD_WITNESSES`: `name=http://host:port,...`, empty for none. At least 3 (a
 * majority must survive the loss of one), names unique. Returns the endpoints or the
 * problem, naming the entry and the rule.
 */
export function parseWitnesses(text: string | undefined): WitnessEndpoint[] | string {
  const entries = (text ?? '')
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  const endpoints: WitnessEndpoint[] = [];
  for (const entry of entries) {
    const at = entry.indexOf('=');
    const name = entry.slice(0, at);
    const url = entry.slice(at + 1).replace(/\/$/, '');
    if (at <= 0 || !WITNESS_NAME.test(name) || name.length > 253)
      return `entry ${JSON.stringify(entry)} must be name=http://host:port with a node name before "="`;
    if (!WITNESS_URL.test(url))
      return `entry ${JSON.stringify(entry)}: the URL must be http://host:port (no path)`;
    if (endpoints.some((e) => e.name === name)) return `witness ${name} is named twice`;
    endpoints.push({ name, url });
  }
  if (endpoints.length > 0 && endpoints.length < 3)
    return `${endpoints.length} witness(es): at least 3 are needed (a majority must remain when one is lost), or none`;
  return endpoints;
}

export function formatWitnesses(endpoints: readonly WitnessEndpoint[]): string {
  return endpoints.map((e) => `${e.name}=${e.url}`).join(',');
}

/** A node as the witness directory needs it: its name and its addresses (Node status). */
export interface WitnessNode {
  name: string;
  addresses: ReadonlyArray<{ type: string; address: string }>;
}

/**
 * The witness set from node names (`LEASEHOLD_WITNESS_NODES`): each node's manager at
 * `http://<InternalIP>:<port>` (the chart publishes the manager's HTTP port on the node,
 * hostPort). All or nothing: a node not known or without an InternalIP gives no set
 * (`missing` names them), since a smaller set would be a different quorum.
 */
export function witnessesOnNodes(
  names: readonly string[],
  nodes: ReadonlyMap<string, WitnessNode>,
  port: number,
): { endpoints: WitnessEndpoint[] } | { missing: string[] } {
  const endpoints: WitnessEndpoint[] = [];
  const missing: string[] = [];
  for (const name of names) {
    const ip = nodes.get(name)?.addresses.find((a) => a.type === 'InternalIP')?.address;
    if (ip === undefined || ip === '') missing.push(name);
    else endpoints.push({ name, url: `http://${ip.includes(':') ? `[${ip}]` : ip}:${port}` });
  }
  return missing.length > 0 ? { missing } : { endpoints };
}
