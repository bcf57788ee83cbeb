/**
 * The fault switches of one real node (crash, freeze, partition, heal, state, faults):
 * the state machine and the order of each fault's steps. The machine-level work (killing
 * a boot, booting again) is the node's (node.ts), reached through FaultTarget.
 *
 * Invariants: every fault starts from `running` (else NodeFaultError naming the
 * state), but a crash may also come to a frozen node (a frozen machine powered off: its
 * processes are SIGKILLed while frozen and die at the thaw without running again); heal() undoes any and is a no-op when running or stopped; a fault is recorded
 * before its effects so that timelines measured from it do not start late; a crash
 * silences the API link and takes the node off the fabric (fabric.ts) before any
 * process dies, so no FIN, RST or ICMP of the dying node reaches the API server or
 * another node. freeze() and partition() leave the fabric alone: a frozen node's
 * kernel still answers its peers, and a partition is from the API server only. Not guaranteed: a heal after a crash whose boot fails leaves
 * the node `crashed` (the error is the boot's; stop() still cleans up).
 */
import { monotonicMs } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import type { ApiLink } from './api-link.ts';
import { freezeNode, thawNode } from './freezer.ts';

/** The node's state: `crashed` until heal() has booted the node again. */
export type RealNodeState = 'running' | 'crashed' | 'frozen' | 'partitioned' | 'stopped';

/** One fault or heal, in the order they happened (RealNode.faults). */
export interface RealNodeFault {
  node: string;
  fault: 'crash' | 'freeze' | 'partition' | 'heal';
  detail?: string;
  monoMs: number;
  wall: Date;
}

export class NodeFaultError extends LeaseholdError {
  constructor(node: string, fault: string, state: RealNodeState) {
    super('E_NODE_FAULT', `real node ${node}: cannot ${fault} while ${state}; heal() first`);
  }
}

/** What the faults need of the node. */
export interface FaultTarget {
  readonly name: string;
  readonly cgroupRoot: string;
  readonly link: ApiLink;
  /** The pid namespace of the running boot (/proc/PID/ns/pid), if any. */
  pidNs(): string | undefined;
  /** Adds (true) or removes the API server's egress route to the node. */
  route(on: boolean): Promise<void>;
  /** Takes the machine off the fabric (its port and `eth0` deleted); the next boot attaches it again. */
  offFabric(): Promise<void>;
  /** Host pids of the processes run in the node's network namespace only (frozen with it). */
  spawned(): readonly number[];
  /** Kills every process of the boot at one instant and drops what a reboot loses. */
  powerOff(): Promise<void>;
  /** Boots the machine again on its dirs; resolves when the Node is Ready. */
  boot(): Promise<void>;
  progress(line: string): void;
}

export class NodeFaults {
  private current: RealNodeState = 'running';
  readonly faults: RealNodeFault[] = [];

  constructor(private readonly node: FaultTarget) {}

  get state(): RealNodeState {
    return this.current;
  }

  /** stop() has begun: every fault is refused from now on, heal() is a no-op. */
  stopped(): void {
    this.current = 'stopped';
  }

  async crash(): Promise<void> {
    if (this.current !== 'frozen') this.requireRunning('crash');
    this.current = 'crashed';
    this.record('crash');
    this.node.link.setMode('down');
    await this.node.route(false);
    await this.node.offFabric();
    await this.node.powerOff();
  }

  freeze(): void {
    this.requireRunning('freeze');
    const ns = this.node.pidNs();
    if (!ns) throw new LeaseholdError('E_NODE_FREEZE', `real node ${this.node.name} has no PID 1 to freeze`);
    this.current = 'frozen';
    this.record('freeze');
    freezeNode(ns, this.node.cgroupRoot, () => this.node.spawned());
  }

  partition(mode: 'close' | 'stall' = 'close'): void {
    this.requireRunning('partition');
    if (mode !== 'close' && mode !== 'stall')
      throw new LeaseholdError('E_NODE_FAULT', `partition mode '${String(mode)}' must be 'close' or 'stall'`);
    this.current = 'partitioned';
    this.record('partition', mode);
    this.node.link.setMode(mode);
    // NB: not awaited, so that partition() stays synchronous (a scenario's fault is one
    // call, its time recorded before it returns); removing a
    // file does not fail but for a missing one, which rm's force ignores.
    void this.node.route(false);
  }

  async heal(): Promise<void> {
    const was = this.current;
    if (was === 'running' || was === 'stopped') return;
    this.record('heal');
    if (was === 'frozen') thawNode(this.node.cgroupRoot);
    if (was === 'partitioned') {
      await this.node.route(true);
      this.node.link.setMode('pass');
    }
    if (was === 'crashed') {
      this.node.link.setMode('pass'); // resets what the dead machine left open
      await this.node.boot();
    }
    if (this.current === was) this.current = 'running';
  }

  private record(fault: RealNodeFault['fault'], detail?: string): void {
    this.faults.push({
      node: this.node.name,
      fault,
      ...(detail ? { detail } : {}),
      monoMs: monotonicMs(),
      wall: new Date(),
    });
    this.node.progress(`${this.node.name}: fault ${fault}${detail ? ` (${detail})` : ''}`);
  }

  private requireRunning(fault: string): void {
    if (this.current !== 'running') throw new NodeFaultError(this.node.name, fault, this.current);
  }
}
