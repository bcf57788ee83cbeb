/**
 * The node network of one cluster's real nodes (the "fabric"), like kind's docker
 * network: a network namespace of its own holding a bridge, and per node a veth pair,
 * one end a port of that bridge, the other the node's `eth0` with its node IP and the
 * routes to the other nodes' pod ranges (the plan is fabric-plan.ts). Nothing of it is
 * in the host's namespace.
 *
 * The namespace is made by `unshare --net` and held by its one process, the holder
 * (the pause binary: it sleeps until a signal), started as a Component
 * (dev/cluster/component.ts: `setpriv --pdeathsig KILL`), so it ends with the test
 * process even by SIGKILL, and with it the namespace, the bridge and every port (the
 * kernel frees a namespace no process or fd holds; freeing it deletes its links, and a
 * veth's deletion deletes its peer). The nodes of one cluster share one fabric
 * (`sharedFabric`, keyed by the cluster's dir): the first node starts it, the last
 * one's stop stops it.
 *
 * Guarantees: attach() resolves when the node's `eth0` is up with its address and
 * routes; detach() removes the node's port at once (its `eth0` goes with it: the node
 * can send nothing, and gets nothing: peers' frames to its MAC are flooded and
 * unanswered; a peer whose ARP entry for it is fresh sees its packets dropped, one
 * whose entry is not sees EHOSTUNREACH after ARP fails, about 3 s; no RST, no ICMP from
 * the node). stop() kills the holder and runs the leftover check (leftovers.ts
 * findFabricLeftovers): it throws FabricLeftoverError naming what is left. The
 * namespace's id is held (an fd) from start until that check is done, so the check
 * cannot take a stranger's namespace for the fabric's.
 * Not guaranteed: any traffic control (no delay, loss or bandwidth limits); a node to
 * node partition (the faults cut a node off the API server or off everything).
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LeaseholdError } from '../../lib/errors.ts';
import { Component } from '../cluster/component.ts';
import {
  FABRIC_BRIDGE,
  fabricAttachBatch,
  fabricPortOf,
  fabricSetupScript,
  nodeAttachBatch,
} from './fabric-plan.ts';
import {
  describeLeftovers,
  type FabricIdentity,
  findFabricLeftovers,
  holdNamespaces,
  hostProcesses,
  type Leftover,
  type NamespaceHold,
} from './leftovers.ts';

export interface Fabric {
  /** `/proc/<holder pid>/ns/net`: the fabric's network namespace. */
  readonly netnsPath: string;
  /**
   * Puts node `index` on the fabric: its veth pair, the node's end moved into
   * `nodeNetns` as `eth0` with the node IP, up, its default route and the other pod
   * ranges' routes. Fails (E_NODE_FABRIC) when the index's port is taken.
   */
  attach(index: number, nodeNetns: string): Promise<void>;
  /** Takes node `index` off the fabric (its port deleted, its `eth0` with it). Idempotent. */
  detach(index: number): Promise<void>;
  /** What stop's check would find now (without the ports on the bridge, which only stop reads). */
  leftovers(): Leftover[];
  /** Kills the holder, then throws FabricLeftoverError if anything is left. Idempotent. */
  stop(): Promise<void>;
}

export class FabricLeftoverError extends LeaseholdError {
  readonly leftovers: readonly Leftover[];
  constructor(owner: string, leftovers: readonly Leftover[]) {
    super('E_NODE_FABRIC_LEFTOVERS', describeLeftovers(owner, leftovers));
    this.leftovers = leftovers;
  }
}

export interface FabricOptions {
  /** The holder's log file (the setup script's output). */
  logPath: string;
  /** What the holder execs once the namespace is set up: it must sleep until SIGTERM (dev/node's pause). */
  holder: readonly string[];
  /** Names the fabric in errors, e.g. the cluster's dir. */
  owner: string;
}

export async function startFabric(opts: FabricOptions): Promise<Fabric> {
  const what = `the fabric of ${opts.owner}`;
  const holder = new Component(
    'node-fabric',
    'unshare',
    ['--net', '--', 'sh', '-c', fabricSetupScript(opts.holder)],
    opts.logPath,
  );
  const logged = (() => {
    try {
      return readFileSync(opts.logPath, 'utf8').length;
    } catch {
      return 0;
    }
  })();
  holder.start();
  const pid = holder.pid;
  let hold: NamespaceHold | undefined;
  const identity: FabricIdentity = {
    get namespaces() {
      return hold?.ids ?? [];
    },
    pids: pid ? [pid] : [],
  };
  try {
    await holder.waitReady(
      async () => readFileSync(opts.logPath, 'utf8').slice(logged).includes('fabric: ready'),
      10_000,
    );
    hold = holdNamespaces(pid as number, ['net']);
  } catch (err) {
    await holder.stop(1_000);
    throw err;
  }
  const netnsPath = `/proc/${pid}/ns/net`;

  let stopped = false;
  const snapshot = (ports: readonly string[]) => ({
    processes: hostProcesses(),
    mountinfo: readFileSync('/proc/self/mountinfo', 'utf8'),
    ports,
  });
  return {
    netnsPath,
    async attach(index, nodeNetns) {
      if (stopped)
        throw new LeaseholdError('E_NODE_FABRIC', `${what} is stopped: node ${index} cannot attach`);
      try {
        await ipBatch(netnsPath, fabricAttachBatch(index, nodeNetns));
      } catch (err) {
        const taken = err instanceof Error && /File exists/.test(err.message);
        throw new LeaseholdError(
          'E_NODE_FABRIC',
          taken
            ? `node index ${index} is taken on ${what}: another node of this cluster has it (give each node its own index)`
            : `attaching node ${index} to ${what}`,
          { cause: err },
        );
      }
      try {
        await ipBatch(nodeNetns, nodeAttachBatch(index));
      } catch (err) {
        throw new LeaseholdError('E_NODE_FABRIC', `configuring node ${index}'s eth0 on ${what}`, {
          cause: err,
        });
      }
    },
    async detach(index) {
      if (stopped) return;
      try {
        await ipBatch(netnsPath, [`link del ${fabricPortOf(index)}`]);
      } catch (err) {
        if (err instanceof Error && /Cannot find device/.test(err.message)) return;
        throw new LeaseholdError('E_NODE_FABRIC', `taking node ${index} off ${what}`, { cause: err });
      }
    },
    leftovers: () => findFabricLeftovers(identity, snapshot([])),
    async stop() {
      if (stopped) return;
      stopped = true;
      const ports = await portsOf(netnsPath).catch((err: unknown) => [
        `(its ports could not be read: ${err})`,
      ]);
      await holder.stop(1_000); // resolves when the holder has exited
      const left = findFabricLeftovers(identity, snapshot(ports));
      hold?.release();
      if (left.length > 0) throw new FabricLeftoverError(what, left);
    },
  };
}

/** The names of the links on the fabric's bridge. */
async function portsOf(netnsPath: string): Promise<string[]> {
  const out = await ipIn(netnsPath, ['-o', 'link', 'show', 'master', FABRIC_BRIDGE]);
  // "7: node1@if2: <BROADCAST,...> ...": the name ends at '@' or ':'.
  return out
    .split('\n')
    .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1])
    .filter((n): n is string => n !== undefined);
}

/** `ip -batch -` in the network namespace at `netnsPath`; rejects with ip's stderr. */
function ipBatch(netnsPath: string, lines: readonly string[]): Promise<string> {
  return ipIn(netnsPath, ['-batch', '-'], `${lines.join('\n')}\n`);
}

function ipIn(netnsPath: string, args: readonly string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('nsenter', [`--net=${netnsPath}`, '--', 'ip', ...args], {
      stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout?.on('data', (c) => {
      out += c;
    });
    child.stderr?.on('data', (c) => {
      err += c;
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve(out);
      else reject(new Error(`ip ${args.join(' ')} in ${netnsPath} exited ${code}: ${err.trim()}`));
    });
    // An ip that fails early closes its stdin: its exit code and stderr say why, not EPIPE.
    child.stdin?.on('error', () => {});
    child.stdin?.end(input);
  });
}

/** A node's use of its cluster's fabric: `release()` once, at the node's stop. */
export interface FabricUse {
  readonly fabric: Fabric;
  /** The last user's release stops the fabric (and throws its leftovers). Idempotent. */
  release(): Promise<void>;
}

const shared = new Map<string, { started: Promise<Fabric>; users: number }>();

/** The fabric of the cluster whose dir is `clusterDir` (started by its first user, in `logDir`). */
export async function sharedFabric(
  clusterDir: string,
  logDir: string,
  holder: readonly string[],
): Promise<FabricUse> {
  let entry = shared.get(clusterDir);
  if (!entry) {
    const started = startFabric({ logPath: join(logDir, 'node-fabric.log'), holder, owner: clusterDir });
    const made = { started, users: 0 };
    shared.set(clusterDir, made);
    started.catch(() => {
      if (shared.get(clusterDir) === made) shared.delete(clusterDir);
    });
    entry = made;
  }
  const mine = entry;
  mine.users++;
  let fabric: Fabric;
  try {
    fabric = await mine.started;
  } catch (err) {
    mine.users--;
    throw err;
  }
  let released = false;
  return {
    fabric,
    async release() {
      if (released) return;
      released = true;
      mine.users--;
      if (mine.users > 0) return;
      if (shared.get(clusterDir) === mine) shared.delete(clusterDir);
      await fabric.stop();
    },
  };
}
